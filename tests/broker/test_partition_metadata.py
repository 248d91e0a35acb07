"""Kafka's `partition.metadata` in every partition directory: the topic id that owns the log.

Real brokers (in-process) over real data dirs, stopped and started again.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from kbroker.testing import running_broker
from wire.records import Record, build_batch

PARTITION_METADATA = "partition.metadata"


def _kafka_uuid(topic_id) -> str:
    """Kafka's Uuid.toString: unpadded url-safe base64 of the 16 bytes."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def test_each_partition_dir_holds_the_topic_id_in_kafkas_format(tmp_path: Path):
    with running_broker(tmp_path) as broker:
        topic = broker.broker.create_topic("t", 2)
    for partition in range(2):
        text = (tmp_path / f"t-{partition}" / PARTITION_METADATA).read_text()
        assert text == f"version: 0\ntopic_id: {_kafka_uuid(topic.topic_id)}"


def test_a_partition_dir_without_partition_metadata_gets_it_on_the_next_start(tmp_path: Path):
    with running_broker(tmp_path) as broker:
        topic = broker.broker.create_topic("t", 1)
    (tmp_path / "t-0" / PARTITION_METADATA).unlink()  # as a data dir of an older kbroker
    with running_broker(tmp_path):
        pass
    assert (tmp_path / "t-0" / PARTITION_METADATA).read_text().endswith(_kafka_uuid(topic.topic_id))


def test_a_log_whose_partition_metadata_names_another_topic_id_is_deleted_not_served(tmp_path: Path):
    """What a topic deleted while its log dir was offline, then created again, leaves behind."""
    with running_broker(tmp_path) as broker:
        broker.broker.create_topic("t", 1)
        broker.broker.partition_log("t", 0).append(build_batch([Record(0, 1_000, None, b"old", [])]), 1_000)
    stray_id = _kafka_uuid(uuid.uuid4())
    (tmp_path / "t-0" / PARTITION_METADATA).write_text(f"version: 0\ntopic_id: {stray_id}")
    with running_broker(tmp_path) as broker:
        log = broker.broker.partition_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert stray_id not in (tmp_path / "t-0" / PARTITION_METADATA).read_text()
