"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46) on a single node, which
is every partition's only replica and leader, as a one-broker Kafka answers them. The cluster's elections and
moves are tests/cluster/test_kbroker_cluster.py."""

from __future__ import annotations

import pytest

from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
PREFERRED, UNCLEAN = 0, 1
EL = messages.ElectLeadersRequest
APR = messages.AlterPartitionReassignmentsRequest
LPR = messages.ListPartitionReassignmentsRequest


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic("moved", 2)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def elect(client: RawClient, partitions: dict[str, list[int]] | None, election_type: int = PREFERRED,
          version: int = 2) -> dict[tuple[str, int], int]:
    request = EL(election_type=election_type, timeout_ms=5000, topic_partitions=None if partitions is None else [
        EL.TopicPartitions(topic=topic, partitions=indexes) for topic, indexes in partitions.items()])
    response = client.call(ELECT_LEADERS, version, request)
    return {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
            for p in r.partition_result}


def reassign(client: RawClient, targets: dict[tuple[str, int], list[int] | None], version: int = 1,
             allow_factor_change: bool = True) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list] = {}
    for (topic, index), replicas in targets.items():
        by_topic.setdefault(topic, []).append(APR.ReassignablePartition(partition_index=index, replicas=replicas))
    response = client.call(ALTER_REASSIGNMENTS, version, APR(
        timeout_ms=5000, allow_replication_factor_change=allow_factor_change,
        topics=[APR.ReassignableTopic(name=name, partitions=found) for name, found in by_topic.items()]))
    assert response.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_electing_the_leader_of_a_partition_led_by_its_only_replica_is_not_needed(client, version) -> None:
    assert elect(client, {"moved": [0, 1]}, version=version) == {("moved", 0): ErrorCode.ELECTION_NOT_NEEDED,
                                                                  ("moved", 1): ErrorCode.ELECTION_NOT_NEEDED}


def test_an_unclean_election_of_a_led_partition_is_not_needed_either(client) -> None:
    assert elect(client, {"moved": [0]}, UNCLEAN) == {("moved", 0): ErrorCode.ELECTION_NOT_NEEDED}


def test_an_election_for_a_missing_partition_is_unknown_topic_or_partition(client) -> None:
    assert elect(client, {"moved": [7], "absent": [0]}) == {("moved", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                            ("absent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_an_election_over_all_partitions_reports_none_that_needed_no_election(client) -> None:
    assert elect(client, None) == {}


def test_an_election_over_all_partitions_still_lists_each_topic(client) -> None:
    response = client.call(ELECT_LEADERS, 2, EL(election_type=PREFERRED, timeout_ms=5000, topic_partitions=None))
    assert [(r.topic, r.partition_result) for r in response.replica_election_results] == [("moved", [])]


def test_reassigning_a_partition_to_this_broker_changes_nothing_and_succeeds(client, kafka_broker) -> None:
    node = kafka_broker.broker.node_id
    assert reassign(client, {("moved", 0): [node]}) == {("moved", 0): ErrorCode.NONE}


@pytest.mark.parametrize("replicas", [[], [0, 0], [-1], [0, 5]], ids=["empty", "duplicate", "negative", "absent"])
def test_reassigning_to_an_invalid_replica_list_is_invalid_replica_assignment(client, kafka_broker, replicas) -> None:
    replicas = [kafka_broker.broker.node_id if r == 0 else r for r in replicas]
    assert reassign(client, {("moved", 1): replicas}) == {("moved", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT}


def test_cancelling_a_reassignment_when_none_is_in_progress_is_no_reassignment_in_progress(client) -> None:
    assert reassign(client, {("moved", 0): None}) == {("moved", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}


def test_reassigning_a_missing_partition_is_unknown_topic_or_partition(client, kafka_broker) -> None:
    node = kafka_broker.broker.node_id
    assert reassign(client, {("absent", 0): [node]}) == {("absent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_replica_list_naming_an_unregistered_broker_is_refused_before_its_replication_factor(
        client, kafka_broker) -> None:
    node = kafka_broker.broker.node_id
    assert reassign(client, {("moved", 0): [node, node + 1]}, allow_factor_change=False) == \
        {("moved", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}


@pytest.mark.parametrize("topics", [None, [LPR.ListPartitionReassignmentsTopics(name="moved", partition_indexes=[0])]],
                         ids=["all", "one partition"])
def test_no_reassignment_is_ever_in_progress_on_a_single_node(client, topics) -> None:
    response = client.call(LIST_REASSIGNMENTS, 0, LPR(timeout_ms=5000, topics=topics))
    assert (response.error_code, response.topics) == (ErrorCode.NONE, [])
