"""Partition reassignment as Kafka 3.9's ZooKeeper controller runs it (KafkaController.onPartitionReassignment and
the AlterPartitionReassignments path).

RS = the replica set, ORS = the original replicas, TRS = the target, AR = adding (TRS - ORS), RR = removing
(ORS - TRS). Phase U writes RS = TRS + ORS with AR and RR to the topic znode and stops adding replicas a replaced
reassignment no longer wants. While TRS is not all in the ISR (phase A), the leader epoch goes up, ORS gets
LeaderAndIsr and AR gets it with is_new, and AR replicas become NewReplica. Once TRS is in the ISR (phase B), AR
goes online, RS = TRS in memory, the leader moves if it is not in TRS (or only the epoch goes up), RR goes
Offline -> DeletionStarted -> DeletionSuccessful -> NonExistent, the topic znode gets RS = TRS, and every broker
gets UpdateMetadata. The ISR change that completes it arrives through AlterPartition.

Reassignments also arrive through ZooKeeper: a tool (kafka-reassign-partitions --zookeeper, or anything writing
Kafka's JSON) creates /admin/reassign_partitions, and the controller starts each partition's move; a partition leaves
the znode when its move completes, cannot start, or is replaced through the API, and the znode goes with the last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kbroker.cluster.controller_context import (
    PartitionAndReplica,
    TopicPartition,
    completed_assignment,
    is_being_reassigned,
    origin_replicas,
    reassign_to,
)
from kbroker.cluster.controller_core import NOT_CONTROLLER_MESSAGE, UNKNOWN_PARTITION, ControllerCore, event
from kbroker.cluster.controller_states import PartitionStatus, ReplicaStatus
from kbroker.cluster.controller_store import (
    ControllerMovedError,
    StateChangeFailed,
    StoreWriteFailed,
    is_version_conflict,
)
from kbroker.cluster.elections import target_replicas
from kbroker.cluster.model import PartitionState, ReplicaAssignment, TopicAssignment
from kbroker.cluster.partition_state_machine import REASSIGN
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
ApiError = tuple[ErrorCode, str | None]  # an error code and Kafka's message for it
NONE_ERROR: ApiError = (ErrorCode.NONE, None)


def is_reassignment_complete(core: ControllerCore, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
    """Done when nothing is moving, or every target replica is in the ISR as ZooKeeper has it now."""
    if not is_being_reassigned(assignment):
        return True
    state = core.store.partition_states([tp]).get(tp)
    return state is not None and set(target_replicas(assignment)) <= set(state.leader_and_isr.isr)


def on_partition_reassignment(core: ControllerCore, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    """Start, continue or finish one partition's reassignment."""
    core.topic_deletion.mark_topic_ineligible_for_deletion([tp.topic])
    _update_current_reassignment(core, tp, reassignment)
    rsm = core.replica_state_machine
    if not is_reassignment_complete(core, tp, reassignment):
        _update_leader_epoch_and_send(core, tp, reassignment)                       # A1
        for replica in reassignment.adding:                                          # A2
            rsm.handle_state_changes([PartitionAndReplica(tp, replica)], ReplicaStatus.NEW)
        return
    rsm.handle_state_changes([PartitionAndReplica(tp, r) for r in reassignment.adding], ReplicaStatus.ONLINE)  # B1
    completed = completed_assignment(reassignment)
    core.context.update_partition_full_replica_assignment(tp, completed)             # B2
    _move_leader_if_required(core, tp, completed)                                    # B3
    _stop_removed_replicas(core, tp, reassignment.removing)                          # B4, B5
    _write_assignment(core, tp, completed)                                           # B6
    # B7 (always in progress here: phase U added it)
    _remove_from_zk_reassignment_or_log(core, lambda t, replicas: t == tp and replicas == completed.replicas)
    core.context.partitions_being_reassigned.discard(tp)
    core.send_update_metadata_to_all([tp])                                           # B8
    core.topic_deletion.resume_deletion_for_topics([tp.topic])


def maybe_complete_reassignment(core: ControllerCore, tp: TopicPartition) -> None:
    assignment = core.context.partition_full_replica_assignment(tp)
    if is_reassignment_complete(core, tp, assignment):
        on_partition_reassignment(core, tp, assignment)


def maybe_resume_reassignments(core: ControllerCore, brokers: set[int] | None = None,
                               skip: frozenset[TopicPartition] = frozenset()) -> None:
    """Continue reassignments (all of them, or those whose target includes one of `brokers`), but not `skip`."""
    for tp in sorted(core.context.partitions_being_reassigned - skip):
        assignment = core.context.partition_full_replica_assignment(tp)
        if brokers is None or set(target_replicas(assignment)) & brokers:
            on_partition_reassignment(core, tp, assignment)


def initialize_partition_reassignments(core: ControllerCore) -> None:
    """A new controller: what was submitted through ZooKeeper meanwhile first, then the moves the topic znodes
    show in progress (Kafka's initializePartitionReassignments)."""
    started = process_zk_partition_reassignment(core).result or set()
    maybe_resume_reassignments(core, skip=frozenset(started))


@event
def process_zk_partition_reassignment(core: ControllerCore) -> set[TopicPartition]:
    """/admin/reassign_partitions was created (or is found by a new controller): start every partition it lists
    (Kafka does not validate these replicas as it does the API's) and drop from it those that could not start.
    Returns the started ones."""
    if not core.active:
        return set()
    to_reassign = {}
    for (topic, partition), target in sorted((core.store.partition_reassignment() or {}).items()):
        tp = TopicPartition(topic, partition)
        to_reassign[tp] = reassign_to(core.context.partition_full_replica_assignment(tp), target)
    results = _trigger_reassignments(core, to_reassign)
    failed = {tp for tp, (error, _) in results.items() if error != ErrorCode.NONE}
    if failed:
        _remove_from_zk_reassignment_or_log(core, lambda tp, _: tp in failed)
    return set(to_reassign) - failed


def maybe_remove_from_zk_reassignment(core: ControllerCore,
                                      should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]) -> None:
    """Take partitions out of /admin/reassign_partitions (rewritten whenever some remain, as Kafka does), deleting
    it when none is left; the next one is then seen by the creation watch (Kafka re-queues its event instead)."""
    pending = core.store.partition_reassignment()
    if pending is None:
        return
    remaining = {tp: replicas for tp, replicas in pending.items()
                 if not should_remove(TopicPartition(*tp), tuple(replicas))}
    if remaining:
        core.store.set_partition_reassignment(remaining, core.context.epoch_zk_version)
    else:
        core.store.delete_partition_reassignment(core.context.epoch_zk_version)


def _remove_from_zk_reassignment_or_log(core: ControllerCore,
                                        should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]) -> None:
    """The znode's bookkeeping must not undo the event it follows (the moves already started, an ISR already
    written): a failure other than losing the controllership is logged, as Kafka's event loop logs it."""
    try:
        maybe_remove_from_zk_reassignment(core, should_remove)
    except ControllerMovedError:
        raise
    except Exception:
        log.exception("cannot update %s", "/admin/reassign_partitions")


@event
def process_api_partition_reassignment(core: ControllerCore, reassignments: Mapping[TopicPartition,
                                       Sequence[int] | None]) -> dict[TopicPartition, ApiError] | ApiError:
    """AlterPartitionReassignments: per partition, NONE or Kafka's error; a target of None cancels. A controller
    that is not active answers NOT_CONTROLLER for the whole request."""
    if not core.active:
        return ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE
    results: dict[TopicPartition, ApiError] = {}
    to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
    for tp, target in reassignments.items():
        tp = TopicPartition(*tp)
        error = validate_replicas(core, tp, target) if target is not None else None
        if error is not None:
            results[tp] = error
            continue
        built = _build_reassignment(core, tp, target)
        if built is None:
            results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
        else:
            to_reassign[tp] = built
    # the latest reassignment of a partition wins, whichever way it came
    maybe_remove_from_zk_reassignment(core, lambda tp, _: tp in to_reassign)
    results.update(_trigger_reassignments(core, to_reassign))
    return results


def validate_replicas(core: ControllerCore, tp: TopicPartition, replicas: Sequence[int]) -> ApiError | None:
    """KafkaController.validateReplicas for a partition the controller knows."""
    return replica_list_error(replicas, core.context.partition_full_replica_assignment(tp),
                              core.context.live_broker_ids)


def replica_list_error(replicas: Sequence[int], current: ReplicaAssignment, live: frozenset[int]) -> ApiError | None:
    """KafkaController.validateReplicas: non-empty, no duplicates, no negative ids, every added replica alive."""
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
    shown = ", ".join(map(str, replicas))
    if len(set(replicas)) != len(replicas):
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: ArrayBuffer({shown})")
    if any(r < 0 for r in replicas):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: ArrayBuffer({shown})"
    adding = reassign_to(current, replicas).adding
    if not set(adding) <= live:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"ArrayBuffer({', '.join(map(str, adding))}), live broker list: {_scala_set(live)}")
    return None


def _scala_set(items: frozenset[int]) -> str:
    """How Scala prints an immutable Set: Set(...) up to four elements, HashSet(...) beyond (order as hashed,
    which for small ints is ascending)."""
    name = "Set" if len(items) <= 4 else "HashSet"
    return f"{name}({', '.join(map(str, sorted(items)))})"


def _build_reassignment(core: ControllerCore, tp: TopicPartition,
                        target: Sequence[int] | None) -> ReplicaAssignment | None:
    """The assignment to move to; cancelling returns to the origin replicas, and there is nothing to cancel when
    no reassignment is in progress."""
    current = core.context.partition_full_replica_assignment(tp)
    if is_being_reassigned(current):
        return reassign_to(current, origin_replicas(current) if target is None else target)
    return None if target is None else reassign_to(current, target)


def _trigger_reassignments(core: ControllerCore,
                           reassignments: Mapping[TopicPartition, ReplicaAssignment]) -> dict[TopicPartition, ApiError]:
    results: dict[TopicPartition, ApiError] = {}
    for tp, reassignment in reassignments.items():
        if core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic) or \
                not core.context.partition_replica_assignment(tp):
            results[tp] = UNKNOWN_PARTITION
            continue
        try:
            on_partition_reassignment(core, tp, reassignment)
            results[tp] = NONE_ERROR
        except ControllerMovedError:
            raise
        except Exception:  # Kafka answers any other failure as UNKNOWN_SERVER_ERROR
            core.batch.clear()
            results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, None)
    return results


def _update_current_reassignment(core: ControllerCore, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
    """Phase U: ZooKeeper first (so a new controller can resume), then memory; stop replicas a replaced
    reassignment was adding."""
    current = core.context.partition_full_replica_assignment(tp)
    if current != reassignment:
        _write_assignment(core, tp, reassignment)
        core.context.update_partition_full_replica_assignment(tp, reassignment)
        unneeded = [r for r in current.replicas if r not in reassignment.replicas]
        if unneeded:
            _stop_removed_replicas(core, tp, unneeded)
    core.context.partitions_being_reassigned.add(tp)


def _write_assignment(core: ControllerCore, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
    partitions = dict(core.context.partition_full_replica_assignment_for_topic(tp.topic))
    partitions[tp.partition] = assignment
    topic_id = core.context.topic_ids.get(tp.topic)
    if topic_id is None:
        raise ValueError(f"no topic id known for {tp.topic}")
    result = core.store.set_topic_assignment(TopicAssignment(tp.topic, topic_id, partitions),
                                             core.context.epoch_zk_version)
    if not result.ok:
        raise StoreWriteFailed(f"Failed to update assignment for {tp.topic}-{tp.partition}: {result.status.name}")


def _move_leader_if_required(core: ControllerCore, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
    """B3: elect from TRS when the leader is not in it or is down; otherwise only bump the leader epoch."""
    state = core.context.partition_leadership_info(tp)
    leader = state.leader_and_isr.leader if state is not None else -1
    if leader in assignment.replicas and core.context.is_replica_online(leader, tp):
        _update_leader_epoch_and_send(core, tp, assignment)
    else:
        core.partition_state_machine.handle_state_changes([tp], PartitionStatus.ONLINE, REASSIGN)


def _stop_removed_replicas(core: ControllerCore, tp: TopicPartition, removed: Sequence[int]) -> None:
    replicas = [PartitionAndReplica(tp, r) for r in removed]
    rsm = core.replica_state_machine
    for target in (ReplicaStatus.OFFLINE, ReplicaStatus.DELETION_STARTED, ReplicaStatus.DELETION_SUCCESSFUL,
                   ReplicaStatus.NON_EXISTENT):
        rsm.handle_state_changes(replicas, target)


def update_leader_epoch(core: ControllerCore, tp: TopicPartition) -> PartitionState:
    """Same leader and ISR, leader epoch + 1, so the leader takes the new replica list (updateLeaderEpoch)."""
    context = core.context
    while True:
        current = core.store.partition_states([tp]).get(tp)
        if current is None:
            raise StateChangeFailed(f"Cannot update leader epoch for partition {tp.topic}-{tp.partition} as "
                                    f"leaderAndIsr path is empty.")
        if current.controller_epoch > context.epoch:
            raise StateChangeFailed(f"Leader and isr path written by another controller with epoch "
                                    f"{current.controller_epoch}. Aborting state change by this controller")
        lai = current.leader_and_isr
        bumped = PartitionState(replace(lai, leader_epoch=lai.leader_epoch + 1), context.epoch)
        outcome = core.store.update_partition_states(tp.topic, {tp.partition: bumped},
                                                     context.epoch_zk_version).get(tp.partition)
        if outcome is not None and outcome.ok:
            written = PartitionState(replace(bumped.leader_and_isr, partition_epoch=outcome.version), context.epoch)
            context.put_partition_leadership_info(tp, written)
            return written
        if outcome is None or not is_version_conflict(outcome):
            raise StoreWriteFailed("no result" if outcome is None else outcome.status.name)


def _update_leader_epoch_and_send(core: ControllerCore, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
    """A1 (and B3 with a live leader): origin replicas get LeaderAndIsr, adding replicas get it with is_new so
    they may be placed in any good log dir."""
    state = update_leader_epoch(core, tp)
    core.batch.new_batch()
    core.batch.add_leader_and_isr(origin_replicas(assignment), tp, state, assignment, is_new=False)
    core.batch.add_leader_and_isr(assignment.adding, tp, state, assignment, is_new=True)
    core.batch.send(core.context.epoch)
