"""The replica state machine as Kafka 3.9's ZkReplicaStateMachine: legal moves, the ISR shrinks it writes and the
LeaderAndIsr / StopReplica / UpdateMetadata it queues. Expected values follow ReplicaStateMachine.scala; each test
names the method. The store is the in-memory double (controller_memory_store) with ZooKeeper's version rules."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.cluster.controller_context import ControllerContext, PartitionAndReplica, TopicPartition
from kbroker.cluster.controller_memory_store import MemoryStore
from kbroker.cluster.controller_requests import RequestBatch, StopReplicaPartitionState
from kbroker.cluster.model import BrokerRegistration, EndPoint, LeaderAndIsr, PartitionState, ReplicaAssignment
from kbroker.cluster.replica_state_machine import ReplicaStateMachine, ReplicaStatus

T0 = TopicPartition("t", 0)
EPOCH, EPOCH_ZK_VERSION = 3, 2


@dataclass
class Machine:
    context: ControllerContext
    store: MemoryStore
    rsm: ReplicaStateMachine

    def sent(self) -> list:
        return self.rsm.batch.take_sent()

    def move(self, replica: int, target: ReplicaStatus) -> None:
        self.rsm.handle_state_changes([PartitionAndReplica(T0, replica)], target)

    def state(self, replica: int) -> ReplicaStatus | None:
        return self.context.replica_states.get(PartitionAndReplica(T0, replica))


def machine(replicas=(1, 2, 3), live=(1, 2, 3), state: tuple[int, tuple[int, ...]] | None = (1, (1, 2, 3)),
            status: ReplicaStatus | None = ReplicaStatus.ONLINE) -> Machine:
    """Partition t-0 with `state` (leader, isr) at leader epoch 5 in ZooKeeper and the cache; every replica in
    `status`."""
    ctx = ControllerContext(epoch=EPOCH, epoch_zk_version=EPOCH_ZK_VERSION)
    ctx.set_live_brokers(BrokerRegistration(b, (EndPoint("PLAINTEXT", "h", 9000 + b, "PLAINTEXT"),), broker_epoch=b)
                         for b in live)
    ctx.set_all_topics(["t"])
    ctx.add_topic_id("t", uuid.UUID(int=1))
    ctx.update_partition_full_replica_assignment(T0, ReplicaAssignment(tuple(replicas)))
    store = MemoryStore(EPOCH_ZK_VERSION)
    if state is not None:
        store.create_partition_states("t", {0: PartitionState(LeaderAndIsr(state[0], 5, state[1]), 1)},
                                      EPOCH_ZK_VERSION)
        ctx.put_partition_leadership_info(T0, store.state("t", 0))
    if status is not None:
        for replica in replicas:
            ctx.put_replica_state(PartitionAndReplica(T0, replica), status)
    return Machine(ctx, store, ReplicaStateMachine(ctx, store, RequestBatch(controller_id=1, context=ctx)))


# ---------------------------------------------------------------------------------------------- New, Online


def test_a_new_replica_gets_the_current_leadership_with_is_new() -> None:
    # doHandleStateChanges NewReplica: addLeaderAndIsrRequestForBrokers(Seq(replicaId), ..., isNew = true)
    m = machine(replicas=(1, 2, 3, 4), live=(1, 2, 3, 4), status=None)
    m.move(4, ReplicaStatus.NEW)
    [sent] = m.sent()
    assert list(sent.leader_and_isr) == [4]
    state = sent.leader_and_isr[4].partition_states()[T0]
    assert (state.leader, state.isr, state.is_new) == (1, (1, 2, 3), True)
    assert m.state(4) == ReplicaStatus.NEW


def test_the_current_leader_cannot_become_a_new_replica() -> None:
    # doHandleStateChanges NewReplica: "cannot be moved to NewReplica state as it is being requested to become leader"
    m = machine(status=None)
    m.move(1, ReplicaStatus.NEW)
    assert m.state(1) == ReplicaStatus.NON_EXISTENT
    assert "being requested to become leader" in m.rsm.failures[0].reason
    assert m.sent() == []


def test_a_new_replica_going_online_joins_the_assignment_and_is_sent_nothing() -> None:
    # doHandleStateChanges OnlineReplica from NewReplica: assignment.replicas :+ replicaId
    m = machine(status=None)
    m.context.put_replica_state(PartitionAndReplica(T0, 4), ReplicaStatus.NEW)
    m.move(4, ReplicaStatus.ONLINE)
    assert m.context.partition_replica_assignment(T0) == (1, 2, 3, 4)
    assert m.state(4) == ReplicaStatus.ONLINE
    assert m.sent() == []


def test_an_online_replica_going_online_again_is_sent_the_current_leadership() -> None:
    # doHandleStateChanges OnlineReplica from Online/Offline: isNew = false
    m = machine()
    m.move(2, ReplicaStatus.ONLINE)
    [sent] = m.sent()
    assert list(sent.leader_and_isr) == [2]
    assert not sent.leader_and_isr[2].partition_states()[T0].is_new


# ---------------------------------------------------------------------------------------------- Offline


def test_an_offline_follower_is_stopped_and_leaves_the_isr_with_a_new_leader_epoch() -> None:
    # doHandleStateChanges OfflineReplica + doRemoveReplicasFromIsr: newLeaderAndIsr(leader, isr - replica)
    m = machine()
    m.move(3, ReplicaStatus.OFFLINE)
    written = PartitionState(LeaderAndIsr(1, 6, (1, 2), partition_epoch=1), EPOCH)
    assert m.store.state("t", 0) == written
    assert m.context.partition_leadership_info(T0) == written
    assert m.state(3) == ReplicaStatus.OFFLINE


def test_an_offline_follower_gets_stop_replica_and_the_others_the_shrunk_isr() -> None:
    # OfflineReplica: StopReplica(deletePartition = false) to it, LeaderAndIsr to replicas other than it
    m = machine()
    m.move(3, ReplicaStatus.OFFLINE)
    [sent] = m.sent()
    # the StopReplica is queued before the ISR shrink, so it carries the leader epoch from before it
    assert sent.stop_replica[3].partition_states()[T0] == StopReplicaPartitionState(0, 5, False)
    assert sorted(sent.leader_and_isr) == [1, 2]
    assert sent.leader_and_isr[2].partition_states()[T0].isr == (1, 2)
    assert sorted(sent.update_metadata) == [1, 2, 3]


def test_an_offline_leader_leaves_the_partition_without_a_leader() -> None:
    # doRemoveReplicasFromIsr: newLeader = NoLeader when the replica led
    m = machine()
    m.move(1, ReplicaStatus.OFFLINE)
    assert m.store.state("t", 0).leader_and_isr == LeaderAndIsr(-1, 6, (2, 3), partition_epoch=1)


def test_the_last_isr_member_going_offline_stays_in_the_isr() -> None:
    # doRemoveReplicasFromIsr: an ISR of one is kept as it is
    m = machine(state=(1, (1,)))
    m.move(1, ReplicaStatus.OFFLINE)
    assert m.store.state("t", 0).leader_and_isr == LeaderAndIsr(-1, 6, (1,), partition_epoch=1)


def test_an_offline_replica_outside_the_isr_writes_nothing_but_the_others_still_hear_the_state() -> None:
    # doRemoveReplicasFromIsr: leaderAndIsrsWithoutReplica are cached and announced unchanged
    m = machine(state=(1, (1, 2)))
    m.move(3, ReplicaStatus.OFFLINE)
    assert m.store.state("t", 0).leader_and_isr.partition_epoch == 0
    [sent] = m.sent()
    assert sorted(sent.leader_and_isr) == [1, 2]
    assert m.state(3) == ReplicaStatus.OFFLINE


def test_an_offline_replica_of_a_topic_queued_for_deletion_sends_no_leader_and_isr() -> None:
    # OfflineReplica: "if (!controllerContext.isTopicQueuedUpForDeletion(partition.topic))"
    m = machine()
    m.context.queue_topic_deletion(["t"])
    m.move(3, ReplicaStatus.OFFLINE)
    [sent] = m.sent()
    assert sent.leader_and_isr == {}
    assert sent.stop_replica[3].partition_states()[T0] == StopReplicaPartitionState(0, -2, False)


def test_an_offline_replica_of_a_partition_without_leadership_only_triggers_update_metadata() -> None:
    # OfflineReplica: replicasWithoutLeadershipInfo -> addUpdateMetadataRequestForBrokers
    m = machine(state=None)
    m.move(3, ReplicaStatus.OFFLINE)
    [sent] = m.sent()
    assert sent.leader_and_isr == {}
    assert sorted(sent.update_metadata) == [1, 2, 3]
    assert m.state(3) == ReplicaStatus.OFFLINE


# ---------------------------------------------------------------------------------------------- deletion


def test_deletion_started_sends_stop_replica_with_delete() -> None:
    # ReplicaDeletionStarted: addStopReplicaRequestForBrokers(deletePartition = true)
    m = machine(status=ReplicaStatus.OFFLINE)
    m.context.queue_topic_deletion(["t"])
    m.move(2, ReplicaStatus.DELETION_STARTED)
    assert m.sent()[0].stop_replica[2].partition_states()[T0] == StopReplicaPartitionState(0, -2, True)
    assert m.state(2) == ReplicaStatus.DELETION_STARTED


def test_a_deleted_replica_leaves_the_assignment_and_the_state_machine() -> None:
    # NonExistentReplica: removeReplica from the assignment, removeReplicaState
    m = machine(status=ReplicaStatus.DELETION_STARTED)
    m.move(3, ReplicaStatus.DELETION_SUCCESSFUL)
    m.move(3, ReplicaStatus.NON_EXISTENT)
    assert m.context.partition_replica_assignment(T0) == (1, 2)
    assert m.state(3) is None


def test_an_online_replica_cannot_start_deletion() -> None:
    # ReplicaDeletionStarted.validPreviousStates = OfflineReplica
    m = machine()
    m.move(2, ReplicaStatus.DELETION_STARTED)
    assert m.state(2) == ReplicaStatus.ONLINE
    assert m.rsm.failures[0].to_state == ReplicaStatus.DELETION_STARTED
    assert m.sent() == []


def test_a_replica_whose_deletion_failed_can_go_online_again() -> None:
    # OnlineReplica.validPreviousStates includes ReplicaDeletionIneligible
    m = machine(status=ReplicaStatus.DELETION_INELIGIBLE)
    m.move(2, ReplicaStatus.ONLINE)
    assert m.state(2) == ReplicaStatus.ONLINE


# ---------------------------------------------------------------------------------------------- startup


def test_startup_marks_replicas_on_dead_brokers_ineligible_then_moves_them_offline() -> None:
    # ReplicaStateMachine.startup / initializeReplicaState
    m = machine(live=(1, 2), status=None)
    initial: dict[int, ReplicaStatus] = {}
    original = m.rsm.handle_state_changes

    def spy(replicas, target):
        replicas = list(replicas)
        for r in replicas:
            initial.setdefault(r.replica, m.context.replica_states[r])
        original(replicas, target)

    m.rsm.handle_state_changes = spy
    m.rsm.startup()
    assert initial == {1: ReplicaStatus.ONLINE, 2: ReplicaStatus.ONLINE, 3: ReplicaStatus.DELETION_INELIGIBLE}
    assert [m.state(r) for r in (1, 2, 3)] == [ReplicaStatus.ONLINE, ReplicaStatus.ONLINE, ReplicaStatus.OFFLINE]
    assert m.store.state("t", 0).leader_and_isr.isr == (1, 2)
