"""The KIP-848 consumer group protocol (`group.protocol=consumer`): the broker assigns partitions.

confluent-kafka (librdkafka 2.x) and the Java kafka-clients consumer (3.9 and 4.x) join groups with
ConsumerGroupHeartbeat and commit with the member epoch (OffsetCommit v9+). Unless a broker is
given (--bootstrap, --target), these tests start their own kbroker with a 500 ms
`group.consumer.heartbeat.interval.ms` (Kafka's default is 5 s), so reassignments settle fast.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from dataclasses import dataclass

import pytest

from java_harness import JavaHarness, compile_harness, generations

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from group_clients import skip_without_consumer_protocol, skip_without_heartbeat_v1  # noqa: E402
from settle import create_topic  # noqa: E402

SCENARIO = "Consumer group protocol: consumer (KIP-848)"
pytestmark = pytest.mark.scenario(SCENARIO)
SETTLE_S = 30
# Kafka refuses a heartbeat interval below group.consumer.min.heartbeat.interval.ms (5 s by default)
HEARTBEAT = ("group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=500")


@pytest.fixture(scope="module")
def broker(own_broker) -> str:
    return own_broker("kip848", *HEARTBEAT).bootstrap


@pytest.fixture
def heartbeat_v1(broker: str) -> None:
    """librdkafka's members need ConsumerGroupHeartbeat v1 (group_clients.skip_without_heartbeat_v1)."""
    skip_without_heartbeat_v1(broker)


@pytest.fixture
def consumer_protocol(broker: str) -> None:
    """Java's members need ConsumerGroupHeartbeat v0 or later (group_clients.skip_without_consumer_protocol)."""
    skip_without_consumer_protocol(broker)


def _topic(bootstrap: str, partitions: int) -> str:
    return create_topic(bootstrap, f"kip848-{uuid.uuid4().hex[:12]}", partitions)


def _produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(15) == 0


def _group() -> str:
    return f"kip848-{uuid.uuid4().hex[:12]}"


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    config.update(extra)
    return Consumer(config)


def _assignments(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in consumer.assignment()} for consumer in consumers]


def _poll_until(consumers: list[Consumer], done, timeout: float = SETTLE_S) -> dict[int, list]:
    """Poll every consumer in turn until `done(received)`; received: consumer index -> messages."""
    received: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is not None:
                assert message.error() is None, message.error()
                received[i].append(message)
        if done(received):
            return received
    raise AssertionError(f"not done within {timeout} s: assignments {_assignments(consumers)}, "
                         f"received {[len(m) for m in received.values()]}")


def _settled(consumers: list[Consumer], partitions: int) -> bool:
    """Every consumer has partitions, none shared, none missing."""
    assigned = _assignments(consumers)
    union = set().union(*assigned)
    return all(assigned) and sum(map(len, assigned)) == len(union) == partitions


def _close(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        consumer.close()


# ---- confluent-kafka ------------------------------------------------------------------------

@pytest.mark.client("confluent-kafka")
def test_three_consumers_split_the_partitions_disjointly_and_completely(broker, heartbeat_v1):
    topic = _topic(broker, 6)
    group = _group()
    consumers = [_consumer(broker, group) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        # KIP-848 moves partitions a few at a time: wait past disjoint-but-uneven steps on the way
        _poll_until(consumers, lambda _: _settled(consumers, 6) and len({len(a) for a in _assignments(consumers)}) == 1)
        assert sorted(len(a) for a in _assignments(consumers)) == [2, 2, 2]
    finally:
        _close(consumers)


@pytest.mark.client("confluent-kafka")
def test_the_group_reads_every_record(broker, heartbeat_v1):
    topic = _topic(broker, 4)
    _produce(broker, topic, 4, 80)
    group = _group()
    consumers = [_consumer(broker, group) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def everything(received):
            return {m.value() for ms in received.values() for m in ms} == {f"v{i}".encode() for i in range(80)}

        received = _poll_until(consumers, everything)
        by_partition = {}
        for messages in received.values():
            for m in messages:
                by_partition.setdefault(m.partition(), set()).add(m.offset())
        assert by_partition == {p: set(range(20)) for p in range(4)}
    finally:
        _close(consumers)


@pytest.mark.client("confluent-kafka")
def test_a_new_consumer_resumes_from_the_committed_offsets(broker, heartbeat_v1):
    topic = _topic(broker, 2)
    _produce(broker, topic, 2, 20)
    group = _group()
    first = _consumer(broker, group)
    try:
        first.subscribe([topic])
        _poll_until([first], lambda received: len(received[0]) == 20)
        first.commit(asynchronous=False)
    finally:
        first.close()
    _produce(broker, topic, 2, 10, start=20)
    second = _consumer(broker, group)
    try:
        second.subscribe([topic])
        received = _poll_until([second], lambda received: len(received[0]) >= 10)[0]
        assert sorted(m.value() for m in received) == sorted(f"v{i}".encode() for i in range(20, 30))
        committed = second.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 10]
    finally:
        second.close()


@pytest.mark.client("confluent-kafka")
def test_a_leaving_consumer_hands_its_partitions_to_the_others(broker, heartbeat_v1):
    topic = _topic(broker, 4)
    group = _group()
    stays, leaves = _consumer(broker, group), _consumer(broker, group)
    try:
        for consumer in (stays, leaves):
            consumer.subscribe([topic])
        _poll_until([stays, leaves], lambda _: _settled([stays, leaves], 4))
        leaves.close()
        _poll_until([stays], lambda _: _settled([stays], 4))
    finally:
        stays.close()


@pytest.mark.client("confluent-kafka")
def test_a_regex_subscription_is_resolved_by_the_broker(broker, heartbeat_v1):
    prefix = f"kip848re{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    names = [f"{prefix}-a", f"{prefix}-b"]
    for future in admin.create_topics([NewTopic(n, num_partitions=2, replication_factor=1) for n in names]).values():
        future.result(15)
    consumer = _consumer(broker, _group())
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        _poll_until([consumer], lambda _: len(consumer.assignment()) == 4)
        assert {(tp.topic, tp.partition) for tp in consumer.assignment()} == {(n, p) for n in names for p in (0, 1)}
    finally:
        consumer.close()


@pytest.mark.client("confluent-kafka")
def test_admin_describes_the_group_as_a_consumer_protocol_group(broker, heartbeat_v1):
    topic = _topic(broker, 3)
    group = _group()
    consumer = _consumer(broker, group)
    admin = AdminClient({"bootstrap.servers": broker})
    try:
        consumer.subscribe([topic])
        _poll_until([consumer], lambda _: _settled([consumer], 3))
        description = admin.describe_consumer_groups([group])[group].result(15)
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15)
    finally:
        consumer.close()
    assert description.type == ConsumerGroupType.CONSUMER
    assert description.partition_assignor == "uniform"
    assert [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in description.members] == [[0, 1, 2]]
    assert group in {g.group_id for g in listed.valid}


@pytest.mark.client("confluent-kafka")
def test_members_rejoin_after_a_broker_restart(fresh_broker):
    """After a restart of the broker the member carries on from its committed offsets, reading every record once."""
    process = fresh_broker("kip848-restart", *HEARTBEAT)
    skip_without_heartbeat_v1(process.bootstrap)
    consumer = None
    try:
        topic = _topic(process.bootstrap, 2)
        _produce(process.bootstrap, topic, 2, 10)
        consumer = _consumer(process.bootstrap, _group())
        consumer.subscribe([topic])
        before = _poll_until([consumer], lambda received: len(received[0]) == 10)[0]
        consumer.commit(asynchronous=False)
        process.stop()
        process.start()  # same port, same data
        _produce(process.bootstrap, topic, 2, 10, start=10)
        after = _poll_until([consumer], lambda received: len(received[0]) == 10)[0]
        assert sorted(m.value() for m in before + after) == sorted(f"v{i}".encode() for i in range(20))
    finally:
        if consumer is not None:
            consumer.close()


# ---- Java kafka-clients 3.9 and 4.x ---------------------------------------------------------

@dataclass
class GroupHarness:
    harness: JavaHarness

    def start(self, *args: object) -> subprocess.Popen:
        return subprocess.Popen(self.harness.command("ConsumerGroupHarness", *args), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)

    @staticmethod
    def finish(process: subprocess.Popen, timeout: float = 120) -> list[dict]:
        try:
            stdout, _ = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        assert process.returncode == 0, f"ConsumerGroupHarness exited {process.returncode}: {lines[-1:]}"
        return lines

    def run(self, *args: object) -> list[dict]:
        return self.finish(self.start(*args))


@generations("module")
def java_group(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GroupHarness:
    """ConsumerGroupHarness.java on each kafka-clients generation: the protocol is a preview in 3.9, GA in 4.0."""
    return GroupHarness(compile_harness(tmp_path_factory.mktemp(f"java-group-{request.param}"), request.param))


def _records(lines: list[dict]) -> set[tuple[int, int]]:
    return {(line["partition"], line["offset"]) for line in lines if line["type"] == "record"}


def _member_assignments(lines: list[dict]) -> list[set[int]]:
    return [set(line["partitions"]) for line in lines if line["type"] == "assignment"]


@pytest.mark.client("java")
def test_java_consumers_split_the_partitions_and_read_every_record(java_group, broker, consumer_protocol):
    topic = _topic(broker, 4)
    _produce(broker, topic, 4, 40)
    lines = java_group.run("group-consume", broker, topic, _group(), 2, 40, "consumer")
    first, second = _member_assignments(lines)
    assert first and second and first.isdisjoint(second) and first | second == {0, 1, 2, 3}
    assert _records(lines) == {(p, o) for p in range(4) for o in range(10)}


@pytest.mark.client("java")
def test_java_consumer_resumes_from_the_offsets_it_committed(java_group, broker, consumer_protocol):
    topic = _topic(broker, 2)
    group = _group()
    _produce(broker, topic, 2, 20)
    first = java_group.run("group-consume", broker, topic, group, 1, 20, "consumer")
    _produce(broker, topic, 2, 10, start=20)
    second = java_group.run("group-consume", broker, topic, group, 1, 10, "consumer")
    assert _records(first) == {(p, o) for p in range(2) for o in range(10)}
    assert _records(second) == {(p, o) for p in range(2) for o in range(10, 15)}


@pytest.mark.client("java")
@pytest.mark.skipif("config.getoption('--target') == 'kafka' and config.getoption('--kafka-version') == '3.9'",
                    reason="librdkafka's KIP-848 consumer needs Kafka 4.0+: it finds Kafka 3.9's preview "
                           "ConsumerGroupHeartbeat 'not supported by broker' and never joins")
def test_java_and_confluent_consumers_share_one_group(java_group, broker, consumer_protocol):
    """Both clients speak the same broker-side protocol, so they can be members of one group."""
    topic = _topic(broker, 4)
    _produce(broker, topic, 4, 40)
    group = _group()
    other = _consumer(broker, group)
    seen: list[set[int]] = []
    try:
        other.subscribe([topic])
        _poll_until([other], lambda _: _settled([other], 4))
        java = java_group.start("group-consume", broker, topic, group, 1, 20, "consumer")
        deadline = time.monotonic() + 120
        while java.poll() is None and time.monotonic() < deadline:
            other.poll(0.05)  # keeps serving its rebalances while the Java member joins
            seen.append(_assignments([other])[0])
        lines = java_group.finish(java)
    finally:
        other.close()
    java_partitions = _member_assignments(lines)[0]
    assert len(java_partitions) == 2
    assert {0, 1, 2, 3} - java_partitions in seen  # the confluent member held exactly the rest meanwhile
