"""A data directory moves between Apache Kafka and kbroker (docs/operations.md, "Moving a data directory
between Kafka and kbroker").

Kafka 4.x (KRaft, one node) writes a log dir: a topic in lz4 with keys, headers and explicit timestamps, a
compacted topic, committed offsets with metadata. What clients read from Kafka is the expected answer. Kafka
stops, kbroker starts over the same directory (node.id as in its meta.properties) and clients must read the
same records at the same offsets and timestamps, the same commits, the same topic ids and configs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from kbroker.testing import BrokerProcess

import group_clients
import java_harness
import kafka_process
import settle

pytestmark = [pytest.mark.client("confluent-kafka"), pytest.mark.scenario("Data directory moved from Kafka")]
LZ4, COMPACTED, GROUP = "lz4-headers", "compacted", "swap-group"
COMMITS = {0: (7, "seven"), 1: (3, "three")}
TIMEOUT = 30
Seen = list[tuple[int, int, bytes | None, bytes | None, list]]


@dataclass
class Observed:
    """What a client sees of the data directory on one broker."""

    records: dict[tuple[str, int], Seen]
    committed: dict
    topic_ids: dict[str, str]
    compacted_policy: str


def write_workload(bootstrap: str) -> None:
    settle.create_topic(bootstrap, LZ4, 2)
    settle.create_topic(bootstrap, COMPACTED, 1, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for index in range(40):
        producer.produce(LZ4, key=f"k{index}", value=f"value-{index}", partition=index % 2,
                         timestamp=1_700_000_000_000 + index * 1000, headers=[("index", str(index).encode()),
                                                                               ("empty", None)])
        producer.produce(COMPACTED, key=f"key-{index % 4}", value=f"round-{index // 4}")
    assert producer.flush(TIMEOUT) == 0
    group_clients.commit_confluent(bootstrap, GROUP, LZ4, COMMITS)


def read_partition(bootstrap: str, topic: str, partition: int) -> Seen:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen = []
    try:
        while (message := consumer.poll(TIMEOUT)) is not None and not message.error():
            seen.append((message.offset(), message.timestamp()[1], message.key(), message.value(),
                         message.headers() or []))
        assert message is not None, f"{topic}-{partition}: no end of partition within {TIMEOUT} s"
    finally:
        consumer.close()
    return seen


def observe(bootstrap: str) -> Observed:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.describe_topics(TopicCollection([LZ4, COMPACTED]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, COMPACTED)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return Observed(
        records={(topic, partition): read_partition(bootstrap, topic, partition)
                 for topic, partition in ((LZ4, 0), (LZ4, 1), (COMPACTED, 0))},
        committed=group_clients.committed_confluent(bootstrap, GROUP, LZ4, [0, 1]),
        topic_ids={name: str(future.result(TIMEOUT).topic_id) for name, future in topics.items()},
        compacted_policy=configs["cleanup.policy"].value,
    )


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Observed, Observed, str]]:
    """(seen on Kafka, seen on kbroker over Kafka's log dir, kbroker's bootstrap)."""
    workdir = tmp_path_factory.mktemp("swap")
    kafka = kafka_process.KafkaProcess(workdir, "4")
    try:
        with kafka.started():
            write_workload(kafka.bootstrap)
            on_kafka = observe(kafka.bootstrap)
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"cannot start Apache Kafka: {error}")
    with contextlib.ExitStack() as stack:
        broker = BrokerProcess(kafka.log_dir, f"node.id={kafka.node_id}")
        stack.callback(broker.stop)
        broker.start()
        yield on_kafka, observe(broker.bootstrap), broker.bootstrap


def test_kbroker_serves_kafkas_records_with_the_same_offsets_timestamps_and_headers(swapped) -> None:
    on_kafka, on_kbroker, _ = swapped
    assert sum(len(seen) for seen in on_kafka.records.values()) >= 40 + 4
    assert on_kbroker.records == on_kafka.records


def test_kbroker_serves_the_offsets_committed_on_kafka(swapped) -> None:
    on_kafka, on_kbroker, _ = swapped
    assert on_kafka.committed == COMMITS
    assert on_kbroker.committed == on_kafka.committed


def test_topics_keep_their_ids_and_configs_from_kafkas_metadata_log(swapped) -> None:
    """Topic ids and the compacted topic's cleanup.policy live only in Kafka's metadata log."""
    on_kafka, on_kbroker, _ = swapped
    assert on_kbroker.topic_ids == on_kafka.topic_ids
    assert on_kbroker.compacted_policy == on_kafka.compacted_policy == "compact"


def test_kbroker_appends_after_kafkas_last_offset(swapped) -> None:
    on_kafka, _, bootstrap = swapped
    producer = Producer({"bootstrap.servers": bootstrap})
    delivered = []
    producer.produce(LZ4, value=b"after the move", partition=0, on_delivery=lambda _, message: delivered.append(
        message.offset()))
    assert producer.flush(TIMEOUT) == 0
    assert delivered == [len(on_kafka.records[(LZ4, 0)])]
