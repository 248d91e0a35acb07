"""A KIP-848 (`group.protocol=consumer`) consumer carries on across a clean broker restart.

kbroker persists KIP-848 groups in `__consumer_offsets` as Kafka does, so after a restart on
the same data directory and port the member's next heartbeat, with its old member id and
epoch, is accepted: librdkafka keeps its partitions and fetch positions (no revoke, no lost
partitions), so nothing is read twice, not even what was consumed but never committed.
Starts its own kbroker (a restart needs one), with a 500 ms heartbeat interval.
"""

from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from group_clients import skip_without_heartbeat_v1  # noqa: E402
from settle import wait_for_partitions  # noqa: E402

SCENARIO = "Consumer group protocol: consumer (KIP-848)"
pytestmark = [pytest.mark.client("confluent-kafka"), pytest.mark.scenario(SCENARIO)]
# Kafka refuses a heartbeat interval below group.consumer.min.heartbeat.interval.ms (5 s by default)
HEARTBEAT = ("group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=500")
PARTITIONS = 2
TIMEOUT_S = 30


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def _poll(consumer: Consumer, received: list[bytes], until: int, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while len(received) < until and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None:
            assert message.error() is None, message.error()
            received.append(message.value())
    assert len(received) >= until, f"only {len(received)} of {until} records within {timeout} s"


def _keep_polling(consumer: Consumer, received: list[bytes], seconds: float) -> None:
    """Serve heartbeats (and any rebalance) for a while; anything delivered is recorded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            received.append(message.value())


def test_a_consumer_keeps_its_partitions_and_positions_across_a_broker_restart(fresh_broker) -> None:
    process = fresh_broker("kip848-restart", *HEARTBEAT)
    skip_without_heartbeat_v1(process.bootstrap)
    consumer = None
    try:
        bootstrap = process.bootstrap
        topic = f"kip848-restart-{uuid.uuid4().hex[:10]}"
        group = f"kip848-restart-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client cancels its futures
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(15)
        wait_for_partitions(admin, topic, PARTITIONS)
        _produce(bootstrap, topic, 0, 10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        lost: list[str] = []  # revocations and lost partitions: what a fenced or unknown member goes through
        consumer.subscribe([topic], on_revoke=lambda _, parts: lost.append(f"revoked {parts}"),
                           on_lost=lambda _, parts: lost.append(f"lost {parts}"))
        received: list[bytes] = []
        _poll(consumer, received, 10)
        consumer.commit(asynchronous=False)
        _produce(bootstrap, topic, 10, 4)
        _poll(consumer, received, 14)  # consumed, never committed
        member_id = consumer.memberid()

        process.stop()  # SIGTERM: a clean shutdown
        process.start()  # same port, same data
        _produce(bootstrap, topic, 14, 6)
        _poll(consumer, received, 20)
        _keep_polling(consumer, received, 3)  # six heartbeat intervals against the restarted broker

        assert sorted(received) == sorted(f"v{i}".encode() for i in range(20))  # each exactly once
        assert lost == []
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        description = admin.describe_consumer_groups([group])[group].result(15)
        assert description.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in description.members] == [member_id]
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 10]
    finally:
        if consumer is not None:
            consumer.close()
