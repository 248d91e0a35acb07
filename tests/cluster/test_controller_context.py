"""The controller's cache (ControllerContext) and its request batch, as Kafka 3.9's ControllerContext.scala and
ControllerChannelManager.scala's AbstractControllerBrokerRequestBatch keep and build them. Each test names the
Kafka method its rule comes from."""

from __future__ import annotations

import uuid

import pytest

from kbroker.cluster.controller_context import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    ControllerContext,
    TopicPartition,
    reassign_to,
    remove_replica,
)
from kbroker.cluster.controller_requests import (
    BatchNotEmpty,
    LeaderAndIsrLiveLeader,
    RequestBatch,
    StopReplicaPartitionState,
)
from kbroker.cluster.controller_states import PartitionStatus
from kbroker.cluster.model import BrokerRegistration, EndPoint, LeaderAndIsr, PartitionState, ReplicaAssignment

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
TOPIC_ID = uuid.UUID(int=7)


def broker(broker_id: int, epoch: int | None = None) -> BrokerRegistration:
    endpoints = (EndPoint("PLAINTEXT", f"host{broker_id}", 9000 + broker_id, "PLAINTEXT"),
                 EndPoint("SSL", f"host{broker_id}", 9100 + broker_id, "SSL"))
    return BrokerRegistration(broker_id, endpoints, rack=None, broker_epoch=100 + broker_id if epoch is None else epoch)


def context(brokers=(1, 2, 3), assignments: dict[TopicPartition, tuple[int, ...]] | None = None,
            leaders: dict[TopicPartition, tuple[int, tuple[int, ...]]] | None = None) -> ControllerContext:
    ctx = ControllerContext(epoch=3, epoch_zk_version=2)
    ctx.set_live_brokers(broker(b) for b in brokers)
    assignments = assignments if assignments is not None else {T0: (1, 2, 3), T1: (2, 3, 1)}
    ctx.set_all_topics({tp.topic for tp in assignments})
    for topic in sorted(ctx.all_topics):
        ctx.add_topic_id(topic, TOPIC_ID if topic == "t" else uuid.uuid5(TOPIC_ID, topic))
    for tp, replicas in assignments.items():
        ctx.update_partition_full_replica_assignment(tp, ReplicaAssignment(replicas))
    for tp, (leader, isr) in (leaders or {}).items():
        ctx.put_partition_leadership_info(tp, PartitionState(LeaderAndIsr(leader, 4, isr, partition_epoch=9), 3))
    return ctx


# ---------------------------------------------------------------------------------------------- brokers


def test_shutting_down_brokers_are_not_live_but_still_registered() -> None:
    # ControllerContext.liveBrokerIds / liveOrShuttingDownBrokerIds
    ctx = context()
    ctx.shutting_down_broker_ids.add(2)
    assert ctx.live_broker_ids == {1, 3}
    assert ctx.live_or_shutting_down_broker_ids == {1, 2, 3}


def test_replica_on_offline_log_dir_is_not_online() -> None:
    # ControllerContext.isReplicaOnline: the broker is up but the partition's log dir is not
    ctx = context()
    ctx.replicas_on_offline_dirs[1] = {T0}
    assert not ctx.is_replica_online(1, T0)
    assert ctx.is_replica_online(1, T1)


def test_replica_on_shutting_down_broker_is_online_only_when_asked() -> None:
    # ControllerContext.isReplicaOnline(includeShuttingDownBrokers)
    ctx = context()
    ctx.shutting_down_broker_ids.add(1)
    assert not ctx.is_replica_online(1, T0)
    assert ctx.is_replica_online(1, T0, include_shutting_down=True)


# ---------------------------------------------------------------------------------------------- leadership


def test_leader_epoch_is_minus_two_for_topic_queued_for_deletion() -> None:
    # ControllerContext.leaderEpoch: the EpochDuringDelete sentinel overrides the cached epoch
    ctx = context(leaders={T0: (1, (1, 2, 3))})
    assert ctx.leader_epoch(T0) == 4
    assert ctx.leader_epoch(T1) == NO_EPOCH
    ctx.queue_topic_deletion(["t"])
    assert ctx.leader_epoch(T0) == EPOCH_DURING_DELETE


def test_partitions_with_offline_leader_leave_out_topics_queued_for_deletion() -> None:
    # ControllerContext.partitionsWithOfflineLeader
    ctx = context(leaders={T0: (1, (1, 2)), TopicPartition("u", 0): (1, (1,))},
                  assignments={T0: (1, 2), TopicPartition("u", 0): (1,)})
    ctx.remove_live_brokers([1])
    ctx.queue_topic_deletion(["u"])
    assert ctx.partitions_with_offline_leader() == [T0]


def test_leaders_on_broker_count_only_partitions_with_more_than_one_replica() -> None:
    # ControllerContext.partitionLeadersOnBroker: what a controlled shutdown answers as remaining
    single = TopicPartition("single", 0)
    ctx = context(assignments={T0: (1, 2), single: (1,)}, leaders={T0: (1, (1, 2)), single: (1, (1,))})
    assert ctx.partition_leaders_on_broker(1) == [T0]


def test_offline_partition_count_follows_transitions_and_ignores_deletions_in_progress() -> None:
    # ControllerContext.updatePartitionStateMetrics
    ctx = context()
    ctx.put_partition_state(T0, PartitionStatus.OFFLINE)
    ctx.put_partition_state(T1, PartitionStatus.OFFLINE)
    ctx.put_partition_state(T1, PartitionStatus.ONLINE)
    assert ctx.offline_partition_count == 1
    ctx.begin_topic_deletion(["t"])
    ctx.put_partition_state(T0, PartitionStatus.NON_EXISTENT)
    assert ctx.offline_partition_count == 1


def test_preferred_replica_imbalance_counts_partitions_not_led_by_their_first_replica() -> None:
    # ControllerContext.updatePreferredReplicaImbalanceMetric / hasPreferredLeader
    ctx = context(leaders={T0: (2, (1, 2, 3)), T1: (2, (1, 2, 3))})
    assert ctx.preferred_replica_imbalance_count == 1
    ctx.put_partition_leadership_info(T0, PartitionState(LeaderAndIsr(1, 5, (1, 2, 3)), 3))
    assert ctx.preferred_replica_imbalance_count == 0


def test_reassigning_partition_whose_preferred_replica_is_being_added_is_balanced_until_it_joins_the_isr() -> None:
    # ControllerContext.hasPreferredLeader
    ctx = context(leaders={T0: (1, (1, 2, 3))})
    ctx.update_partition_full_replica_assignment(T0, ReplicaAssignment((4, 1, 2, 3), adding=(4,), removing=(3,)))
    assert ctx.preferred_replica_imbalance_count == 0
    ctx.put_partition_leadership_info(T0, PartitionState(LeaderAndIsr(1, 5, (1, 2, 3, 4)), 3))
    assert ctx.preferred_replica_imbalance_count == 1


# ---------------------------------------------------------------------------------------------- topics


def test_a_topic_id_that_contradicts_the_known_one_is_refused() -> None:
    # ControllerContext.addTopicId
    ctx = context()
    with pytest.raises(ValueError, match="did not match existing ID"):
        ctx.add_topic_id("t", uuid.UUID(int=8))


def test_removing_a_topic_forgets_its_assignment_leadership_and_id() -> None:
    # ControllerContext.removeTopic
    ctx = context(leaders={T0: (1, (1, 2, 3))})
    ctx.queue_topic_deletion(["t"])
    ctx.remove_topic("t")
    assert ctx.all_partitions() == []
    assert ctx.partition_leadership_info(T0) is None
    assert ctx.topic_name(TOPIC_ID) is None
    assert "t" not in ctx.topics_to_be_deleted


def test_reassignment_lists_target_first_then_origin_replicas() -> None:
    # ReplicaAssignment.reassignTo, with the example of KafkaController.updateCurrentReassignment's comment
    moved = reassign_to(ReplicaAssignment((1, 2, 3)), (3, 4, 2))
    assert moved == ReplicaAssignment((3, 4, 2, 1), adding=(4,), removing=(1,))


def test_a_new_reassignment_is_computed_from_the_origin_of_the_one_in_flight() -> None:
    # ReplicaAssignment.reassignTo: originReplicas = replicas - adding
    in_flight = ReplicaAssignment((4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert reassign_to(in_flight, (6, 1)) == ReplicaAssignment((6, 1, 2), adding=(6,), removing=(2,))


def test_removing_a_replica_drops_it_from_replicas_adding_and_removing() -> None:
    # ReplicaAssignment.removeReplica
    assert remove_replica(ReplicaAssignment((3, 1, 2), adding=(3,), removing=(1,)), 1) == ReplicaAssignment(
        (3, 2), adding=(3,), removing=())


# ---------------------------------------------------------------------------------------------- request batch


def batch_for(ctx: ControllerContext) -> RequestBatch:
    batch = RequestBatch(controller_id=1, context=ctx)
    batch.new_batch()
    return batch


def test_leader_and_isr_carries_assignment_epochs_and_topic_id() -> None:
    # AbstractControllerBrokerRequestBatch.addLeaderAndIsrRequestForBrokers / sendLeaderAndIsrRequest
    ctx = context(leaders={T0: (1, (1, 2))})
    batch = batch_for(ctx)
    assignment = ReplicaAssignment((1, 2, 3), adding=(3,))
    batch.add_leader_and_isr([2], T0, ctx.partition_leadership_info(T0), assignment, is_new=False)
    request = batch.send(3).leader_and_isr[2]
    assert (request.controller_id, request.controller_epoch, request.broker_epoch) == (1, 3, 102)
    assert request.topic_states[0].topic_id == TOPIC_ID
    state = request.partition_states()[T0]
    assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (1, 4, (1, 2), 9)
    assert (state.replicas, state.adding_replicas, state.removing_replicas, state.is_new) == ((1, 2, 3), (3,), (),
                                                                                             False)


def test_is_new_stays_set_when_a_partition_is_added_again_in_the_batch() -> None:
    # addLeaderAndIsrRequestForBrokers: alreadyNew
    ctx = context(leaders={T0: (1, (1, 2))})
    batch = batch_for(ctx)
    state = ctx.partition_leadership_info(T0)
    batch.add_leader_and_isr([2], T0, state, ReplicaAssignment((1, 2, 3)), is_new=True)
    batch.add_leader_and_isr([2], T0, state, ReplicaAssignment((1, 2, 3)), is_new=False)
    assert batch.send(3).leader_and_isr[2].partition_states()[T0].is_new


def test_leader_and_isr_partitions_also_go_to_every_live_broker_in_update_metadata() -> None:
    # addLeaderAndIsrRequestForBrokers -> addUpdateMetadataRequestForBrokers(liveOrShuttingDownBrokerIds)
    ctx = context(leaders={T0: (1, (1, 2))})
    ctx.shutting_down_broker_ids.add(3)
    batch = batch_for(ctx)
    batch.add_leader_and_isr([2], T0, ctx.partition_leadership_info(T0), ReplicaAssignment((1, 2, 3)), False)
    sent = batch.send(3)
    assert sorted(sent.update_metadata) == [1, 2, 3]
    assert list(sent.update_metadata[1].partition_states()) == [T0]


def test_live_leaders_name_each_leader_by_its_inter_broker_listener() -> None:
    # sendLeaderAndIsrRequest: leaders = brokers leading a listed partition, node(interBrokerListenerName)
    ctx = context(leaders={T0: (1, (1, 2))})
    batch = RequestBatch(controller_id=1, context=ctx, inter_broker_listener="SSL")
    batch.add_leader_and_isr([2], T0, ctx.partition_leadership_info(T0), ReplicaAssignment((1, 2, 3)), False)
    assert batch.send(3).leader_and_isr[2].live_leaders == (LeaderAndIsrLiveLeader(1, "host1", 9101),)


def test_update_metadata_announces_leader_minus_two_for_a_topic_queued_for_deletion() -> None:
    # addUpdateMetadataRequestForBrokers: LeaderAndIsr.duringDelete(isr) (leader -2, epochs 0)
    ctx = context(leaders={T0: (1, (1, 2))})
    ctx.queue_topic_deletion(["t"])
    batch = batch_for(ctx)
    batch.add_update_metadata([1], [T0])
    state = batch.send(3).update_metadata[1].partition_states()[T0]
    assert (state.leader, state.leader_epoch, state.zk_version, state.isr) == (-2, 0, 0, (1, 2))


def test_update_metadata_lists_replicas_on_dead_brokers_as_offline() -> None:
    # addUpdateMetadataRequestForBrokers: offlineReplicas
    ctx = context(leaders={T0: (1, (1, 2))})
    ctx.remove_live_brokers([3])
    batch = batch_for(ctx)
    batch.add_update_metadata([1], [T0])
    assert batch.send(3).update_metadata[1].partition_states()[T0].offline_replicas == (3,)


def test_update_metadata_skips_partitions_without_a_leader_yet() -> None:
    # addUpdateMetadataRequestForBrokers: "Leader not yet assigned ... Skip sending"
    ctx = context()
    batch = batch_for(ctx)
    batch.add_update_metadata([1], [T0])
    request = batch.send(3).update_metadata[1]
    assert request.topic_states == ()
    assert [b.id for b in request.live_brokers] == [1, 2, 3]


def test_update_metadata_describes_every_endpoint_with_its_security_protocol_id() -> None:
    # sendUpdateMetadataRequests: UpdateMetadataBroker / UpdateMetadataEndpoint (SecurityProtocol ids)
    ctx = context()
    batch = batch_for(ctx)
    batch.add_update_metadata([1])
    live = batch.send(3).update_metadata[1].live_brokers[0]
    assert [(e.listener, e.port, e.security_protocol) for e in live.endpoints] == [("PLAINTEXT", 9001, 0),
                                                                                   ("SSL", 9101, 1)]


def test_stop_replica_carries_delete_once_asked_and_the_deletion_epoch() -> None:
    # addStopReplicaRequestForBrokers: alreadyDelete, leaderEpoch(partition)
    ctx = context(leaders={T0: (1, (1, 2))})
    ctx.queue_topic_deletion(["t"])
    batch = batch_for(ctx)
    batch.add_stop_replica([2], T0, delete_partition=True)
    batch.add_stop_replica([2], T0, delete_partition=False)
    assert batch.send(3).stop_replica[2].partition_states()[T0] == StopReplicaPartitionState(0, -2, True)


def test_requests_go_only_to_brokers_registered_when_the_batch_is_sent() -> None:
    # sendLeaderAndIsrRequest / sendStopReplicaRequests / sendUpdateMetadataRequests: liveOrShuttingDownBrokerIds
    ctx = context(leaders={T0: (1, (1, 2))})
    batch = batch_for(ctx)
    batch.add_leader_and_isr([2, 3], T0, ctx.partition_leadership_info(T0), ReplicaAssignment((1, 2, 3)), False)
    batch.add_stop_replica([3], T0, delete_partition=False)
    ctx.remove_live_brokers([3])
    sent = batch.send(3)
    assert (sorted(sent.leader_and_isr), sorted(sent.update_metadata), sent.stop_replica) == ([2], [1, 2], {})


def test_a_new_batch_cannot_start_while_the_last_one_holds_requests() -> None:
    # AbstractControllerBrokerRequestBatch.newBatch
    ctx = context()
    batch = batch_for(ctx)
    batch.add_update_metadata([1])
    with pytest.raises(BatchNotEmpty):
        batch.new_batch()
