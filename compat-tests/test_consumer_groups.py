"""Consumer groups with confluent-kafka: committed offsets and classic rebalancing.

These tests start their own kbroker with `group.initial.rebalance.delay.ms=0`, so the first
generation of a group forms at once instead of after Kafka's three-second wait.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kbroker.testing import BrokerProcess  # noqa: E402


@pytest.fixture(scope="module")
def group_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    given = request.config.getoption("--bootstrap")
    if given:
        pytest.skip("needs its own kbroker (group.initial.rebalance.delay.ms=0)")
    broker = BrokerProcess(tmp_path_factory.mktemp("kbroker-groups"), "group.initial.rebalance.delay.ms=0").start()
    try:
        yield broker
    finally:
        broker.stop()


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"groups-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(15)
    return name


def _produce(bootstrap: str, topic: str, count: int, partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        if partition is None:
            producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
        else:
            producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    config.update(extra)
    return Consumer(config)


def test_assign_commit_is_read_back_by_committed(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 42
    finally:
        consumer.close()


def test_uncommitted_partition_reads_back_as_invalid_offset(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    consumer = _consumer(bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    try:
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == confluent_kafka.OFFSET_INVALID
    finally:
        consumer.close()


def _poll_values(consumer: Consumer, count: int, timeout: float = 30) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    return values


def test_restarted_consumer_resumes_from_committed_offset(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, 10, partition=0)
    first = _consumer(bootstrap, group)
    try:
        first.subscribe([topic])
        assert _poll_values(first, 4) == [f"v{i}".encode() for i in range(4)]
        first.commit(asynchronous=False)
    finally:
        first.close()
    second = _consumer(bootstrap, group)
    try:
        second.subscribe([topic])
        assert _poll_values(second, 6) == [f"v{i}".encode() for i in range(4, 10)]
    finally:
        second.close()


def test_two_subscribers_split_the_partitions(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumers = [_consumer(bootstrap, group), _consumer(bootstrap, group)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for consumer in consumers:
                consumer.poll(0.2)
            assigned = [{tp.partition for tp in c.assignment()} for c in consumers]
            if all(len(a) == 2 for a in assigned):
                break
        assert assigned[0] | assigned[1] == {0, 1, 2, 3}
        assert assigned[0].isdisjoint(assigned[1])
        assert [len(a) for a in assigned] == [2, 2]
    finally:
        for consumer in consumers:
            consumer.close()


def test_committed_offsets_survive_a_broker_restart(tmp_path) -> None:
    broker = BrokerProcess(tmp_path, "group.initial.rebalance.delay.ms=0").start()
    try:
        topic = _topic(broker.bootstrap, 2)
        consumer = _consumer(broker.bootstrap, "durable-group")
        consumer.commit(offsets=[TopicPartition(topic, 1, 7)], asynchronous=False)
        consumer.close()
        broker.stop()
        broker.start()
        consumer = _consumer(broker.bootstrap, "durable-group")
        [committed] = consumer.committed([TopicPartition(topic, 1)], timeout=10)
        consumer.close()
        assert committed.offset == 7
    finally:
        broker.stop()


def test_admin_lists_describes_and_deletes_an_empty_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(15)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(15)
    assert described.state == confluent_kafka.ConsumerGroupState.EMPTY
    admin.delete_consumer_groups([group])[group].result(15)
    fresh = _consumer(bootstrap, group)
    try:
        [committed] = fresh.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == confluent_kafka.OFFSET_INVALID
    finally:
        fresh.close()


def test_group_with_members_is_described_stable_with_its_assignment(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(15)
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        [member] = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    finally:
        consumer.close()


def test_stable_group_keeps_its_member_across_a_broker_restart(tmp_path) -> None:
    broker = BrokerProcess(tmp_path, "group.initial.rebalance.delay.ms=0").start()
    consumer = None
    try:
        topic = _topic(broker.bootstrap, 1)
        consumer = _consumer(broker.bootstrap, "restart-group")
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        member_id = consumer.memberid()
        broker.stop()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups(["restart-group"])["restart-group"].result(15)
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        assert [m.member_id for m in described.members] == [member_id]
        _produce(broker.bootstrap, topic, 3, partition=0)
        assert _poll_values(consumer, 3) == [b"v0", b"v1", b"v2"]
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()


def test_remaining_subscriber_takes_over_when_the_other_leaves(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    stays, leaves = _consumer(bootstrap, group), _consumer(bootstrap, group)
    try:
        stays.subscribe([topic])
        leaves.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(stays.assignment()) == 2 and len(leaves.assignment()) == 2):
            stays.poll(0.2)
            leaves.poll(0.2)
        leaves.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(stays.assignment()) != 4:
            stays.poll(0.2)
        assert {tp.partition for tp in stays.assignment()} == {0, 1, 2, 3}
    finally:
        stays.close()
