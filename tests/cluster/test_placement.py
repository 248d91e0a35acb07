"""Replica placement (kbroker/cluster/placement.py), one Kafka 3.9 rule per test; no JVM needed.

Expected layouts come from Kafka's own documentation of AdminUtils.assignReplicasToBrokers and from its
ZooKeeper-mode CreatePartitions code; test_kafka_rules_differential.py checks thousands more against Kafka itself.
"""

from __future__ import annotations

import random

import pytest

from kbroker.cluster.model import BrokerRegistration, ReplicaAssignment
from kbroker.cluster.placement import (
    BrokerMetadata,
    PlacementError,
    RackAwareMode,
    _scala_set,
    assign_new_partitions,
    assign_replicas_to_brokers,
    broker_metadatas,
    metadata_cache_order,
    rack_alternated_brokers,
)
from wire.errors import ErrorCode

FIVE = [BrokerMetadata(b) for b in range(5)]
# Kafka's documented rack example: 0 -> rack1, 1 -> rack3, 2 -> rack3, 3 -> rack2, 4 -> rack2, 5 -> rack1
RACKED = [BrokerMetadata(b, r) for b, r in enumerate(["rack1", "rack3", "rack3", "rack2", "rack2", "rack1"])]


def test_leaders_go_round_robin_from_the_start_index() -> None:
    placed = assign_replicas_to_brokers(FIVE, 5, 1, start_index=2)
    assert [replicas[0] for replicas in placed.values()] == [2, 3, 4, 0, 1]


def test_followers_follow_the_leader_shifted_by_one_on_the_first_pass() -> None:
    placed = assign_replicas_to_brokers(FIVE, 5, 3, start_index=0)
    assert placed[0] == (0, 1, 2)
    assert placed[3] == (3, 4, 0)


def test_follower_shift_grows_each_time_the_leaders_wrap() -> None:
    """Kafka's table: p5 leads on broker 0 again but its followers are 2 and 3, not 1 and 2."""
    placed = assign_replicas_to_brokers(FIVE, 10, 3, start_index=0)
    assert placed[5] == (0, 2, 3)
    assert placed[9] == (4, 1, 2)


def test_a_fixed_start_index_also_fixes_the_follower_shift() -> None:
    assert assign_replicas_to_brokers(FIVE, 1, 2, start_index=1) == {0: (1, 3)}


def test_the_follower_shift_can_be_fixed_apart_from_the_start_index() -> None:
    assert assign_replicas_to_brokers(FIVE, 1, 2, start_index=1, replica_shift=0) == {0: (1, 2)}


def test_unfixed_start_and_shift_are_drawn_from_rng_start_first() -> None:
    draws = random.Random(99)
    start, shift = draws.randrange(5), draws.randrange(5)
    expected = assign_replicas_to_brokers(FIVE, 7, 3, start_index=start, replica_shift=shift)
    assert assign_replicas_to_brokers(FIVE, 7, 3, rng=random.Random(99)) == expected


def test_start_partition_id_numbers_and_positions_the_partitions() -> None:
    placed = assign_replicas_to_brokers(FIVE, 2, 1, start_index=0, start_partition_id=6)
    assert placed == {6: (1,), 7: (2,)}


def test_the_broker_list_order_is_kept_without_racks() -> None:
    brokers = [BrokerMetadata(b) for b in (7, 3, 5)]
    assert assign_replicas_to_brokers(brokers, 3, 1, start_index=0) == {0: (7,), 1: (3,), 2: (5,)}


def test_every_partition_gets_distinct_brokers() -> None:
    rng = random.Random(5)
    for _ in range(200):
        brokers = [BrokerMetadata(b, rng.choice("ab") if rng.random() < 0.5 else None) for b in range(8)]
        brokers = brokers if all(b.rack for b in brokers) else [BrokerMetadata(b.broker_id) for b in brokers]
        placed = assign_replicas_to_brokers(brokers, 20, rng.randint(1, 8), rng=rng)
        assert all(len(set(replicas)) == len(replicas) for replicas in placed.values())


def test_rack_alternated_list_takes_one_broker_per_rack_in_turn() -> None:
    assert rack_alternated_brokers({b.broker_id: b.rack for b in RACKED}) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_placement_walks_the_alternated_list() -> None:
    placed = assign_replicas_to_brokers(RACKED, 6, 3, start_index=0)
    assert placed == {0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3)}


def test_rack_aware_placement_shifts_followers_after_a_full_round() -> None:
    """Kafka's documented partition 6: 0,4,2 rather than partition 0's 0,3,1."""
    assert assign_replicas_to_brokers(RACKED, 7, 3, start_index=0)[6] == (0, 4, 2)


def test_rack_aware_replicas_reach_every_rack_before_any_gets_a_second() -> None:
    brokers = [BrokerMetadata(b, "a" if b < 4 else "b" if b < 6 else "c") for b in range(7)]
    for replicas in assign_replicas_to_brokers(brokers, 30, 3, rng=random.Random(3)).values():
        assert len({brokers[b].rack for b in replicas}) == 3


def test_racks_sort_as_java_strings_do() -> None:
    """Java compares UTF-16 code units: an astral rack (surrogates, 0xD83D...) sorts before U+FF21."""
    assert rack_alternated_brokers({1: "\uff21", 2: "\U0001f600"}) == [2, 1]


def test_replication_factor_above_the_broker_count_is_refused() -> None:
    with pytest.raises(PlacementError) as refused:
        assign_replicas_to_brokers([BrokerMetadata(1)], 1, 3)
    assert refused.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert str(refused.value) == "Replication factor: 3 larger than available brokers: 1."


def test_a_replication_factor_below_one_is_refused() -> None:
    with pytest.raises(PlacementError, match=r"^Replication factor must be larger than 0\.$") as refused:
        assign_replicas_to_brokers(FIVE, 1, 0)
    assert refused.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(PlacementError, match=r"^Number of partitions must be larger than 0\.$") as refused:
        assign_replicas_to_brokers(FIVE, 0, 1)
    assert refused.value.error_code == ErrorCode.INVALID_PARTITIONS


def test_a_rack_on_some_brokers_only_is_an_unknown_server_error_without_a_client_message() -> None:
    with pytest.raises(PlacementError) as refused:
        assign_replicas_to_brokers([BrokerMetadata(0, "r"), BrokerMetadata(1)], 1, 1)
    assert refused.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert str(refused.value) == "Not all brokers have rack information for replica rack aware assignment."
    assert refused.value.client_message is None


def test_broker_registrations_can_be_placed_directly() -> None:
    registrations = [BrokerRegistration(b, (), rack=None) for b in (1, 2)]
    assert assign_replicas_to_brokers(registrations, 1, 2, start_index=0) == {0: (1, 2)}


def test_broker_metadatas_are_sorted_by_id() -> None:
    assert [b.broker_id for b in broker_metadatas([BrokerMetadata(3), BrokerMetadata(1), BrokerMetadata(2)])] == [
        1, 2, 3]


def test_broker_metadatas_refuse_partial_racks_when_enforced() -> None:
    with pytest.raises(PlacementError, match="Add --disable-rack-aware in command line") as refused:
        broker_metadatas([BrokerMetadata(1, "r"), BrokerMetadata(2)])
    assert refused.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def test_broker_metadatas_drop_partial_racks_in_safe_mode() -> None:
    listed = broker_metadatas([BrokerMetadata(1, "r"), BrokerMetadata(2)], RackAwareMode.SAFE)
    assert listed == [BrokerMetadata(1), BrokerMetadata(2)]


def test_broker_metadatas_drop_every_rack_when_disabled() -> None:
    listed = broker_metadatas([BrokerMetadata(1, "r"), BrokerMetadata(2, "s")], RackAwareMode.DISABLED)
    assert listed == [BrokerMetadata(1), BrokerMetadata(2)]


def _topic(*partitions: tuple[int, ...]) -> dict[int, ReplicaAssignment]:
    return {p: ReplicaAssignment(replicas) for p, replicas in enumerate(partitions)}


def test_new_partitions_start_at_the_first_broker_not_below_partition_zeros_leader() -> None:
    """Partition 0 led by 2 -> start index 1 (broker 2's), which also fixes the shift; numbering goes on."""
    brokers = [BrokerMetadata(b) for b in (1, 2, 3)]
    placed = assign_new_partitions("t", _topic((2, 3), (3, 1)), brokers, 5)
    assert {p: a.replicas for p, a in placed.items()} == {2: (1, 3), 3: (2, 3), 4: (3, 1)}


def test_new_partitions_start_at_index_zero_when_partition_zeros_leader_is_above_every_broker() -> None:
    brokers = [BrokerMetadata(b) for b in (1, 2)]
    placed = assign_new_partitions("t", _topic((9,)), brokers, 2)
    assert placed == {1: ReplicaAssignment((2,))}


def test_new_partitions_keep_partition_zeros_replication_factor() -> None:
    placed = assign_new_partitions("t", _topic((0, 1, 2)), FIVE, 4)
    assert {len(a.replicas) for a in placed.values()} == {3}


def test_fewer_partitions_than_the_topic_has_are_refused() -> None:
    with pytest.raises(PlacementError) as refused:
        assign_new_partitions("t", _topic((0,), (1,)), FIVE, 1)
    assert refused.value.error_code == ErrorCode.INVALID_PARTITIONS
    assert str(refused.value) == "Topic currently has 2 partitions, which is higher than the requested 1."


def test_the_same_partition_count_is_refused() -> None:
    with pytest.raises(PlacementError, match=r"^Topic already has 2 partitions\.$"):
        assign_new_partitions("t", _topic((0,), (1,)), FIVE, 2)


def test_new_partitions_wait_for_a_reassignment_to_finish() -> None:
    existing = {0: ReplicaAssignment((0, 1), adding=(1,))}
    with pytest.raises(PlacementError) as refused:
        assign_new_partitions("t", existing, FIVE, 3)
    assert refused.value.error_code == ErrorCode.REASSIGNMENT_IN_PROGRESS
    assert str(refused.value) == "A partition reassignment is in progress for the topic 't'."


def test_new_partitions_of_a_missing_topic_are_refused() -> None:
    with pytest.raises(PlacementError, match=r"^The topic 'gone' does not exist\.$") as refused:
        assign_new_partitions("gone", {}, FIVE, 3)
    assert refused.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_manual_assignment_is_numbered_after_the_existing_partitions() -> None:
    placed = assign_new_partitions("t", _topic((0,), (1,)), FIVE, 4, manual=[[4], [3]])
    assert placed == {2: ReplicaAssignment((4,)), 3: ReplicaAssignment((3,))}


def test_a_manual_assignment_naming_an_unknown_broker_is_refused() -> None:
    with pytest.raises(PlacementError, match=r"^Unknown broker\(s\) in replica assignment: 9\.$") as refused:
        assign_new_partitions("t", _topic((0,)), FIVE, 2, manual=[[9]])
    assert refused.value.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_a_manual_assignment_must_cover_exactly_the_new_partitions() -> None:
    with pytest.raises(PlacementError) as refused:
        assign_new_partitions("t", _topic((0,)), FIVE, 4, manual=[[1]])
    assert str(refused.value) == "Increasing the number of partitions by 3 but 1 assignments provided."


def test_a_manual_assignment_with_another_replication_factor_is_refused() -> None:
    with pytest.raises(PlacementError) as refused:
        assign_new_partitions("t", _topic((0, 1)), FIVE, 3, manual=[[2, 3], [4]])
    assert str(refused.value) == ("Inconsistent replication factor between partitions, partition 0 has 2 while "
                                  "partitions [2] have replication factors [1], respectively.")


def test_scala_sets_of_up_to_four_keep_insertion_order() -> None:
    assert _scala_set([9, 3, 3, 7, 1]) == [9, 3, 7, 1]


def test_the_metadata_cache_lists_brokers_in_hash_slot_order_not_by_id() -> None:
    """Scala's LongMap (ZkMetadataCache's) puts 1, 2 and 3 in slots 5, 2 and 3 of its 8: it lists 2, 3, 1."""
    assert metadata_cache_order([1, 2, 3], previous_count=0) == [2, 3, 1]


def test_the_metadata_cache_lists_broker_zero_first() -> None:
    assert metadata_cache_order([3, 0], previous_count=2)[0] == 0
