"""Produce with acks=all when min.insync.replicas is above the replica count (one broker, RF 1).

Kafka 3.7+ caps min.insync.replicas at the partition's replica count (KIP-966, KAFKA-15583): a topic
asking for 2 in-sync replicas with only one replica is written with acks=all, not refused with
NOT_ENOUGH_REPLICAS as before 3.7. Checked on Kafka 3.9 (ZooKeeper and KRaft) and 4.4, whether the
setting is the topic's or the broker's.
"""

from __future__ import annotations

import time
import uuid

import pytest

from wire.errors import ErrorCode
from wire.records import Record, build_batch

import differential as wd

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Produce: acks=all and min.insync.replicas")]

PRODUCE_VERSION = 9


def _now() -> int:
    return time.time_ns() // 1_000_000


def _create(conn: wd.Connection, configs: dict[str, str]) -> str:
    name = f"min-isr-{uuid.uuid4().hex[:10]}"
    request = wd.build("CreateTopicsRequest", 5, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": key, "value": value} for key, value in configs.items()]}], "timeout_ms": 30000})
    [created] = conn.call(19, 5, request).topics
    assert created.error_code == 0, created.error_message
    return name


def _produce(conn: wd.Connection, topic: str, acks: int):
    """Partition 0's answer to one Produce v9 of a one-record batch."""
    data = {"acks": acks, "timeout_ms": 30000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": build_batch([Record(0, _now(), b"k", b"v")])}]}]}
    response = conn.call(0, PRODUCE_VERSION, wd.build("ProduceRequest", PRODUCE_VERSION, data))
    return response.responses[0].partition_responses[0]


def _settled(conn: wd.Connection, topic: str) -> None:
    """A new topic's leader may refuse writes for a moment (NOT_LEADER_OR_FOLLOWER): wait for a first one."""
    wd.wait_for(lambda: _produce(conn, topic, 1).error_code == 0, f"a first write to {topic}")


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def min_isr_2_broker(own_broker) -> str:
    """A broker of the module's own whose min.insync.replicas property is 2."""
    return own_broker("min-isr-2", "min.insync.replicas=2").bootstrap


def test_acks_all_is_written_when_the_topic_min_insync_replicas_exceeds_its_replicas(conn):
    topic = _create(conn, {"min.insync.replicas": "2"})
    _settled(conn, topic)
    answer = _produce(conn, topic, -1)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 1)


def test_acks_all_is_written_when_the_broker_min_insync_replicas_exceeds_the_replicas(min_isr_2_broker):
    conn = wd.Connection(min_isr_2_broker)
    try:
        topic = _create(conn, {})
        _settled(conn, topic)
        answer = _produce(conn, topic, -1)
    finally:
        conn.close()
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 1)


@pytest.mark.client("confluent-kafka")
def test_a_confluent_kafka_acks_all_producer_delivers_to_a_min_insync_replicas_2_topic(conn, bootstrap):
    from confluent_kafka import Producer

    topic = _create(conn, {"min.insync.replicas": "2"})
    _settled(conn, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    delivered = []
    producer.produce(topic, b"value", partition=0, on_delivery=lambda error, message: delivered.append(
        (error, message.offset() if error is None else None)))
    producer.flush(30)
    assert delivered == [(None, 1)]
