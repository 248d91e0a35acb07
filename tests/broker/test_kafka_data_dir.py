"""A data directory Apache Kafka wrote is served by kbroker: topics kbroker's topics file does not name are
adopted from their partition dirs, with their ids and configs from Kafka's KRaft metadata log
(`__cluster_metadata-0`), which itself is left alone. The metadata records here are encoded as Kafka's
ApiMessageAndVersion (frame version, type, version, then the flexible-version record); the real thing, a
log dir written by Kafka 4.x, is compat-tests/test_data_dir_swap.py."""

from __future__ import annotations

import uuid
from pathlib import Path

from kbroker import config as broker_config
from kbroker.broker import TOPICS_FILE, Broker
from kbroker.log.kraft_metadata import read_kraft_topics
from wire.records import Record, build_batch, iter_records

TOPIC_ID = uuid.UUID("d96fca1c-02b2-483d-b847-9d7a89498425")


def compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data  # short strings: a one-byte unsigned varint


def topic_record(name: str, topic_id: uuid.UUID) -> bytes:
    return b"\x00\x02\x00" + compact(name) + topic_id.bytes + b"\x00"


def config_record(topic: str, name: str, value: str | None) -> bytes:
    return b"\x00\x04\x00" + b"\x02" + compact(topic) + compact(name) + compact(value) + b"\x00"


def remove_topic_record(topic_id: uuid.UUID) -> bytes:
    return b"\x00\x09\x00" + topic_id.bytes + b"\x00"


def write_metadata(log_dir: Path, *values: bytes, file: str = "00000000000000000000.log") -> None:
    directory = log_dir / "__cluster_metadata-0"
    directory.mkdir(parents=True, exist_ok=True)
    records = [Record(offset, 0, None, value) for offset, value in enumerate(values)]
    (directory / file).write_bytes(build_batch(records))


def test_topic_and_config_records_give_each_topic_its_id_and_configs(tmp_path: Path) -> None:
    write_metadata(tmp_path, topic_record("orders", TOPIC_ID), config_record("orders", "cleanup.policy", "compact"),
                   config_record("orders", "retention.ms", "1000"), config_record("orders", "retention.ms", None))
    topics = read_kraft_topics(tmp_path)
    assert topics.ids == {"orders": TOPIC_ID}
    assert topics.configs == {"orders": {"cleanup.policy": "compact"}}


def test_a_removed_topic_is_forgotten(tmp_path: Path) -> None:
    write_metadata(tmp_path, topic_record("gone", TOPIC_ID), remove_topic_record(TOPIC_ID))
    assert read_kraft_topics(tmp_path).ids == {}


def test_the_newest_snapshot_replaces_the_log_records_before_its_end_offset(tmp_path: Path) -> None:
    """A snapshot ending at offset 1 holds the state up to there; only log records from offset 1 on apply."""
    write_metadata(tmp_path, topic_record("stale", uuid.uuid4()), topic_record("after", TOPIC_ID))
    write_metadata(tmp_path, topic_record("snapshotted", TOPIC_ID),
                   file="00000000000000000001-0000000001.checkpoint")
    assert set(read_kraft_topics(tmp_path).ids) == {"snapshotted", "after"}


def test_a_log_dir_without_a_metadata_log_has_no_kraft_topics(tmp_path: Path) -> None:
    assert read_kraft_topics(tmp_path) is None


def test_topics_on_disk_without_the_topics_file_are_adopted_with_their_ids_and_records(tmp_path: Path) -> None:
    """As after Kafka stopped: partition dirs with partition.metadata, no kbroker-topics.json. The topic keeps
    its id, partition count and records (a client's auto-create must not replace it as a stray log)."""
    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    topic = broker.create_topic("kept", 2)
    broker.logs.get("kept", 1).append(build_batch([Record(0, 5, b"k", b"v")]))
    broker.close()
    (tmp_path / TOPICS_FILE).unlink()
    write_metadata(tmp_path, topic_record("kept", topic.topic_id), config_record("kept", "cleanup.policy", "compact"))

    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    try:
        adopted = broker.topics["kept"]
        assert (adopted.topic_id, adopted.partitions) == (topic.topic_id, 2)
        assert adopted.configs == {"cleanup.policy": "compact"}
        assert broker.logs.get("kept", 1).log_end_offset == 1
        assert "__cluster_metadata" not in broker.topics
        assert broker.logs.get("__cluster_metadata", 0) is None
    finally:
        broker.close()
    assert (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").is_file()
    assert [record.value for record in iter_records((tmp_path / "kept-1" / "00000000000000000000.log").read_bytes())
            ] == [b"v"]


def test_with_kbrokers_topics_file_an_unknown_partition_dir_is_not_adopted(tmp_path: Path) -> None:
    """Once kbroker has served a data dir its topics file is the truth: a leftover dir (say of a topic deleted
    while its log dir was offline) does not come back as a topic."""
    Broker(broker_config.build({"log.dirs": str(tmp_path)})).close()
    (tmp_path / "leftover-0").mkdir()
    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    try:
        assert "leftover" not in broker.topics
    finally:
        broker.close()


def test_an_unreadable_metadata_log_adopts_the_topics_with_their_partition_metadata_ids(tmp_path: Path) -> None:
    """A torn or foreign `__cluster_metadata-0` is logged and skipped, not a reason to refuse to start."""
    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    topic = broker.create_topic("kept", 1)
    broker.close()
    (tmp_path / TOPICS_FILE).unlink()
    write_metadata(tmp_path, topic_record("kept", uuid.uuid4()))
    metadata_log = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    metadata_log.write_bytes(metadata_log.read_bytes()[:-3])  # the record's value cut short

    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    try:
        assert broker.topics["kept"].topic_id == topic.topic_id
    finally:
        broker.close()
