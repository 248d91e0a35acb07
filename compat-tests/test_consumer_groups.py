"""Consumer groups with confluent-kafka: committed offsets and classic rebalancing.

These tests start their own kbroker with `group.initial.rebalance.delay.ms=0`, so the first
generation of a group forms at once instead of after Kafka's three-second wait.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from kbroker.testing import BrokerProcess  # noqa: E402

from group_clients import once_coordinator_ready  # noqa: E402
from settle import create_topic  # noqa: E402

pytestmark = pytest.mark.client("confluent-kafka")


@pytest.fixture(scope="module")
def group_broker(own_broker):
    return own_broker("groups", "group.initial.rebalance.delay.ms=0")


def _topic(bootstrap: str, partitions: int) -> str:
    return create_topic(bootstrap, f"groups-{uuid.uuid4().hex[:12]}", partitions)


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


@pytest.mark.scenario("Consumer group: subscribe and commit")
def test_assign_commit_is_read_back_by_committed(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        once_coordinator_ready(lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False))
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 42
    finally:
        consumer.close()


@pytest.mark.scenario("Consumer group: subscribe and commit")
def test_uncommitted_partition_reads_back_as_invalid_offset(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    consumer = _consumer(bootstrap, f"g-{uuid.uuid4().hex[:8]}")
    try:
        [committed] = once_coordinator_ready(lambda: consumer.committed([TopicPartition(topic, 0)], timeout=10))
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


@pytest.mark.scenario("Consumer group: resume from committed offsets")
def test_restarted_consumer_resumes_from_committed_offset(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, 10, partition=0)
    first = _consumer(bootstrap, group)
    try:
        first.subscribe([topic])
        assert _poll_values(first, 4) == [f"v{i}".encode() for i in range(4)]
        once_coordinator_ready(lambda: first.commit(asynchronous=False))
    finally:
        first.close()
    second = _consumer(bootstrap, group)
    try:
        second.subscribe([topic])
        assert _poll_values(second, 6) == [f"v{i}".encode() for i in range(4, 10)]
    finally:
        second.close()


@pytest.mark.scenario("Consumer group: rebalance")
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


@pytest.mark.scenario("Consumer group: resume from committed offsets")
def test_committed_offsets_survive_a_broker_restart(fresh_broker) -> None:
    broker = fresh_broker("durable-group", "group.initial.rebalance.delay.ms=0")
    try:
        topic = _topic(broker.bootstrap, 2)
        consumer = _consumer(broker.bootstrap, "durable-group")
        once_coordinator_ready(lambda: consumer.commit(offsets=[TopicPartition(topic, 1, 7)], asynchronous=False))
        consumer.close()
        broker.stop()
        broker.start()
        consumer = _consumer(broker.bootstrap, "durable-group")
        [committed] = once_coordinator_ready(lambda: consumer.committed([TopicPartition(topic, 1)], timeout=10))
        consumer.close()
        assert committed.offset == 7
    finally:
        broker.stop()


@pytest.mark.scenario("Consumer group admin: list/describe/delete")
def test_admin_lists_describes_and_deletes_an_empty_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    once_coordinator_ready(lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False))
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


@pytest.mark.scenario("Consumer group admin: list/describe/delete")
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


@pytest.mark.scenario("Consumer group: rebalance")
def test_stable_group_keeps_its_member_across_a_broker_restart(fresh_broker) -> None:
    broker = fresh_broker("restart-group", "group.initial.rebalance.delay.ms=0")
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
        described = once_coordinator_ready(
            lambda: admin.describe_consumer_groups(["restart-group"])["restart-group"].result(15))
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        assert [m.member_id for m in described.members] == [member_id]
        _produce(broker.bootstrap, topic, 3, partition=0)
        assert _poll_values(consumer, 3) == [b"v0", b"v1", b"v2"]
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()


@pytest.mark.scenario("Consumer group: rebalance")
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


# ---- a member that dies without leaving -----------------------------------------------------------

COMMITTING_CONSUMER = Path(__file__).parent / "committing_consumer.py"
RECORDS_PER_PARTITION = 50


def _events_of(process: subprocess.Popen) -> queue.Queue:
    """The JSON lines a committing_consumer.py process prints, as they arrive."""
    events: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            if line.startswith("{"):
                events.put(json.loads(line))

    threading.Thread(target=pump, daemon=True).start()
    return events


def _take_events(events: queue.Queue, assigned: list, committed: dict[int, int]) -> None:
    while not events.empty():
        event = events.get_nowait()
        if "assigned" in event:
            assigned[:] = event["assigned"]
        else:
            partition, offset = event["committed"]
            committed[partition] = offset


def _poll_and_commit(consumer: Consumer, seen: list[tuple[int, int]]) -> None:
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        seen.append((message.partition(), message.offset()))
        consumer.commit(message=message, asynchronous=False)


@pytest.mark.scenario("Consumer group: rebalance")
def test_killed_member_loses_its_partitions_after_the_session_timeout_without_losing_commits(
        group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    survivor = _consumer(bootstrap, group)
    survivor.subscribe([topic])
    victim = subprocess.Popen([sys.executable, str(COMMITTING_CONSUMER), bootstrap, group, topic, "0.05"],
                              stdout=subprocess.PIPE, text=True)
    try:
        events = _events_of(victim)
        victim_assigned: list[int] = []
        victim_committed: dict[int, int] = {}
        survivor_seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(victim_assigned) == 2 and len(survivor.assignment()) == 2):
            _poll_and_commit(survivor, survivor_seen)
            _take_events(events, victim_assigned, victim_committed)
        assert len(victim_assigned) == 2 and len(survivor.assignment()) == 2

        _produce_per_partition(bootstrap, topic, 4, RECORDS_PER_PARTITION)
        while time.monotonic() < deadline and sum(victim_committed.values()) < 10:
            _poll_and_commit(survivor, survivor_seen)
            _take_events(events, victim_assigned, victim_committed)
        victim.send_signal(signal.SIGKILL)  # no LeaveGroup: only the session timeout can tell
        killed_at = time.monotonic()
        victim.wait(10)
        _take_events(events, victim_assigned, victim_committed)
        time.sleep(0.3)  # a commit the victim sent just before dying has landed by now
        committed_at_kill = {tp.partition: max(tp.offset, 0) for tp in survivor.committed(  # none yet: from 0
            [TopicPartition(topic, p) for p in victim_assigned], timeout=10)}

        taken_over_at = None
        survivor_seen.clear()
        left_by_victim = sum(RECORDS_PER_PARTITION - committed_at_kill[p] for p in victim_assigned)
        deadline = time.monotonic() + 60  # the takeover alone may take 20 s on a loaded machine
        # the survivor may still be reading its own partitions: only the victim's records count here
        while time.monotonic() < deadline and (taken_over_at is None or sum(
                1 for p, _ in survivor_seen if p in victim_assigned) < left_by_victim):
            _poll_and_commit(survivor, survivor_seen)
            if taken_over_at is None and len(survivor.assignment()) == 4:
                taken_over_at = time.monotonic()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        survivor.close()

    assert taken_over_at is not None, "the survivor never got the killed member's partitions"
    assert 4.5 <= taken_over_at - killed_at <= 20  # session.timeout.ms = 6000, not at once, not never
    for partition in victim_assigned:
        assert committed_at_kill[partition] - victim_committed.get(partition, 0) in (0, 1)
        offsets = sorted(o for p, o in survivor_seen if p == partition)
        # resumed exactly at the committed offset: nothing committed is read again, nothing is skipped
        assert offsets == list(range(committed_at_kill[partition], RECORDS_PER_PARTITION))


def _produce_per_partition(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


# ---- static membership (KIP-345) ------------------------------------------------------------------

def _wait_for(consumers: list[Consumer], condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        for consumer in consumers:
            consumer.poll(0.1)
    assert condition()


@pytest.mark.scenario("Consumer group: static membership")
def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = _topic(bootstrap, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    revoked: list[list[int]] = []
    stays = _consumer(bootstrap, group, **{"group.instance.id": "stays"})
    restarts = _consumer(bootstrap, group, **{"group.instance.id": "restarts"})
    restarted = None
    try:
        stays.subscribe([topic], on_revoke=lambda c, parts: revoked.append([p.partition for p in parts]))
        restarts.subscribe([topic])
        _wait_for([stays, restarts], lambda: len(stays.assignment()) == 2 and len(restarts.assignment()) == 2)
        owned = sorted(tp.partition for tp in restarts.assignment())
        old_member_id = restarts.memberid()
        revoked.clear()
        restarts.close()  # a static member sends no LeaveGroup: the broker keeps its place
        restarted = _consumer(bootstrap, group, **{"group.instance.id": "restarts"})
        restarted.subscribe([topic])
        _wait_for([stays, restarted], lambda: bool(restarted.assignment()))
        for _ in range(10):  # give a rebalance, if one were coming, the time to show
            stays.poll(0.1)
            restarted.poll(0.1)
        assert sorted(tp.partition for tp in restarted.assignment()) == owned
        assert revoked == [] and len(stays.assignment()) == 2
        admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future it answers
        described = admin.describe_consumer_groups([group])[group].result(15)
        assert {m.group_instance_id for m in described.members} == {"stays", "restarts"}
        assert old_member_id not in {m.member_id for m in described.members}
        assert restarted.memberid().startswith("restarts-")
    finally:
        stays.close()
        if restarted is not None:
            restarted.close()
