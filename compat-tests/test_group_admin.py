"""Consumer-group administration, as `kafka-consumer-groups.sh` and operators' tools do it: list,
describe, delete, read committed offsets, reset them, and compute lag (high watermark minus
committed offset), through confluent-kafka's AdminClient and Java's Admin.
"""

from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from confluent_client import produce  # noqa: E402
from group_clients import commit_confluent, committed_confluent, java_harness  # noqa: E402
from settle import wait_for_partitions  # noqa: E402

LIST_DESCRIBE_DELETE = pytest.mark.scenario("Consumer group admin: list/describe/delete")
OFFSETS_AND_LAG = pytest.mark.scenario("Consumer group admin: offsets and lag")


@pytest.fixture(scope="module")
def bootstrap_servers(own_broker) -> str:
    """A broker of this module's own whose groups form at once (group.initial.rebalance.delay.ms=0)."""
    return own_broker("group-admin", "group.initial.rebalance.delay.ms=0").bootstrap


@pytest.fixture(scope="module")
def admin(bootstrap_servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers})


@pytest.fixture
def topic(admin: AdminClient) -> str:
    name = f"admin-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)])[name].result(15)
    wait_for_partitions(admin, name, 4)
    return name


@pytest.fixture
def group() -> str:
    return f"admin-g-{uuid.uuid4().hex[:8]}"


def _subscribed(bootstrap: str, group: str, topic: str, count: int = 1, received: list | None = None,
                **extra) -> list:
    """`count` consumers of `group` subscribed to `topic`, polled until each has partitions
    (records polled meanwhile go to `received`)."""
    consumers = [confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        **({k: f"{v}-{i}" for k, v in extra.items()})}) for i in range(count)]
    for consumer in consumers:
        consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(c.assignment() for c in consumers):
        for consumer in consumers:
            message = consumer.poll(0.1)
            if received is not None and message is not None and message.error() is None:
                received.append((message.partition(), message.offset()))
    assert all(c.assignment() for c in consumers)
    assert sum(len(c.assignment()) for c in consumers) == 4
    return consumers


def _close(consumers: list) -> None:
    for consumer in consumers:
        consumer.close()


def _group_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(15).topic_partitions}


# ---- list / describe / delete -----------------------------------------------------------------

@pytest.mark.client("confluent-kafka")
@LIST_DESCRIBE_DELETE
def test_list_consumer_groups_reports_each_group_with_its_state(bootstrap_servers, admin, topic, group) -> None:
    empty_group = f"{group}-offsets-only"
    commit_confluent(bootstrap_servers, empty_group, topic, {0: (1, "")})
    consumers = _subscribed(bootstrap_servers, group, topic)
    try:
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
        stable_only = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(15).valid
    finally:
        _close(consumers)
    assert (listed[group].state, listed[group].is_simple_consumer_group) == (ConsumerGroupState.STABLE, False)
    assert (listed[empty_group].state, listed[empty_group].is_simple_consumer_group) == (ConsumerGroupState.EMPTY,
                                                                                         True)
    assert group in {g.group_id for g in stable_only} and empty_group not in {g.group_id for g in stable_only}


@pytest.mark.client("confluent-kafka")
@LIST_DESCRIBE_DELETE
def test_describe_consumer_groups_shows_members_assignor_and_assignments(bootstrap_servers, admin, topic,
                                                                         group) -> None:
    consumers = _subscribed(bootstrap_servers, group, topic, count=2,
                            **{"group.instance.id": "static", "client.id": "describer"})
    try:
        described = admin.describe_consumer_groups([group])[group].result(15)
        member_ids = {c.memberid() for c in consumers}
        owned = {c.memberid(): sorted(tp.partition for tp in c.assignment()) for c in consumers}
    finally:
        _close(consumers)
    (broker_id,) = admin.list_topics(timeout=10).brokers
    assert (described.state, described.partition_assignor, described.is_simple_consumer_group) == (
        ConsumerGroupState.STABLE, "range", False)
    assert described.coordinator.id == broker_id
    assert {m.member_id for m in described.members} == member_ids
    assert {m.group_instance_id for m in described.members} == {"static-0", "static-1"}
    assert {m.client_id for m in described.members} == {"describer-0", "describer-1"}
    assert {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
            for m in described.members} == owned


@pytest.mark.client("confluent-kafka")
@LIST_DESCRIBE_DELETE
def test_delete_consumer_groups_removes_an_empty_group_but_refuses_one_with_members(bootstrap_servers, admin, topic,
                                                                                    group) -> None:
    empty_group = f"{group}-empty"
    commit_confluent(bootstrap_servers, empty_group, topic, {0: (5, "")})
    consumers = _subscribed(bootstrap_servers, group, topic)
    try:
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group])[group].result(15)
        admin.delete_consumer_groups([empty_group])[empty_group].result(15)
    finally:
        _close(consumers)
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    assert empty_group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    assert committed_confluent(bootstrap_servers, empty_group, topic, [0]) == {0: (None, None)}


# ---- offsets and lag ----------------------------------------------------------------------------

@pytest.mark.client("confluent-kafka")
@OFFSETS_AND_LAG
def test_list_consumer_group_offsets_returns_what_the_group_committed(bootstrap_servers, admin, topic, group) -> None:
    commit_confluent(bootstrap_servers, group, topic, {0: (3, "a"), 2: (9, "b")})
    assert _group_offsets(admin, group) == {(topic, 0): 3, (topic, 2): 9}


@pytest.mark.client("confluent-kafka")
@OFFSETS_AND_LAG
def test_alter_consumer_group_offsets_resets_where_the_group_resumes(bootstrap_servers, admin, topic, group) -> None:
    produce(bootstrap_servers, topic, [{"value": f"v{i}".encode(), "partition": 1} for i in range(10)])
    commit_confluent(bootstrap_servers, group, topic, {1: (8, "")})
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 1, 3)])])[group].result(15)
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(1, 3, None)]
    received: list[tuple[int, int]] = []
    consumers = _subscribed(bootstrap_servers, group, topic, received=received)
    try:
        deadline = time.monotonic() + 20
        while len(received) < 7 and time.monotonic() < deadline:
            message = consumers[0].poll(0.2)
            if message is not None and message.error() is None:
                received.append((message.partition(), message.offset()))
    finally:
        _close(consumers)
    assert received == [(1, offset) for offset in range(3, 10)]


@pytest.mark.client("confluent-kafka")
@OFFSETS_AND_LAG
def test_alter_consumer_group_offsets_of_a_group_with_members_is_refused(bootstrap_servers, admin, topic,
                                                                         group) -> None:
    commit_confluent(bootstrap_servers, group, topic, {0: (2, "")})
    consumers = _subscribed(bootstrap_servers, group, topic)
    try:
        altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
            TopicPartition(topic, 0, 1)])])[group].result(15)
        after = _group_offsets(admin, group)
    finally:
        _close(consumers)
    # Kafka refuses a commit without a generation while the group has members
    assert [(tp.partition, tp.error.code()) for tp in altered.topic_partitions] == [(0, KafkaError.UNKNOWN_MEMBER_ID)]
    assert after == {(topic, 0): 2}


@pytest.mark.client("confluent-kafka")
@OFFSETS_AND_LAG
def test_lag_is_the_high_watermark_minus_the_committed_offset(bootstrap_servers, admin, topic, group) -> None:
    produce(bootstrap_servers, topic, [{"value": b"x", "partition": p} for p, n in ((0, 10), (1, 4)) for _ in range(n)])
    commit_confluent(bootstrap_servers, group, topic, {0: (6, ""), 1: (4, "")})
    committed = _group_offsets(admin, group)
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)})
    high_watermarks = {(tp.topic, tp.partition): future.result(15).offset for tp, future in futures.items()}
    lag = {tp: high_watermarks[tp] - offset for tp, offset in committed.items()}
    assert high_watermarks == {(topic, 0): 10, (topic, 1): 4}
    assert lag == {(topic, 0): 4, (topic, 1): 0}


# ---- Java Admin ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory):
    return java_harness(tmp_path_factory)


def _of_type(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["type"] == kind]


@pytest.mark.client("java")
@LIST_DESCRIBE_DELETE
@OFFSETS_AND_LAG
def test_java_admin_lists_describes_and_reads_the_offsets_of_a_live_group(bootstrap_servers, java, topic,
                                                                          group) -> None:
    consumers = _subscribed(bootstrap_servers, group, topic, count=2, **{"client.id": "java-seen"})
    try:
        consumers[0].commit(offsets=[TopicPartition(topic, tp.partition, 2) for tp in consumers[0].assignment()],
                            asynchronous=False)
        lines = java.run("admin-groups", bootstrap_servers, group)
        owned = {c.memberid(): sorted(tp.partition for tp in c.assignment()) for c in consumers}
        committed = sorted(tp.partition for tp in consumers[0].assignment())
    finally:
        _close(consumers)
    listing = {line["group"]: line for line in _of_type(lines, "group_listing")}
    assert (listing[group]["state"], listing[group]["simple"]) == ("Stable", False)
    (description,) = _of_type(lines, "group_description")
    assert (description["state"], description["assignor"]) == ("Stable", "range")
    assert {m["member_id"]: m["partitions"] for m in description["members"]} == owned
    assert {m["client_id"] for m in description["members"]} == {"java-seen-0", "java-seen-1"}
    assert [(o["partition"], o["offset"]) for o in _of_type(lines, "group_offset")] == [(p, 2) for p in committed]


@pytest.mark.client("java")
@LIST_DESCRIBE_DELETE
@OFFSETS_AND_LAG
def test_java_admin_resets_offsets_then_deletes_the_group(bootstrap_servers, admin, java, topic, group) -> None:
    commit_confluent(bootstrap_servers, group, topic, {0: (8, ""), 3: (5, "")})
    java.run("admin-alter-offsets", bootstrap_servers, group, topic, "0:2", "3:0")
    reset = _group_offsets(admin, group)
    java.run("admin-delete-groups", bootstrap_servers, group)
    assert reset == {(topic, 0): 2, (topic, 3): 0}
    assert committed_confluent(bootstrap_servers, group, topic, [0, 3]) == {0: (None, None), 3: (None, None)}
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
