"""The controller's event handlers as Kafka 3.9's KafkaController runs them: broker changes, topic creation,
controlled shutdown, elections and auto-rebalance, reassignment, topic deletion, AlterPartition. Each test names
the Kafka method its rule comes from, and asserts the states, ZooKeeper writes and requests Kafka would produce.
The store is the in-memory double (controller_memory_store), which applies ZooKeeper's version rules."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.cluster import controller_events as events
from kbroker.cluster.controller_alter_partition import (
    AlterPartitionPartitionData,
    AlterPartitionRequestData,
    AlterPartitionTopicData,
    process_alter_partition,
)
from kbroker.cluster.controller_context import PartitionAndReplica, TopicPartition
from kbroker.cluster.controller_core import ControllerConfig, ControllerCore
from kbroker.cluster.controller_memory_store import MemoryStore
from kbroker.cluster.controller_reassignment import (
    process_api_partition_reassignment,
    process_zk_partition_reassignment,
)
from kbroker.cluster.controller_states import PartitionStatus, ReplicaStatus
from kbroker.cluster.model import (
    RECOVERING,
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
)
from wire.errors import ErrorCode

EPOCH, EPOCH_ZK_VERSION = 3, 7
T0 = TopicPartition("t", 0)


def broker(broker_id: int, epoch: int | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "localhost", 9000 + broker_id, "PLAINTEXT"),),
                              broker_epoch=100 + broker_id if epoch is None else epoch)


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def assignment(name: str, partitions: dict[int, tuple[int, ...]]) -> TopicAssignment:
    return TopicAssignment(name, topic_id(name), {p: ReplicaAssignment(r) for p, r in partitions.items()})


@dataclass
class Cluster:
    core: ControllerCore
    store: MemoryStore
    now: list[float]

    @property
    def context(self):
        return self.core.context

    def lai(self, tp: TopicPartition = T0) -> LeaderAndIsr:
        return self.store.state(tp.topic, tp.partition).leader_and_isr

    def brokers_now(self, *ids: int, epochs: dict[int, int] | None = None):
        return events.process_broker_change(self.core, [broker(b, (epochs or {}).get(b)) for b in ids])


def cluster(topics: dict[str, dict[int, tuple[int, ...]]] | None = None, brokers=(1, 2, 3),
            **config: object) -> Cluster:
    """A controller that has just failed over onto ZooKeeper holding `topics` (no partition state yet)."""
    topics = topics if topics is not None else {"t": {0: (1, 2, 3)}}
    store = MemoryStore(EPOCH_ZK_VERSION)
    assignments = [assignment(name, parts) for name, parts in topics.items()]
    for a in assignments:
        store.create_topic(a)
    now = [1000.0]
    core = ControllerCore(ControllerConfig(controller_id=1, **config), store, clock=lambda: now[0])
    events.process_controller_failover(core, EPOCH, EPOCH_ZK_VERSION, [broker(b) for b in brokers], assignments)
    return Cluster(core, store, now)


# ---------------------------------------------------------------------------------------------- topics


def test_topic_creation_writes_each_partition_state_and_brings_its_replicas_online() -> None:
    # processTopicChange -> onNewPartitionCreation: New, NewReplica, Online (create state znodes), OnlineReplica
    c = cluster(topics={})
    new = assignment("n", {0: (2, 3), 1: (3, 1)})
    c.store.create_topic(new)
    out = events.process_topic_change(c.core, ["n"], {"n": new})
    assert [(w.op, w.topic, sorted(w.states), dict(w.results)) for w in out.writes] == [
        ("create_partition_states", "n", [0, 1], {0: "OK", 1: "OK"})]
    assert c.store.state("n", 1).leader_and_isr == LeaderAndIsr(3, 0, (3, 1), partition_epoch=0)
    assert c.context.topic_ids["n"] == topic_id("n")
    assert {r: s for r, s in c.context.replica_states.items() if r.topic == "n"} == {
        PartitionAndReplica(TopicPartition("n", p), b): ReplicaStatus.ONLINE for p, bs in new.partitions.items()
        for b in bs.replicas}
    [sent] = out.requests  # the NewReplica step has no leadership to send yet
    assert sorted(sent.leader_and_isr) == [1, 2, 3]
    assert sorted(sent.leader_and_isr[1].partition_states()) == [TopicPartition("n", 1)]


# ---------------------------------------------------------------------------------------------- brokers


def test_a_dead_leader_is_replaced_by_the_next_isr_member_and_the_isr_shrinks() -> None:
    # processBrokerChange -> onBrokerFailure -> onReplicasBecomeOffline
    c = cluster()
    out = c.brokers_now(2, 3)
    assert c.lai() == LeaderAndIsr(2, 1, (2, 3), partition_epoch=1)
    assert c.context.partition_state(T0) == PartitionStatus.ONLINE
    assert c.context.replica_states[PartitionAndReplica(T0, 1)] == ReplicaStatus.OFFLINE
    assert [w.op for w in out.writes] == ["update_partition_states"]  # the Offline move finds 1 out of the ISR
    assert sorted(out.requests[0].leader_and_isr) == [2, 3]  # the election; StopReplica to dead 1 is dropped


def test_a_broker_death_that_moves_nothing_is_still_announced_to_every_broker() -> None:
    # onReplicasBecomeOffline: no replica offline and no election succeeded -> sendUpdateMetadataRequest
    c = cluster(brokers=(1, 2, 3, 4))
    out = c.brokers_now(1, 2, 3)
    [sent] = out.requests
    assert sorted(sent.update_metadata) == [1, 2, 3]
    assert [b.id for b in sent.update_metadata[1].live_brokers] == [1, 2, 3]


def test_a_new_broker_is_announced_to_the_others_and_told_every_partition() -> None:
    # onBrokerStartup: UpdateMetadata without partitions to existing brokers, with all of them to the new one
    c = cluster()
    out = c.brokers_now(1, 2, 3, 4)
    first, second = out.requests[:2]
    assert sorted(first.update_metadata) == [1, 2, 3]
    assert first.update_metadata[1].topic_states == ()
    assert list(second.update_metadata) == [4]
    assert list(second.update_metadata[4].partition_states()) == [T0]


def test_a_returning_broker_gets_leader_and_isr_for_its_replicas() -> None:
    # onBrokerStartup: replicas on new brokers -> OnlineReplica
    c = cluster()
    c.brokers_now(1, 2)
    out = c.brokers_now(1, 2, 3)
    assert any(3 in batch.leader_and_isr for batch in out.requests)
    assert c.context.replica_states[PartitionAndReplica(T0, 3)] == ReplicaStatus.ONLINE


def test_a_broker_registered_again_with_a_higher_epoch_is_failed_then_started() -> None:
    # processBrokerChange: bouncedBrokerIds -> onBrokerFailure, then onBrokerStartup
    c = cluster()
    c.brokers_now(1, 2, 3, epochs={3: 500})
    assert c.context.broker_epoch(3) == 500
    assert c.lai().isr == (1, 2)
    assert c.context.replica_states[PartitionAndReplica(T0, 3)] == ReplicaStatus.ONLINE


def test_replicas_answered_with_storage_errors_go_offline() -> None:
    # processLeaderAndIsrResponseReceived: KAFKA_STORAGE_ERROR -> replicasOnOfflineDirs -> onReplicasBecomeOffline
    c = cluster()
    events.process_leader_and_isr_response(c.core, 1, ErrorCode.NONE, {T0: ErrorCode.KAFKA_STORAGE_ERROR})
    assert c.lai() == LeaderAndIsr(2, 1, (2, 3), partition_epoch=1)
    assert c.context.replicas_on_offline_dirs[1] == {T0}


def test_failover_elects_a_leader_for_a_partition_whose_leader_is_gone() -> None:
    # onControllerFailover -> partitionStateMachine.startup: the cached leader is not live -> Offline -> Online
    c = cluster()
    store, state = c.store, c.store.state("t", 0)
    core = ControllerCore(ControllerConfig(controller_id=2), store)
    store.controller_epoch_zk_version = 8
    events.process_controller_failover(core, EPOCH + 1, 8, [broker(2), broker(3)], [assignment("t", {0: (1, 2, 3)})])
    assert state.leader_and_isr.leader == 1
    # replica startup first takes dead 1 out of the ISR (leader -1, epoch 1), then the partition is elected
    assert store.state("t", 0).leader_and_isr == LeaderAndIsr(2, 2, (2, 3), partition_epoch=2)
    assert store.state("t", 0).controller_epoch == EPOCH + 1


# ---------------------------------------------------------------------------------------------- controlled shutdown


def test_controlled_shutdown_moves_leadership_away_and_drops_the_broker_from_followed_isrs() -> None:
    # doControlledShutdown: led partitions -> ControlledShutdown election; followed -> StopReplica + OfflineReplica
    c = cluster(topics={"a": {0: (1, 2)}, "b": {0: (2, 1)}})
    out = events.process_controlled_shutdown(c.core, 1, 101)
    assert out.result == (ErrorCode.NONE, [])
    assert c.lai(TopicPartition("a", 0)) == LeaderAndIsr(2, 1, (2,), partition_epoch=1)
    assert c.lai(TopicPartition("b", 0)) == LeaderAndIsr(2, 1, (2,), partition_epoch=1)
    stops = [b.stop_replica[1].partition_states() for b in out.requests if 1 in b.stop_replica]
    assert stops[0] == {TopicPartition("b", 0): stops[0][TopicPartition("b", 0)]}
    assert not stops[0][TopicPartition("b", 0)].delete_partition
    assert c.context.shutting_down_broker_ids == {1}


def test_controlled_shutdown_answers_the_partitions_nobody_else_can_lead() -> None:
    # doControlledShutdown: partitionLeadersOnBroker after the moves
    c = cluster(topics={"a": {0: (1, 2)}})
    c.brokers_now(1)  # broker 2 dies: the ISR of a-0 is (1)
    c.brokers_now(1, 2)
    out = events.process_controlled_shutdown(c.core, 1, 101)
    assert out.result == (ErrorCode.NONE, [TopicPartition("a", 0)])


def test_controlled_shutdown_with_an_old_broker_epoch_is_refused() -> None:
    # doControlledShutdown: StaleBrokerEpochException
    c = cluster()
    assert events.process_controlled_shutdown(c.core, 1, 100).result == (ErrorCode.STALE_BROKER_EPOCH, [])
    assert c.context.shutting_down_broker_ids == set()


def test_controlled_shutdown_of_an_unknown_broker_is_broker_not_available() -> None:
    # doControlledShutdown: BrokerNotAvailableException (broker epoch unknown, as before KIP-380)
    c = cluster()
    assert events.process_controlled_shutdown(c.core, 9, -1).result == (ErrorCode.BROKER_NOT_AVAILABLE, [])


def test_controlled_shutdown_off_the_controller_is_not_controller() -> None:
    # doControlledShutdown: ControllerMovedException
    c = cluster()
    c.core.active = False
    assert events.process_controlled_shutdown(c.core, 1, 101).result == (ErrorCode.NOT_CONTROLLER, [])


# ---------------------------------------------------------------------------------------------- elections


def moved_leader() -> Cluster:
    """t-0 (1, 2, 3) led by 2 after broker 1 died and came back, with 1 back in the ISR."""
    c = cluster()
    c.brokers_now(2, 3)
    c.brokers_now(1, 2, 3)
    request = AlterPartitionRequestData(2, 102, (AlterPartitionTopicData("t", partitions=(
        AlterPartitionPartitionData(0, 1, (2, 3, 1), partition_epoch=1),)),))
    process_alter_partition(c.core, request, 1)
    return c


def test_preferred_election_gives_leadership_back_to_the_first_replica() -> None:
    # processReplicaLeaderElection(PREFERRED, AdminClientTriggered)
    c = moved_leader()
    out = events.process_replica_leader_election(c.core, [T0])
    assert out.result == {T0: 1}
    assert c.lai() == LeaderAndIsr(1, 2, (2, 3, 1), partition_epoch=3)


def test_preferred_election_answers_why_it_did_nothing() -> None:
    # processReplicaLeaderElection: ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    c = cluster()
    out = events.process_replica_leader_election(c.core, [T0, TopicPartition("nope", 0)])
    assert out.result == {T0: (ErrorCode.ELECTION_NOT_NEEDED, events.ELECTION_NOT_NEEDED_MESSAGE),
                          TopicPartition("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                      "The partition does not exist.")}


def test_preferred_election_fails_while_the_preferred_replica_is_out_of_the_isr() -> None:
    # leaderForPreferredReplica finds no leader -> PREFERRED_LEADER_NOT_AVAILABLE with the StateChangeFailed text
    c = cluster()
    c.brokers_now(2, 3)
    c.brokers_now(1, 2, 3)
    out = events.process_replica_leader_election(c.core, [T0])
    assert out.result == {T0: (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                               "Failed to elect leader for partition t-0 under strategy "
                               "PreferredReplicaPartitionLeaderElectionStrategy")}


def test_admin_unclean_election_brings_back_a_partition_whose_isr_is_dead() -> None:
    # processReplicaLeaderElection(UNCLEAN, AdminClientTriggered): OfflinePartitionLeaderElectionStrategy(true)
    c = cluster(topics={"t": {0: (1, 2)}})
    c.brokers_now(1)  # ISR (1)
    c.brokers_now(2)  # 1 dies too: leader -1, ISR (1)
    assert c.lai().leader == -1
    out = events.process_replica_leader_election(c.core, [T0], election_type="unclean")
    assert out.result == {T0: 2}
    assert c.lai() == LeaderAndIsr(2, 3, (2,), leader_recovery_state=RECOVERING, partition_epoch=3)


def test_auto_rebalance_elects_preferred_leaders_of_a_broker_over_the_imbalance_threshold() -> None:
    # checkAndTriggerAutoLeaderRebalance: imbalance ratio > leader.imbalance.per.broker.percentage / 100
    c = moved_leader()
    assert c.core.next_rebalance_check == 1005.0  # 5 s after failover
    out = events.process_auto_preferred_replica_leader_election(c.core)
    assert out.result == [T0]
    assert c.lai().leader == 1
    assert c.core.next_rebalance_check == 1300.0


def test_auto_rebalance_leaves_an_imbalance_at_the_threshold_alone() -> None:
    # checkAndTriggerAutoLeaderRebalance: the ratio must exceed the percentage (1 of 10 is not > 10 %)
    c = cluster(topics={"t": {p: (1, 2) for p in range(10)}})
    c.brokers_now(2)
    c.brokers_now(1, 2)
    for p in range(1, 10):  # nine leaderships go back to 1, one stays on 2
        events.process_replica_leader_election(c.core, [TopicPartition("t", p)], election_type="preferred")
    assert events.process_auto_preferred_replica_leader_election(c.core).result == []


def test_the_auto_rebalance_check_is_due_on_the_injected_clock() -> None:
    # scheduleAutoLeaderRebalanceTask(delay = 5 s) on failover
    c = cluster()
    assert not c.core.rebalance_due()
    c.now[0] += 5
    assert c.core.rebalance_due()


# ---------------------------------------------------------------------------------------------- reassignment


def test_reassignment_first_writes_the_full_replica_set_and_bumps_the_leader_epoch() -> None:
    # onPartitionReassignment phases U and A
    c = cluster(topics={"t": {0: (1, 2)}})
    out = process_api_partition_reassignment(c.core, {T0: (2, 3)})
    assert out.result == {T0: (ErrorCode.NONE, None)}
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert c.lai() == LeaderAndIsr(1, 1, (1, 2), partition_epoch=1)
    first = out.requests[0].leader_and_isr
    assert sorted(first) == [1, 2, 3]
    assert [first[b].partition_states()[T0].is_new for b in (1, 2, 3)] == [False, False, True]
    assert first[3].partition_states()[T0].adding_replicas == (3,)
    assert c.context.replica_states[PartitionAndReplica(T0, 3)] == ReplicaStatus.NEW


def test_reassignment_completes_when_the_target_replicas_join_the_isr() -> None:
    # processAlterPartition -> maybeCompleteReassignment -> onPartitionReassignment phase B
    c = cluster(topics={"t": {0: (1, 2)}})
    process_api_partition_reassignment(c.core, {T0: (2, 3)})
    request = AlterPartitionRequestData(1, 101, (AlterPartitionTopicData("t", partitions=(
        AlterPartitionPartitionData(0, 1, (1, 2, 3), partition_epoch=1),)),))
    out = process_alter_partition(c.core, request, 1)
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((2, 3))
    assert c.lai() == LeaderAndIsr(2, 3, (2, 3), partition_epoch=4)  # reassign election (B3), then 1 leaves the ISR
    assert c.context.partitions_being_reassigned == set()
    assert any(b.stop_replica.get(1) and b.stop_replica[1].partition_states()[T0].delete_partition
               for b in out.requests)
    assert PartitionAndReplica(T0, 1) not in c.context.replica_states


def test_reassignment_refuses_duplicates_dead_brokers_and_unknown_partitions() -> None:
    # validateReplicas, maybeTriggerPartitionReassignment
    c = cluster(topics={"t": {0: (1, 2)}})
    out = process_api_partition_reassignment(c.core, {T0: (2, 2), TopicPartition("t", 1): (1, 2),
                                                      TopicPartition("t", 2): None})
    assert out.result == {
        T0: (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Duplicate replica ids in partition reassignment replica list: ArrayBuffer(2, 2)"),
        TopicPartition("t", 1): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
        TopicPartition("t", 2): (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")}
    assert process_api_partition_reassignment(c.core, {T0: (1, 9)}).result[T0][0] == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT


def complete_reassignment_of_t0(c: Cluster, isr: tuple[int, ...], partition_epoch: int) -> None:
    """The leader (broker 1) reports the target replicas in its ISR."""
    request = AlterPartitionRequestData(1, 101, (AlterPartitionTopicData("t", partitions=(
        AlterPartitionPartitionData(0, 1, isr, partition_epoch=partition_epoch),)),))
    process_alter_partition(c.core, request, 1)


def test_zk_reassignment_starts_each_listed_partition_and_keeps_the_znode_until_it_completes() -> None:
    # processZkPartitionReassignment, then removePartitionFromReassigningPartitions -> maybeRemoveFromZkReassignment
    c = cluster(topics={"t": {0: (1, 2), 1: (1, 2)}})
    c.store.reassignment = {("t", 0): (2, 3), ("t", 1): (1, 3)}
    out = process_zk_partition_reassignment(c.core)
    assert out.result == {T0, TopicPartition("t", 1)}
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert c.store.reassignment == {("t", 0): (2, 3), ("t", 1): (1, 3)}
    complete_reassignment_of_t0(c, (1, 2, 3), partition_epoch=1)
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((2, 3))
    assert c.store.reassignment == {("t", 1): (1, 3)}  # the znode keeps what is still moving


def test_zk_reassignment_znode_is_deleted_with_its_last_partition() -> None:
    c = cluster(topics={"t": {0: (1, 2)}})
    c.store.reassignment = {("t", 0): (1, 2, 3)}
    process_zk_partition_reassignment(c.core)
    complete_reassignment_of_t0(c, (1, 2, 3), partition_epoch=1)
    assert c.store.reassignment is None
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((1, 2, 3))


def test_an_empty_or_unreadable_zk_reassignment_starts_nothing_and_goes_when_a_reassignment_completes() -> None:
    # getPartitionReassignment reads it as empty; maybeRemoveFromZkReassignment deletes it once nothing remains
    c = cluster(topics={"t": {0: (1, 2)}})
    c.store.reassignment = {}
    assert process_zk_partition_reassignment(c.core).result == set()
    assert c.store.reassignment == {}
    process_api_partition_reassignment(c.core, {T0: (1, 2, 3)})
    complete_reassignment_of_t0(c, (1, 2, 3), partition_epoch=1)
    assert c.store.reassignment is None


def test_zk_reassignment_of_an_unknown_partition_is_removed_from_the_znode_and_the_others_start() -> None:
    # maybeTriggerPartitionReassignment's UNKNOWN_TOPIC_OR_PARTITION, removed from the znode (no replica validation)
    c = cluster(topics={"t": {0: (1, 2)}})
    c.store.reassignment = {("t", 0): (2, 3), ("gone", 0): (1, 2)}
    out = process_zk_partition_reassignment(c.core)
    assert out.result == {T0}
    assert c.store.reassignment == {("t", 0): (2, 3)}
    assert [w.op for w in out.writes][-1] == "set_partition_reassignment"


def test_api_reassignment_replaces_a_zk_one_of_the_same_partition() -> None:
    # processApiPartitionReassignment: "the latest reassignment always takes precedence"
    c = cluster(topics={"t": {0: (1, 2)}, "u": {0: (1, 2)}})
    c.store.reassignment = {("t", 0): (2, 3), ("u", 0): (1, 3)}
    process_zk_partition_reassignment(c.core)
    out = process_api_partition_reassignment(c.core, {T0: (1, 3)})
    assert out.result == {T0: (ErrorCode.NONE, None)}
    assert c.store.reassignment == {("u", 0): (1, 3)}
    assert c.store.assignment("t").partitions[0] == ReplicaAssignment((1, 3, 2), adding=(3,), removing=(2,))


def test_a_new_controller_starts_reassignments_submitted_through_zookeeper_while_none_was_active() -> None:
    # onControllerFailover -> initializePartitionReassignments
    store = MemoryStore(EPOCH_ZK_VERSION)
    store.create_topic(assignment("t", {0: (1, 2)}))
    store.reassignment = {("t", 0): (2, 3)}
    core = ControllerCore(ControllerConfig(controller_id=1), store, clock=lambda: 1000.0)
    events.process_controller_failover(core, EPOCH, EPOCH_ZK_VERSION, [broker(b) for b in (1, 2, 3)],
                                       [store.assignment("t")])
    assert store.assignment("t").partitions[0] == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert core.context.partitions_being_reassigned == {T0}
    assert store.reassignment == {("t", 0): (2, 3)}


def test_a_new_controller_starts_a_partition_listed_in_zookeeper_and_already_moving_only_once() -> None:
    # initializePartitionReassignments: maybeResumeReassignments skips what processZkPartitionReassignment started
    store = MemoryStore(EPOCH_ZK_VERSION)
    store.create_topic(TopicAssignment("t", topic_id("t"), {0: ReplicaAssignment((2, 3, 1), (3,), (1,))}))
    store.create_partition_states("t", {0: PartitionState(LeaderAndIsr(1, 1, (1, 2)), EPOCH)}, EPOCH_ZK_VERSION)
    store.reassignment = {("t", 0): (2, 3)}
    core = ControllerCore(ControllerConfig(controller_id=1), store, clock=lambda: 1000.0)
    events.process_controller_failover(core, EPOCH, EPOCH_ZK_VERSION, [broker(b) for b in (1, 2, 3)],
                                       [store.assignment("t")])
    assert store.state("t", 0).leader_and_isr.leader_epoch == 2  # one epoch bump (phase A), not two


# ---------------------------------------------------------------------------------------------- deletion


def test_topic_deletion_stops_and_deletes_every_replica_then_removes_the_topic() -> None:
    # processTopicDeletion -> TopicDeletionManager.onTopicDeletion, completeReplicaDeletion, completeDeleteTopic
    c = cluster()
    c.store.deletion_marks.add("t")
    out = events.process_topic_deletion(c.core, ["t"])
    announced = [b.update_metadata[1].partition_states()[T0] for b in out.requests if 1 in b.update_metadata]
    assert announced[0].leader == -2
    deletes = {b: s.partition_states()[T0] for batch in out.requests for b, s in batch.stop_replica.items()
               if s.partition_states()[T0].delete_partition}
    assert sorted(deletes) == [1, 2, 3] and {s.leader_epoch for s in deletes.values()} == {-2}
    for replica in (1, 2):
        events.process_topic_deletion_stop_replica_response(c.core, replica, ErrorCode.NONE, {T0: ErrorCode.NONE})
    assert c.store.assignment("t") is not None
    out = events.process_topic_deletion_stop_replica_response(c.core, 3, ErrorCode.NONE, {T0: ErrorCode.NONE})
    assert [w.op for w in out.writes] == ["delete_topic_znodes"]
    assert (c.store.assignment("t"), c.store.state("t", 0), c.store.deletion_marks) == (None, None, set())
    assert "t" not in c.context.all_topics


def test_topic_deletion_waits_for_dead_replicas_and_resumes_when_they_return() -> None:
    # onPartitionDeletion: dead replicas -> ReplicaDeletionIneligible; onBrokerStartup -> resumeDeletionForTopics
    c = cluster()
    c.brokers_now(1, 2)
    events.process_topic_deletion(c.core, ["t"])
    assert c.context.replica_states[PartitionAndReplica(T0, 3)] == ReplicaStatus.DELETION_INELIGIBLE
    assert c.context.topics_ineligible_for_deletion == {"t"}
    for replica in (1, 2):
        events.process_topic_deletion_stop_replica_response(c.core, replica, ErrorCode.NONE, {T0: ErrorCode.NONE})
    assert c.store.assignment("t") is not None
    out = c.brokers_now(1, 2, 3)
    assert any(3 in b.stop_replica and b.stop_replica[3].partition_states()[T0].delete_partition
               for b in out.requests)


def test_a_deletion_mark_for_an_unknown_topic_is_dropped() -> None:
    # processTopicDeletion: nonExistentTopics -> deleteTopicDeletions
    c = cluster()
    c.store.deletion_marks.add("ghost")
    out = events.process_topic_deletion(c.core, ["ghost"])
    assert [(w.op, w.topic) for w in out.writes] == [("delete_topic_deletions", "ghost")]
    assert c.store.deletion_marks == set()


# ---------------------------------------------------------------------------------------------- AlterPartition


def alter(c: Cluster, isr: tuple[int, ...], leader_epoch: int = 0, partition_epoch: int = 0, version: int = 2,
          broker_epoch: int = 101, recovery: int = 0, topic: uuid.UUID | None = None):
    request = AlterPartitionRequestData(1, broker_epoch, (AlterPartitionTopicData(
        topic_id=topic or topic_id("t"), partitions=(AlterPartitionPartitionData(
            0, leader_epoch, isr, partition_epoch, recovery),)),))
    return process_alter_partition(c.core, request, version)


def partition_error(out) -> int:
    return out.result.topics[0].partitions[0].error_code


def test_alter_partition_writes_the_new_isr_and_answers_the_new_partition_epoch() -> None:
    # tryProcessAlterPartition: updateLeaderAndIsr, then UpdateMetadata to every broker
    c = cluster()
    out = alter(c, (1, 2))
    answer = out.result.topics[0]
    assert (answer.topic_id, answer.partitions[0].isr, answer.partitions[0].partition_epoch) == (topic_id("t"),
                                                                                                 (1, 2), 1)
    assert c.lai() == LeaderAndIsr(1, 0, (1, 2), partition_epoch=1)
    assert c.context.partition_leadership_info(T0).leader_and_isr == c.lai()
    assert sorted(out.requests[0].update_metadata) == [1, 2, 3]


def test_alter_partition_from_an_old_broker_epoch_is_stale_broker_epoch() -> None:
    # tryProcessAlterPartition: brokerEpochOpt != request epoch
    assert alter(cluster(), (1, 2), broker_epoch=99).result.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_at_an_old_leader_epoch_is_fenced() -> None:
    # tryProcessAlterPartition: FENCED_LEADER_EPOCH
    c = cluster()
    c.brokers_now(1, 2)  # leader epoch 1 now
    assert partition_error(alter(c, (1, 2), leader_epoch=0, partition_epoch=1)) == ErrorCode.FENCED_LEADER_EPOCH


def test_alter_partition_at_a_newer_epoch_than_the_controller_knows_is_not_controller() -> None:
    # tryProcessAlterPartition: the leader is ahead of this controller
    assert partition_error(alter(cluster(), (1, 2), leader_epoch=1)) == ErrorCode.NOT_CONTROLLER


def test_alter_partition_at_an_old_partition_epoch_is_invalid_update_version() -> None:
    # tryProcessAlterPartition: INVALID_UPDATE_VERSION
    c = cluster()
    alter(c, (1, 2))
    assert partition_error(alter(c, (1, 3), partition_epoch=0)) == ErrorCode.INVALID_UPDATE_VERSION


def test_alter_partition_repeating_the_current_state_is_answered_without_a_write() -> None:
    # tryProcessAlterPartition: equalsAllowStalePartitionEpoch, checked before the partition epoch fence
    c = cluster()
    alter(c, (1, 2))
    out = alter(c, (1, 2), partition_epoch=0)
    assert (partition_error(out), out.result.topics[0].partitions[0].partition_epoch) == (ErrorCode.NONE, 1)
    assert out.writes == []


def test_alter_partition_naming_a_dead_broker_is_ineligible_replica_from_v2() -> None:
    # tryProcessAlterPartition: KIP-841, OPERATION_NOT_ATTEMPTED before v2
    c = cluster(brokers=(1, 2, 3))
    c.brokers_now(1, 2)
    lai = c.lai()
    kwargs = {"leader_epoch": lai.leader_epoch, "partition_epoch": lai.partition_epoch}
    c.core.context.put_partition_leadership_info(T0, c.store.state("t", 0))
    assert lai.leader == 1
    assert partition_error(alter(c, (1, 2, 3), **kwargs)) == ErrorCode.INELIGIBLE_REPLICA
    request = AlterPartitionRequestData(1, 101, (AlterPartitionTopicData("t", partitions=(
        AlterPartitionPartitionData(0, lai.leader_epoch, (1, 2, 3), lai.partition_epoch),)),))
    out = process_alter_partition(c.core, request, 1)
    assert out.result.topics[0].topic_name == "t"
    assert partition_error(out) == ErrorCode.OPERATION_NOT_ATTEMPTED


def test_alter_partition_growing_the_isr_of_a_recovering_leader_is_invalid_request() -> None:
    # tryProcessAlterPartition: RECOVERING with more than one ISR member
    c = cluster()
    assert partition_error(alter(c, (1, 2), recovery=RECOVERING)) == ErrorCode.INVALID_REQUEST


def test_alter_partition_for_an_unknown_topic_id_is_unknown_topic_id() -> None:
    # tryProcessAlterPartition: controllerContext.topicName(topicId) is None
    out = alter(cluster(), (1, 2), topic=uuid.UUID(int=5))
    assert (out.result.topics[0].topic_id, partition_error(out)) == (uuid.UUID(int=5), ErrorCode.UNKNOWN_TOPIC_ID)


def test_alter_partition_off_the_controller_is_not_controller() -> None:
    # tryProcessAlterPartition: !isActive
    c = cluster()
    c.core.active = False
    assert alter(c, (1, 2)).result.error_code == ErrorCode.NOT_CONTROLLER
