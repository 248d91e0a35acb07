"""The KIP-848 consumer group state machine, driven directly (no sockets, a hand-moved clock).

The range assignor is the default here so targets are easy to read: with members "a" and "b"
on a 4-partition topic, "a" gets 0-1 and "b" gets 2-3.
"""

from __future__ import annotations

import uuid

import pytest

from kbroker.broker import Topic
from kbroker.coordinator.consumer_groups import (
    ConsumerGroupCoordinator,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
)
from wire.errors import ErrorCode

GROUP = "g"
SESSION_MS = 45_000
REBALANCE_MS = 30_000


class Cluster:
    """Topics and a clock the test moves by hand."""

    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.now = 0.0

    def create(self, name: str, partitions: int) -> uuid.UUID:
        self.topics[name] = Topic(name, uuid.uuid4(), partitions)
        return self.topics[name].topic_id

    def coordinator(self, **kwargs) -> ConsumerGroupCoordinator:
        kwargs.setdefault("assignors", ("range", "uniform"))
        return ConsumerGroupCoordinator(lambda: self.topics, session_timeout_ms=SESSION_MS,
                                        clock=lambda: self.now, **kwargs)


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster()
    cluster.create("orders", 4)
    return cluster


def join(coordinator: ConsumerGroupCoordinator, member_id: str, topics=("orders",), **fields) -> HeartbeatResult:
    fields.setdefault("subscribed_topic_names", list(topics))
    return coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, 0, rebalance_timeout_ms=REBALANCE_MS,
                                                  owned=[], **fields))


def beat(coordinator: ConsumerGroupCoordinator, member_id: str, epoch: int, owned=None, **fields) -> HeartbeatResult:
    """A regular heartbeat; `owned` as {topic_id: partitions} (None: not reported)."""
    listed = None if owned is None else [(topic_id, sorted(parts)) for topic_id, parts in owned.items()]
    return coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, epoch, owned=listed, **fields))


def partitions(result: HeartbeatResult, topic_id: uuid.UUID) -> set[int]:
    assert result.assignment is not None, "the response carries no assignment"
    return set(result.assignment.get(topic_id, ()))


def two_members_settled(cluster: Cluster, coordinator: ConsumerGroupCoordinator) -> tuple[int, int]:
    """Members "a" and "b" through one full rebalance; returns their final epochs."""
    orders = cluster.topics["orders"].topic_id
    first = join(coordinator, "a")
    join(coordinator, "b")
    revoking = beat(coordinator, "a", first.member_epoch, {orders: {0, 1, 2, 3}})
    settled_a = beat(coordinator, "a", revoking.member_epoch, {orders: partitions(revoking, orders)})
    settled_b = beat(coordinator, "b", 3, {})
    return settled_a.member_epoch, settled_b.member_epoch


def test_first_member_gets_every_partition_at_epoch_two(cluster: Cluster) -> None:
    """Kafka 4 starts a group at epoch 1, and the first member's subscription bumps it to 2."""
    result = join(cluster.coordinator(), "a")
    assert result.error_code == ErrorCode.NONE
    assert result.member_id == "a" and result.member_epoch == 2
    assert partitions(result, cluster.topics["orders"].topic_id) == {0, 1, 2, 3}


def test_first_member_subscribed_to_nothing_leaves_the_group_at_epoch_one(cluster: Cluster) -> None:
    """A new group starts at epoch 1 in Kafka 4; only a change of subscription bumps it."""
    coordinator = cluster.coordinator()
    result = join(coordinator, "a", topics=())
    group = coordinator.group(GROUP)
    assert (result.error_code, result.member_epoch) == (ErrorCode.NONE, 1)
    assert group.group_epoch == group.assignment_epoch == 1


def test_heartbeat_interval_comes_from_the_coordinator(cluster: Cluster) -> None:
    result = join(cluster.coordinator(heartbeat_interval_ms=1234), "a")
    assert result.heartbeat_interval_ms == 1234


def test_single_member_group_is_stable(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    group = coordinator.group(GROUP)
    assert group.state == ConsumerGroupState.STABLE
    assert group.group_epoch == group.assignment_epoch == 2


def test_v1_join_without_a_member_id_is_an_invalid_request(cluster: Cluster) -> None:
    result = join(cluster.coordinator(), "")
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert result.error_message == "MemberId can't be empty."


def test_v0_join_without_a_member_id_gets_one_from_the_coordinator(cluster: Cluster) -> None:
    result = join(cluster.coordinator(), "", api_version=0)
    assert result.error_code == ErrorCode.NONE
    assert len(result.member_id) == 22  # a Kafka Uuid in url-safe base64


def test_join_must_carry_a_rebalance_timeout(cluster: Cluster) -> None:
    request = HeartbeatRequest(GROUP, "a", 0, subscribed_topic_names=["orders"], owned=[])
    result = cluster.coordinator().heartbeat(request)
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert result.error_message == "RebalanceTimeoutMs must be provided in first request."


def test_unchanged_heartbeat_carries_no_assignment(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    result = beat(coordinator, "a", joined.member_epoch)
    assert result.error_code == ErrorCode.NONE and result.member_epoch == 2
    assert result.assignment is None


def test_second_member_bumps_the_group_epoch(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    group = coordinator.group(GROUP)
    assert group.group_epoch == group.assignment_epoch == 3
    assert group.target["a"] == {cluster.topics["orders"].topic_id: frozenset({0, 1})}
    assert group.target["b"] == {cluster.topics["orders"].topic_id: frozenset({2, 3})}


def test_new_member_waits_for_partitions_still_owned_by_another(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    result = join(coordinator, "b")
    assert result.member_epoch == 3
    assert partitions(result, cluster.topics["orders"].topic_id) == set()
    assert coordinator.group(GROUP).members["b"].state == MemberState.UNRELEASED_PARTITIONS


def test_owner_keeps_its_epoch_until_it_stops_reporting_revoked_partitions(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    result = beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})
    assert result.member_epoch == 2
    assert partitions(result, orders) == {0, 1}  # 2 and 3 are to be revoked
    assert coordinator.group(GROUP).members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert coordinator.group(GROUP).state == ConsumerGroupState.RECONCILING


def test_revoked_partitions_are_not_given_away_while_still_reported(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})
    still_owning = beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})
    waiting = beat(coordinator, "b", 3, {})
    assert still_owning.member_epoch == 2
    assert waiting.assignment is None or partitions(waiting, orders) == set()
    assert coordinator.group(GROUP).partition_epoch(orders, 2) == 2


def test_partitions_move_once_the_owner_revoked_them(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})
    revoked = beat(coordinator, "a", 2, {orders: {0, 1}})
    received = beat(coordinator, "b", 3, {})
    assert revoked.member_epoch == 3
    assert received.member_epoch == 3 and partitions(received, orders) == {2, 3}
    assert coordinator.group(GROUP).state == ConsumerGroupState.STABLE


def test_settled_assignment_is_disjoint_and_complete(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    two_members_settled(cluster, coordinator)
    group = coordinator.group(GROUP)
    owned = [set(m.assigned.get(cluster.topics["orders"].topic_id, ())) for m in group.members.values()]
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == {0, 1, 2, 3}


def test_greater_epoch_is_fenced(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    assert beat(coordinator, "a", 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_smaller_epoch_is_fenced(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    epoch_a, _ = two_members_settled(cluster, coordinator)
    assert epoch_a == 3
    assert join(coordinator, "a").error_code == ErrorCode.FENCED_MEMBER_EPOCH  # epoch 0 < 3


def test_previous_epoch_with_a_subset_of_partitions_is_forgiven(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    two_members_settled(cluster, coordinator)
    result = beat(coordinator, "a", 2, {orders: {0, 1}})  # the response that moved it to 3 was lost
    assert result.error_code == ErrorCode.NONE and result.member_epoch == 3


def test_previous_epoch_owning_more_than_assigned_is_fenced(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    two_members_settled(cluster, coordinator)
    assert beat(coordinator, "a", 2, {orders: {0, 1, 2}}).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_unknown_member_gets_unknown_member_id(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    assert beat(coordinator, "stranger", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_member_of_a_group_the_coordinator_lost_is_told_to_rejoin(cluster: Cluster) -> None:
    # Kafka answers GROUP_ID_NOT_FOUND but never loses groups; kbroker forgets them on restart
    assert beat(cluster.coordinator(), "a", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_frees_partitions_and_bumps_the_group_epoch(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    two_members_settled(cluster, coordinator)
    left = beat(coordinator, "a", -1)
    group = coordinator.group(GROUP)
    assert left.error_code == ErrorCode.NONE and left.member_epoch == -1
    assert "a" not in group.members and group.group_epoch == 4
    assert group.partition_epoch(cluster.topics["orders"].topic_id, 0) == -1


def test_remaining_member_takes_over_a_leavers_partitions(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    _, epoch_b = two_members_settled(cluster, coordinator)
    beat(coordinator, "a", -1)
    result = beat(coordinator, "b", epoch_b, {orders: {2, 3}})
    assert result.member_epoch == 4 and partitions(result, orders) == {0, 1, 2, 3}


def test_last_member_leaving_empties_the_group(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    beat(coordinator, "a", -1)
    assert joined.member_epoch == 2
    assert coordinator.group(GROUP).state == ConsumerGroupState.EMPTY


def test_silent_member_is_removed_after_the_session_timeout(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    cluster.now += SESSION_MS - 1
    assert coordinator.expire_members() == []
    cluster.now += 1
    assert coordinator.expire_members() == [(GROUP, "a")]
    assert coordinator.group(GROUP).state == ConsumerGroupState.EMPTY


def test_heartbeats_keep_a_member_alive(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    cluster.now += SESSION_MS - 1
    beat(coordinator, "a", joined.member_epoch)
    cluster.now += SESSION_MS - 1
    assert coordinator.expire_members() == []


def test_member_too_slow_to_revoke_is_fenced_after_its_rebalance_timeout(cluster: Cluster) -> None:
    orders = cluster.topics["orders"].topic_id
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})
    cluster.now += REBALANCE_MS / 2
    beat(coordinator, "a", 2, {orders: {0, 1, 2, 3}})  # heartbeating, but not revoking
    cluster.now += REBALANCE_MS / 2
    assert coordinator.expire_members() == [(GROUP, "a")]


def test_static_member_leaving_for_a_while_keeps_its_place(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a", instance_id="host-1")
    left = beat(coordinator, "a", -2, instance_id="host-1")
    group = coordinator.group(GROUP)
    assert left.member_epoch == -2
    assert group.members["a"].member_epoch == -2 and group.group_epoch == 2


def test_static_member_coming_back_gets_its_partitions_without_a_rebalance(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a", instance_id="host-1")
    beat(coordinator, "a", -2, instance_id="host-1")
    back = join(coordinator, "a2", instance_id="host-1")
    group = coordinator.group(GROUP)
    assert back.member_epoch == 2 and partitions(back, cluster.topics["orders"].topic_id) == {0, 1, 2, 3}
    assert set(group.members) == {"a2"} and group.group_epoch == 2


def test_instance_id_held_by_an_active_member_is_unreleased(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a", instance_id="host-1")
    assert join(coordinator, "a2", instance_id="host-1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_static_member_heartbeating_under_another_member_id_is_fenced(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a", instance_id="host-1")
    assert beat(coordinator, "zz", 1, instance_id="host-1").error_code == ErrorCode.FENCED_INSTANCE_ID


def test_static_leave_needs_an_instance_id(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    assert beat(coordinator, "a", -2).error_code == ErrorCode.INVALID_REQUEST


def test_added_partitions_start_a_new_assignment(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    cluster.topics["orders"].partitions = 6
    result = beat(coordinator, "a", joined.member_epoch)
    assert result.member_epoch == 3
    assert partitions(result, cluster.topics["orders"].topic_id) == set(range(6))


def test_subscribed_topic_created_later_is_assigned(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a", topics=("orders", "refunds"))
    refunds = cluster.create("refunds", 2)
    result = beat(coordinator, "a", joined.member_epoch)
    assert result.member_epoch == 3 and partitions(result, refunds) == {0, 1}


def test_regex_subscription_takes_every_matching_topic(cluster: Cluster) -> None:
    cluster.create("orders-eu", 2)
    cluster.create("payments", 2)
    coordinator = cluster.coordinator()
    result = join(coordinator, "a", topics=(), subscribed_topic_names=None, subscribed_topic_regex="orders.*")
    assert set(result.assignment) == {cluster.topics["orders"].topic_id, cluster.topics["orders-eu"].topic_id}


def test_regex_must_match_the_whole_topic_name(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    result = join(coordinator, "a", subscribed_topic_names=None, subscribed_topic_regex="order")
    assert result.error_code == ErrorCode.NONE and result.assignment == {}


def test_topic_created_later_that_matches_the_regex_is_assigned(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a", subscribed_topic_names=None, subscribed_topic_regex="orders.*")
    late = cluster.create("orders-us", 3)
    result = beat(coordinator, "a", joined.member_epoch)
    assert result.member_epoch == 3 and partitions(result, late) == {0, 1, 2}


def test_invalid_regex_is_refused(cluster: Cluster) -> None:
    result = join(cluster.coordinator(), "a", subscribed_topic_names=None, subscribed_topic_regex="orders[")
    assert result.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_unknown_server_assignor_is_unsupported(cluster: Cluster) -> None:
    result = join(cluster.coordinator(), "a", server_assignor="roundrobin")
    assert result.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert result.error_message == "ServerAssignor roundrobin is not supported. Supported assignors: range, uniform."


def test_first_configured_assignor_is_the_default(cluster: Cluster) -> None:
    coordinator = cluster.coordinator(assignors=("uniform", "range"))
    join(coordinator, "a")
    assert coordinator.preferred_assignor(coordinator.group(GROUP).members.values()) == "uniform"


def test_assignor_most_members_ask_for_is_used(cluster: Cluster) -> None:
    coordinator = cluster.coordinator(assignors=("uniform", "range"))
    join(coordinator, "a", server_assignor="range")
    join(coordinator, "b", server_assignor="range")
    join(coordinator, "c", server_assignor="uniform")
    group = coordinator.group(GROUP)
    assert coordinator.preferred_assignor(group.members.values()) == "range"
    # range over a, b, c on four partitions: a gets the extra one
    assert group.target["a"] == {cluster.topics["orders"].topic_id: frozenset({0, 1})}


def test_classic_group_with_members_keeps_its_id(cluster: Cluster) -> None:
    coordinator = cluster.coordinator(claim_group_id=lambda group_id: False)
    result = join(coordinator, "a")
    assert result.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert coordinator.group(GROUP) is None


def test_member_commits_with_its_current_epoch(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    group = coordinator.group(GROUP)
    assert coordinator.validate_offset_commit(group, "a", joined.member_epoch, 9) == ErrorCode.NONE


def test_commit_with_another_epoch_is_stale(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    group = coordinator.group(GROUP)
    assert coordinator.validate_offset_commit(group, "a", 7, 9) == ErrorCode.STALE_MEMBER_EPOCH


def test_commit_below_offset_commit_v9_is_unsupported_for_members(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    joined = join(coordinator, "a")
    group = coordinator.group(GROUP)
    assert coordinator.validate_offset_commit(group, "a", joined.member_epoch, 8) == ErrorCode.UNSUPPORTED_VERSION


def test_simple_commit_is_refused_while_the_group_has_members(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    group = coordinator.group(GROUP)
    assert coordinator.validate_offset_commit(group, "", -1, 9) == ErrorCode.UNKNOWN_MEMBER_ID


def test_offset_fetch_with_a_stale_epoch_is_refused(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    assert coordinator.offset_fetch_error(GROUP, "a", 4) == ErrorCode.STALE_MEMBER_EPOCH
    assert coordinator.offset_fetch_error(GROUP, None, -1) == ErrorCode.NONE
