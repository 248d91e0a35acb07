"""Authorized operations (KIP-430): what a client may do with a topic, the cluster or a group.

Metadata, DescribeCluster, DescribeGroups (v3+) and ConsumerGroupDescribe answer, when the request asks,
a bit field of AclOperation codes (bit n for the operation with code n). With no authorizer, Kafka's
default, that is every operation the resource type supports; a request that does not ask gets
-2147483648 ("not requested"). Admin clients show the result as describe_topics/describe_cluster/
describe_consumer_groups(include_authorized_operations=True).

Groups gained DESCRIBE_CONFIGS and ALTER_CONFIGS in Kafka 4.0 (group configs); the same release brought
DescribeGroups v6 (KIP-1043), so the highest DescribeGroups version a broker serves tells which set it
answers: Kafka 3.9 has READ, DELETE, DESCRIBE.
"""

from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicCollection  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import differential as wd  # noqa: E402
from group_clients import api_versions, commit_confluent, skip_without_consumer_protocol  # noqa: E402
from java_harness import JavaHarness, compile_harness, generations  # noqa: E402
from settle import create_topic, eventually  # noqa: E402

pytestmark = pytest.mark.scenario("Authorized operations (KIP-430)")

# Kafka's AclOperation codes: a field's bit n stands for the operation with code n.
ACL_OPERATION_CODES = {"READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
                       "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
                       "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14}
NOT_REQUESTED = -(2**31)
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE"}
GROUP_OPERATIONS_BEFORE_KAFKA_4 = {"READ", "DELETE", "DESCRIBE"}
GROUP_CONFIG_OPERATIONS = {"DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
METADATA, DESCRIBE_GROUPS, DESCRIBE_CLUSTER, CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 3, 15, 60, 68, 69


def operation_names(field: int) -> set[str]:
    assert field != NOT_REQUESTED, "answered 'not requested'"
    return {name for name, code in ACL_OPERATION_CODES.items() if field & (1 << code)}


@pytest.fixture(scope="module")
def served(bootstrap: str) -> dict[int, tuple[int, int]]:
    return api_versions(bootstrap)


@pytest.fixture(scope="module")
def group_operations(served: dict[int, tuple[int, int]]) -> set[str]:
    """The group's set at the broker's level: Kafka 4 (DescribeGroups v6) adds the group-config operations."""
    kafka_4 = served[DESCRIBE_GROUPS][1] >= 6
    return GROUP_OPERATIONS_BEFORE_KAFKA_4 | (GROUP_CONFIG_OPERATIONS if kafka_4 else set())


@pytest.fixture(scope="module")
def connection(bootstrap: str):
    conn = wd.Connection(bootstrap)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    return create_topic(bootstrap, f"ops-{uuid.uuid4().hex[:10]}", 1)


@pytest.fixture(scope="module")
def group(bootstrap: str, topic: str) -> str:
    """A classic group known by a committed offset (Empty, no members)."""
    name = f"ops-g-{uuid.uuid4().hex[:8]}"
    commit_confluent(bootstrap, name, topic, {0: (0, "")})
    return name


def _metadata(connection, version: int, topics: list[dict] | None, topic_operations: bool,
              cluster_operations: bool = False):
    request = wd.build("MetadataRequest", version, {
        "topics": topics, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": topic_operations,
        "include_cluster_authorized_operations": cluster_operations})
    return connection.call(METADATA, version, request)


def _describe_groups(connection, version: int, groups: list[str], requested: bool):
    request = wd.build("DescribeGroupsRequest", version, {"groups": groups, "include_authorized_operations": requested})
    return connection.call(DESCRIBE_GROUPS, version, request).groups


def _consumer_group_describe(connection, groups: list[str], requested: bool):
    request = wd.build("ConsumerGroupDescribeRequest", 0, {"group_ids": groups,
                                                           "include_authorized_operations": requested})
    return connection.call(CONSUMER_GROUP_DESCRIBE, 0, request).groups


# ---- the wire -----------------------------------------------------------------------------------------------

@pytest.mark.client("wire")
def test_metadata_lists_topic_operations_for_every_topic_asked_by_name(connection, served, topic: str) -> None:
    names = [topic, f"ops-missing-{uuid.uuid4().hex[:8]}", "not/a/valid/name"]
    for version in range(8, min(served[METADATA][1], 13) + 1):
        answered = _metadata(connection, version, [{"name": name} for name in names], topic_operations=True).topics
        assert sorted(t.name for t in answered) == sorted(names), version
        for entry in answered:  # errors too: the unknown and the invalid name get the topic's operations
            assert operation_names(entry.topic_authorized_operations) == TOPIC_OPERATIONS, (version, entry.name)


@pytest.mark.client("wire")
def test_metadata_gives_no_topic_operations_to_an_unknown_topic_id(connection, served) -> None:
    version = min(served[METADATA][1], 13)
    if version < 12:
        pytest.skip(f"the broker serves Metadata up to v{version}; topics by id need v12")
    answered = _metadata(connection, version, [{"name": None, "topic_id": uuid.uuid4()}], topic_operations=True)
    assert [(t.error_code, t.topic_authorized_operations) for t in answered.topics] == [(100, NOT_REQUESTED)]


@pytest.mark.client("wire")
def test_metadata_v8_to_v10_lists_cluster_operations_on_request(connection, topic: str) -> None:
    for version in (8, 9, 10):
        answered = _metadata(connection, version, [{"name": topic}], topic_operations=False, cluster_operations=True)
        assert operation_names(answered.cluster_authorized_operations) == CLUSTER_OPERATIONS, version


@pytest.mark.client("wire")
def test_describe_cluster_lists_cluster_operations_on_request(connection, served) -> None:
    for version in range(0, min(served[DESCRIBE_CLUSTER][1], 2) + 1):
        request = wd.build("DescribeClusterRequest", version, {"include_cluster_authorized_operations": True,
                                                               "endpoint_type": 1})
        answered = connection.call(DESCRIBE_CLUSTER, version, request)
        assert operation_names(answered.cluster_authorized_operations) == CLUSTER_OPERATIONS, version


@pytest.mark.client("wire")
def test_describe_groups_v3_to_v5_lists_group_operations_for_every_group(connection, group: str,
                                                                         group_operations: set[str]) -> None:
    missing = f"ops-missing-{uuid.uuid4().hex[:8]}"
    for version in (3, 4, 5):
        described = {g.group_id: g for g in _describe_groups(connection, version, [group, missing], requested=True)}
        assert (described[group].group_state, described[missing].group_state) == ("Empty", "Dead"), version
        for entry in described.values():  # a group it does not know is Dead without an error: it gets them too
            assert operation_names(entry.authorized_operations) == group_operations, (version, entry.group_id)


@pytest.mark.client("wire")
def test_describe_groups_v6_lists_group_operations_only_for_groups_it_found(connection, served, group: str,
                                                                            group_operations: set[str]) -> None:
    if served[DESCRIBE_GROUPS][1] < 6:
        pytest.skip(f"the broker serves DescribeGroups up to v{served[DESCRIBE_GROUPS][1]}")
    missing = f"ops-missing-{uuid.uuid4().hex[:8]}"
    described = {g.group_id: g for g in _describe_groups(connection, 6, [group, missing], requested=True)}
    assert operation_names(described[group].authorized_operations) == group_operations
    assert (described[missing].error_code, described[missing].authorized_operations) == (69, NOT_REQUESTED)


def _consumer_protocol_group(connection, topic: str) -> str:
    """A KIP-848 group with one member (ConsumerGroupHeartbeat v0, which every KIP-848 broker serves)."""
    name = f"ops-848-{uuid.uuid4().hex[:8]}"
    join = wd.build("ConsumerGroupHeartbeatRequest", 0, {
        "group_id": name, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic], "server_assignor": None,
        "topic_partitions": []})
    wd.wait_for_coordinator(wd.Ctx(connection, 0, name), name)
    deadline = time.monotonic() + 30
    while (answer := connection.call(CONSUMER_GROUP_HEARTBEAT, 0, join)).error_code in wd.COORDINATOR_NOT_READY:
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
    assert answer.error_code == 0, answer
    return name


@pytest.mark.client("wire")
def test_consumer_group_describe_lists_group_operations_only_for_groups_it_found(
        bootstrap: str, connection, topic: str, group_operations: set[str]) -> None:
    skip_without_consumer_protocol(bootstrap)
    found = _consumer_protocol_group(connection, topic)
    missing = f"ops-missing-{uuid.uuid4().hex[:8]}"
    # one group per request (Kafka 3.9 repeats each group once per coordinator shard), and Kafka reads groups
    # as of its last committed write: the new group shows a moment after the heartbeat
    (described,) = eventually(lambda: _consumer_group_describe(connection, [found], requested=True),
                              lambda groups: groups[0].error_code == 0)
    (unknown,) = _consumer_group_describe(connection, [missing], requested=True)
    assert operation_names(described.authorized_operations) == group_operations
    assert (unknown.error_code, unknown.authorized_operations) == (69, NOT_REQUESTED)


@pytest.mark.client("wire")
def test_operations_are_not_requested_unless_the_request_asks(bootstrap: str, connection, served, topic: str,
                                                              group: str) -> None:
    for version in range(8, min(served[METADATA][1], 13) + 1):
        answered = _metadata(connection, version, [{"name": topic}], topic_operations=False)
        assert (answered.topics[0].topic_authorized_operations, answered.cluster_authorized_operations) == \
            (NOT_REQUESTED, NOT_REQUESTED), version
    request = wd.build("DescribeClusterRequest", 0, {"include_cluster_authorized_operations": False})
    assert connection.call(DESCRIBE_CLUSTER, 0, request).cluster_authorized_operations == NOT_REQUESTED
    for version in range(3, min(served[DESCRIBE_GROUPS][1], 6) + 1):
        described = _describe_groups(connection, version, [group], requested=False)
        assert described[0].authorized_operations == NOT_REQUESTED, version


# ---- admin clients ------------------------------------------------------------------------------------------

def _names(operations) -> set[str]:
    assert operations is not None, "no authorized operations reported"
    return {operation.name for operation in operations}


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.mark.client("confluent-kafka")
def test_confluent_describe_topics_reports_every_topic_operation(admin: AdminClient, topic: str) -> None:
    futures = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True, request_timeout=15)
    assert _names(futures[topic].result(15).authorized_operations) == TOPIC_OPERATIONS


@pytest.mark.client("confluent-kafka")
def test_confluent_describe_cluster_reports_every_cluster_operation(admin: AdminClient) -> None:
    described = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result(15)
    assert _names(described.authorized_operations) == CLUSTER_OPERATIONS


@pytest.mark.client("confluent-kafka")
def test_confluent_describe_consumer_groups_reports_every_group_operation(admin: AdminClient, group: str,
                                                                         group_operations: set[str]) -> None:
    futures = admin.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=15)
    assert _names(futures[group].result(15).authorized_operations) == group_operations


@generations(scope="module")
def generation(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory, generation: str) -> JavaHarness:
    return compile_harness(tmp_path_factory.mktemp(f"java-ops-{generation}"), generation)


@pytest.mark.client("java")
def test_java_admin_reports_every_operation_of_a_topic_the_cluster_and_a_group(
        java: JavaHarness, bootstrap: str, topic: str, group: str, group_operations: set[str]) -> None:
    lines = java.run("admin-authorized-operations", bootstrap, topic, group)
    reported = {line["resource"]: set(line["operations"] or ()) for line in lines
                if line["type"] == "authorized_operations"}
    assert reported == {"topic": TOPIC_OPERATIONS, "cluster": CLUSTER_OPERATIONS, "group": group_operations}
