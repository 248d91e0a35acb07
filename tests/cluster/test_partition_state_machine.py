"""The partition state machine as Kafka 3.9's ZkPartitionStateMachine: legal moves, the state znodes it writes
(conditionally, fenced on the controller epoch) and the requests it queues. Expected values follow
PartitionStateMachine.scala and Election.scala; each test names the method. The store is the in-memory double
(controller_memory_store), which applies ZooKeeper's version rules."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from kbroker.cluster.controller_context import ControllerContext, TopicPartition
from kbroker.cluster.controller_memory_store import MemoryStore
from kbroker.cluster.controller_requests import RequestBatch
from kbroker.cluster.controller_store import ControllerMovedError, StateChangeFailed
from kbroker.cluster.model import (
    RECOVERING,
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    PartitionState,
    ReplicaAssignment,
)
from kbroker.cluster.partition_state_machine import (
    CONTROLLED_SHUTDOWN,
    OFFLINE,
    PREFERRED,
    ElectionStrategy,
    PartitionStateMachine,
    PartitionStatus,
)

T0 = TopicPartition("t", 0)
EPOCH, EPOCH_ZK_VERSION = 3, 2


@dataclass
class Machine:
    context: ControllerContext
    store: MemoryStore
    psm: PartitionStateMachine

    def sent(self) -> list:
        return self.psm.batch.take_sent()


def machine(replicas=(1, 2, 3), live=(1, 2, 3), state: tuple[int, int, tuple[int, ...]] | None = None,
            status: PartitionStatus | None = None, unclean: bool = False) -> Machine:
    """One partition t-0; `state` is (leader, leader epoch, isr) already in ZooKeeper and the cache."""
    ctx = ControllerContext(epoch=EPOCH, epoch_zk_version=EPOCH_ZK_VERSION)
    ctx.set_live_brokers(BrokerRegistration(b, (EndPoint("PLAINTEXT", "h", 9000 + b, "PLAINTEXT"),), broker_epoch=b)
                         for b in live)
    ctx.set_all_topics(["t"])
    ctx.add_topic_id("t", uuid.UUID(int=1))
    ctx.update_partition_full_replica_assignment(T0, ReplicaAssignment(tuple(replicas)))
    store = MemoryStore(EPOCH_ZK_VERSION)
    if state is not None:
        leader, leader_epoch, isr = state
        store.create_partition_states("t", {0: PartitionState(LeaderAndIsr(leader, leader_epoch, isr), 1)},
                                      EPOCH_ZK_VERSION)
        store.leader_writes("t", 0, store.state("t", 0))  # version 1, as after one ISR change
        ctx.put_partition_leadership_info(T0, store.state("t", 0))
    if status is not None:
        ctx.put_partition_state(T0, status)
    batch = RequestBatch(controller_id=1, context=ctx)
    return Machine(ctx, store, PartitionStateMachine(ctx, store, batch, lambda topic: unclean))


# ---------------------------------------------------------------------------------------------- New -> Online


def test_new_partition_is_led_by_its_first_live_replica_with_every_live_replica_in_sync() -> None:
    # initializeLeaderAndIsrForPartitions: LeaderAndIsr(liveReplicas.head, liveReplicas), epochs 0
    m = machine(replicas=(3, 1, 2), live=(1, 2), status=PartitionStatus.NEW)
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert m.store.state("t", 0) == PartitionState(LeaderAndIsr(1, 0, (1, 2), partition_epoch=0), EPOCH)
    assert m.context.partition_state(T0) == PartitionStatus.ONLINE
    assert m.context.partition_leadership_info(T0) == m.store.state("t", 0)


def test_new_partition_leader_and_isr_goes_with_is_new_to_the_isr_members_only() -> None:
    # initializeLeaderAndIsrForPartitions: addLeaderAndIsrRequestForBrokers(isr, ..., isNew = true)
    m = machine(replicas=(3, 1, 2), live=(1, 2), status=PartitionStatus.NEW)
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    [sent] = m.sent()
    assert sorted(sent.leader_and_isr) == [1, 2]
    assert all(r.partition_states()[T0].is_new for r in sent.leader_and_isr.values())
    assert sorted(sent.update_metadata) == [1, 2]


def test_new_partition_without_a_live_replica_stays_new_and_writes_nothing() -> None:
    # initializeLeaderAndIsrForPartitions: "No assigned replica is alive."
    m = machine(replicas=(3, 4), live=(1, 2), status=PartitionStatus.NEW)
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert m.context.partition_state(T0) == PartitionStatus.NEW
    assert m.store.state("t", 0) is None
    assert "No assigned replica is alive." in m.psm.failures[0].reason
    assert m.sent() == []


def test_new_partition_whose_state_znode_exists_stays_new() -> None:
    # initializeLeaderAndIsrForPartitions: a create answered with NODEEXISTS is a failed state change
    m = machine(status=PartitionStatus.NEW)
    m.store.create_partition_states("t", {0: PartitionState(LeaderAndIsr(2, 7, (2,)), 1)}, EPOCH_ZK_VERSION)
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert m.context.partition_state(T0) == PartitionStatus.NEW
    assert m.store.state("t", 0).leader_and_isr.leader == 2
    assert m.psm.failures[0].reason == "NODE_EXISTS"


def test_results_of_an_online_change_leave_out_partitions_initialised_from_new() -> None:
    # doHandleStateChanges: only elections are in the returned map
    m = machine(status=PartitionStatus.NEW)
    assert m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE) == {}


# ---------------------------------------------------------------------------------------------- elections


def test_offline_partition_is_led_by_the_first_live_isr_member_with_the_dead_dropped_from_the_isr() -> None:
    # leaderForOffline: assignment order, ISR filtered to live replicas, leader epoch + 1
    m = machine(replicas=(1, 2, 3), live=(2, 3), state=(1, 5, (1, 3, 2)), status=PartitionStatus.OFFLINE)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    expected = LeaderAndIsr(2, 6, (3, 2), partition_epoch=2)
    assert result == {T0: expected}
    assert m.store.state("t", 0) == PartitionState(expected, EPOCH)
    assert m.context.partition_state(T0) == PartitionStatus.ONLINE


def test_an_election_sends_leader_and_isr_to_the_live_replicas() -> None:
    # doElectLeaderForPartitions: recipients = ElectionResult.liveReplicas, isNew = false
    m = machine(replicas=(1, 2, 3), live=(2, 3), state=(1, 5, (1, 2, 3)), status=PartitionStatus.OFFLINE)
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    [sent] = m.sent()
    assert sorted(sent.leader_and_isr) == [2, 3]
    state = sent.leader_and_isr[3].partition_states()[T0]
    assert (state.leader, state.leader_epoch, state.partition_epoch, state.is_new) == (2, 6, 2, False)


def test_offline_partition_without_a_live_isr_member_stays_offline_when_unclean_is_disabled() -> None:
    # leaderForOffline + collectUncleanLeaderElectionState: no clean candidate, topic config says no
    m = machine(replicas=(1, 2), live=(2,), state=(1, 5, (1,)), status=PartitionStatus.OFFLINE)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert isinstance(result[T0], StateChangeFailed)
    assert str(result[T0]) == ("Failed to elect leader for partition t-0 under strategy "
                               "OfflinePartitionLeaderElectionStrategy(false)")
    assert m.context.partition_state(T0) == PartitionStatus.OFFLINE
    assert m.store.state("t", 0).leader_and_isr.leader_epoch == 5


def test_unclean_election_makes_an_out_of_sync_replica_the_whole_isr_and_marks_it_recovering() -> None:
    # leaderForOffline: newRecoveringLeaderAndIsr(leader, List(leader)) with IBP >= 3.2
    m = machine(replicas=(1, 2), live=(2,), state=(1, 5, (1,)), status=PartitionStatus.OFFLINE, unclean=True)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert result[T0] == LeaderAndIsr(2, 6, (2,), leader_recovery_state=RECOVERING, partition_epoch=2)


def test_admin_unclean_election_overrides_the_topic_config() -> None:
    # OfflinePartitionLeaderElectionStrategy(allowUnclean = true)
    m = machine(replicas=(1, 2), live=(2,), state=(1, 5, (1,)), status=PartitionStatus.OFFLINE)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, ElectionStrategy("offline", True))
    assert result[T0].leader == 2


def test_preferred_election_moves_leadership_to_the_first_replica_and_keeps_the_isr() -> None:
    # leaderForPreferredReplica: newLeader(preferred); recipients are all assigned replicas
    m = machine(replicas=(1, 2, 3), state=(2, 5, (2, 3, 1)), status=PartitionStatus.ONLINE)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, PREFERRED)
    assert result[T0] == LeaderAndIsr(1, 6, (2, 3, 1), partition_epoch=2)
    assert sorted(m.sent()[0].leader_and_isr) == [1, 2, 3]


def test_controlled_shutdown_election_drops_shutting_down_brokers_from_the_isr() -> None:
    # leaderForControlledShutdown: newLeaderAndIsr(leader, isr without shutting-down brokers)
    m = machine(replicas=(1, 2, 3), state=(1, 5, (1, 2, 3)), status=PartitionStatus.ONLINE)
    m.context.shutting_down_broker_ids.add(1)
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, CONTROLLED_SHUTDOWN)
    assert result[T0] == LeaderAndIsr(2, 6, (2, 3), partition_epoch=2)
    assert sorted(m.sent()[0].leader_and_isr) == [1, 2, 3]  # the shutting-down broker hears it too


def test_an_election_racing_a_leader_write_is_decided_again_on_the_fresh_state() -> None:
    # electLeaderForPartitions: BADVERSION updates are retried with a new read of the state znode
    m = machine(replicas=(1, 2, 3), live=(2, 3), state=(1, 5, (1, 2, 3)), status=PartitionStatus.OFFLINE)
    store, raced = m.store, []

    def racing_update(topic, states, version, original=store.update_partition_states):
        if not raced:  # the leader shrinks the ISR to (1, 3) between the controller's read and its write
            raced.append(store.leader_writes("t", 0, PartitionState(LeaderAndIsr(1, 5, (1, 3), partition_epoch=1),
                                                                    EPOCH)))
        return original(topic, states, version)

    store.update_partition_states = racing_update
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert raced[0].ok
    assert result[T0] == LeaderAndIsr(3, 6, (3,), partition_epoch=3)


def test_an_election_on_a_state_written_by_a_newer_controller_is_aborted() -> None:
    # doElectLeaderForPartitions: controllerEpoch in the znode > ours
    m = machine(replicas=(1, 2, 3), live=(2, 3), state=(1, 5, (1, 2, 3)), status=PartitionStatus.OFFLINE)
    m.store.leader_writes("t", 0, PartitionState(m.store.state("t", 0).leader_and_isr, EPOCH + 1))
    result = m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert isinstance(result[T0], StateChangeFailed)
    assert "already written by another controller" in str(result[T0])


def test_a_fenced_write_raises_controller_moved() -> None:
    # handleStateChanges rethrows ControllerMovedException
    m = machine(replicas=(1, 2, 3), live=(2, 3), state=(1, 5, (1, 2, 3)), status=PartitionStatus.OFFLINE)
    m.store.controller_epoch_zk_version += 1  # another controller was elected
    with pytest.raises(ControllerMovedError):
        m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert m.sent() == []


# ---------------------------------------------------------------------------------------------- states


def test_a_partition_never_seen_cannot_go_online() -> None:
    # OnlinePartition.validPreviousStates = New, Online, Offline
    m = machine(state=(1, 5, (1, 2, 3)))
    m.psm.handle_state_changes([T0], PartitionStatus.ONLINE, OFFLINE)
    assert m.context.partition_state(T0) == PartitionStatus.NON_EXISTENT
    assert m.psm.failures[0].to_state == PartitionStatus.ONLINE


def test_only_an_offline_partition_can_become_non_existent() -> None:
    # NonExistentPartition.validPreviousStates = Offline
    m = machine(state=(1, 5, (1, 2, 3)), status=PartitionStatus.ONLINE)
    m.psm.handle_state_changes([T0], PartitionStatus.NON_EXISTENT)
    assert m.context.partition_state(T0) == PartitionStatus.ONLINE
    m.psm.handle_state_changes([T0], PartitionStatus.OFFLINE)
    m.psm.handle_state_changes([T0], PartitionStatus.NON_EXISTENT)
    assert m.context.partition_state(T0) == PartitionStatus.NON_EXISTENT
    assert m.sent() == []


def test_startup_marks_partitions_new_online_or_offline_by_their_cached_leader() -> None:
    # PartitionStateMachine.initializePartitionState
    m = machine(replicas=(1, 2), live=(2,), state=(1, 5, (1, 2)))
    other = TopicPartition("t", 1)
    m.context.update_partition_full_replica_assignment(other, ReplicaAssignment((2,)))
    m.psm.initialize_partition_state()
    assert m.context.partition_state(T0) == PartitionStatus.OFFLINE
    assert m.context.partition_state(other) == PartitionStatus.NEW


def test_triggering_online_changes_skips_topics_queued_for_deletion() -> None:
    # triggerOnlineStateChangeForPartitions
    m = machine(replicas=(1, 2), live=(2,), state=(1, 5, (1, 2)), status=PartitionStatus.OFFLINE)
    m.context.queue_topic_deletion(["t"])
    assert m.psm.trigger_online_partition_state_change() == {}
    assert m.context.partition_state(T0) == PartitionStatus.OFFLINE
