"""Leader elections (kbroker/cluster/elections.py), one rule of Kafka 3.9's ZooKeeper controller per test; no JVM.

test_kafka_rules_differential.py checks thousands of generated cases against kafka.controller.Election itself.
"""

from __future__ import annotations

from kbroker.cluster.elections import (
    ReplicaLiveness,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassign,
    initial_leadership,
    offline_partition_leader,
    target_replicas,
)
from kbroker.cluster.model import RECOVERED, RECOVERING, LeaderAndIsr, ReplicaAssignment

STATE = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=9)


def up(*brokers: int, shutting_down: tuple[int, ...] = (), offline_dirs: tuple[int, ...] = ()) -> ReplicaLiveness:
    return ReplicaLiveness.of(brokers, shutting_down, offline_dirs)


def test_a_new_partition_is_led_by_its_first_online_replica_with_every_online_replica_in_sync() -> None:
    assert initial_leadership([3, 1, 2], up(1, 2)) == LeaderAndIsr(1, 0, (1, 2), RECOVERED, 0)


def test_a_new_partition_without_an_online_replica_gets_no_leader() -> None:
    assert initial_leadership([3, 1], up(2)) is None


def test_offline_election_takes_assignment_order_not_isr_order() -> None:
    assert offline_partition_leader([3, 2, 1], [1, 2, 3], {1, 2}, unclean=False) == 2


def test_offline_election_bumps_the_leader_epoch_and_keeps_the_online_isr() -> None:
    elected = elect_offline([1, 2, 3], STATE, up(2, 3), unclean_enabled=False).leader_and_isr
    assert elected == LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 3), partition_epoch=9)


def test_offline_election_without_an_online_isr_member_elects_nobody_when_unclean_is_off() -> None:
    result = elect_offline([1, 2, 3], LeaderAndIsr(1, 4, (1,)), up(2, 3), unclean_enabled=False)
    assert result.leader_and_isr is None
    assert result.recipients == (2, 3)


def test_unclean_election_takes_the_first_online_replica_alone_in_the_isr_and_recovering() -> None:
    elected = elect_offline([1, 3, 2], LeaderAndIsr(1, 4, (1,)), up(2, 3), unclean_enabled=True).leader_and_isr
    assert elected == LeaderAndIsr(leader=3, leader_epoch=5, isr=(3,), leader_recovery_state=RECOVERING)


def test_unclean_election_before_ibp_3_2_keeps_the_recovery_state() -> None:
    elected = elect_offline([1, 2], LeaderAndIsr(1, 4, (1,)), up(2), True, leader_recovery_supported=False)
    assert elected.leader_and_isr.leader_recovery_state == RECOVERED


def test_a_clean_election_keeps_a_recovering_state() -> None:
    current = LeaderAndIsr(1, 4, (1, 2), RECOVERING)
    assert elect_offline([1, 2], current, up(2), False).leader_and_isr.leader_recovery_state == RECOVERING


def test_unclean_election_is_not_used_while_any_isr_member_is_online() -> None:
    """An online ISR member outside the assignment still counts: Kafka then elects nobody rather than unclean."""
    result = elect_offline([1, 2], LeaderAndIsr(1, 4, (1, 7)), up(2, 7), unclean_enabled=True)
    assert result.leader_and_isr is None


def test_a_replica_on_an_offline_log_dir_is_not_online() -> None:
    elected = elect_offline([1, 2, 3], STATE, up(2, 3, offline_dirs=(2,)), False).leader_and_isr
    assert (elected.leader, elected.isr) == (3, (3,))


def test_a_shutting_down_broker_is_not_online_for_an_offline_election() -> None:
    elected = elect_offline([1, 2, 3], STATE, up(2, 3, shutting_down=(2,)), False).leader_and_isr
    assert elected.leader == 3


def test_reassignment_targets_drop_the_replicas_being_removed() -> None:
    assert target_replicas(ReplicaAssignment((4, 1, 2, 3), adding=(4,), removing=(2, 3))) == (4, 1)


def test_reassignment_election_leads_from_the_targets_and_keeps_the_isr() -> None:
    assignment = ReplicaAssignment((4, 1, 2), adding=(4,), removing=(1,))
    result = elect_reassign(assignment, LeaderAndIsr(1, 4, (1, 2, 4)), up(1, 2, 4))
    assert result.leader_and_isr == LeaderAndIsr(leader=4, leader_epoch=5, isr=(1, 2, 4))
    assert result.recipients == (4, 2)


def test_reassignment_election_without_an_online_target_in_the_isr_elects_nobody() -> None:
    assignment = ReplicaAssignment((4, 1), adding=(4,), removing=(1,))
    assert elect_reassign(assignment, LeaderAndIsr(1, 4, (1,)), up(1, 4)).leader_and_isr is None


def test_preferred_election_elects_the_first_assigned_replica_and_keeps_the_isr() -> None:
    result = elect_preferred([2, 1, 3], STATE, up(1, 2, 3))
    assert result.leader_and_isr == LeaderAndIsr(leader=2, leader_epoch=5, isr=(1, 2, 3), partition_epoch=9)
    assert result.recipients == (2, 1, 3)


def test_preferred_election_needs_the_preferred_replica_in_the_isr() -> None:
    assert elect_preferred([4, 1], STATE, up(1, 4)).leader_and_isr is None


def test_preferred_election_needs_the_preferred_replica_online() -> None:
    assert elect_preferred([2, 1], STATE, up(1)).leader_and_isr is None


def test_controlled_shutdown_moves_leadership_off_the_shutting_down_broker() -> None:
    result = elect_controlled_shutdown([1, 2, 3], STATE, up(1, 2, 3, shutting_down=(1,)))
    assert result.leader_and_isr == LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 3), partition_epoch=9)


def test_controlled_shutdown_sends_to_replicas_on_shutting_down_brokers_too() -> None:
    assert elect_controlled_shutdown([1, 2, 3], STATE, up(1, 2, shutting_down=(1,))).recipients == (1, 2)


def test_controlled_shutdown_elects_nobody_when_only_shutting_down_brokers_are_in_sync() -> None:
    result = elect_controlled_shutdown([1, 2], LeaderAndIsr(1, 4, (1,)), up(1, 2, shutting_down=(1,)))
    assert result.leader_and_isr is None
