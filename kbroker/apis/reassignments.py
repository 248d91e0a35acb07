"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): move partitions to other replicas, and
see the moves in progress, as Kafka's controller runs them.

A single node is every partition's only replica: the one valid target is that node, which changes nothing, and no
move is ever in progress. In a cluster the active controller runs the move (kbroker/cluster/controller_reassignment:
new replicas catch up, join the ISR, then the old ones are removed) and answers at once; other brokers answer
NOT_CONTROLLER, and clients send these to the controller.
"""

from __future__ import annotations

from kbroker.apis.controller import active_controller
from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.controller_context import TopicPartition
from kbroker.cluster.controller_core import NOT_CONTROLLER_MESSAGE, UNKNOWN_PARTITION
from kbroker.cluster.controller_reassignment import replica_list_error
from kbroker.cluster.controller_store import ControllerMovedError
from kbroker.cluster.model import ReplicaAssignment
from wire import messages
from wire.errors import ErrorCode

Outcome = tuple[int, str | None]
NO_MOVE = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)


def _current(broker: Broker, tp: TopicPartition) -> tuple[tuple[int, ...] | None, frozenset[int]]:
    """The partition's replicas now (None if it does not exist) and the live brokers."""
    member = getattr(broker, "cluster", None)
    if member is None:
        topic = broker.topics.get(tp.topic)
        exists = topic is not None and 0 <= tp.partition < topic.partitions
        return ((broker.node_id,) if exists else None), frozenset({broker.node_id})
    state = member.metadata.partition(tp.topic, tp.partition)
    alive = frozenset(b.broker_id for b in member.metadata.alive_brokers())
    return (None if state is None else tuple(state.replicas)), alive


def _factor_change_refused(broker: Broker, tp: TopicPartition, target: tuple[int, ...] | None,
                           allowed: bool) -> Outcome | None:
    """KIP-860 (v1): with allow_replication_factor_change false, a valid target of another size is refused (an
    invalid replica list keeps its own error, checked first as Kafka does)."""
    replicas, alive = _current(broker, tp)
    if allowed or target is None or replicas is None or len(target) == len(replicas):
        return None
    if replica_list_error(target, ReplicaAssignment(replicas), alive) is not None:
        return None
    return (ErrorCode.INVALID_REPLICATION_FACTOR, f"The replication factor is changed from {len(replicas)} to "
                                                  f"{len(target)} but allowReplicationFactorChange is false")


def _on_single_node(broker: Broker, tp: TopicPartition, target: tuple[int, ...] | None) -> Outcome:
    if target is None:
        return NO_MOVE
    replicas, alive = _current(broker, tp)
    error = replica_list_error(target, ReplicaAssignment(replicas or ()), alive)
    if error is not None:
        return error
    return (ErrorCode.NONE, None) if replicas is not None else UNKNOWN_PARTITION


@handles(45)
async def alter_partition_reassignments(broker: Broker, header, request):
    R = messages.AlterPartitionReassignmentsResponse
    allowed = request.allow_replication_factor_change if header.request_api_version >= 1 else True
    targets = {TopicPartition(t.name, p.partition_index): (None if p.replicas is None else tuple(p.replicas))
               for t in request.topics for p in t.partitions}
    results: dict[TopicPartition, Outcome] = {}
    for tp, target in targets.items():
        refused = _factor_change_refused(broker, tp, target, allowed)
        if refused is not None:
            results[tp] = refused
    asked = [(tp, target) for tp, target in targets.items() if tp not in results]
    error: Outcome = (ErrorCode.NONE, None)
    if getattr(broker, "cluster", None) is None:
        results.update({tp: _on_single_node(broker, tp, target) for tp, target in asked})
    elif asked:
        controller = active_controller(broker)
        try:
            outcome = (ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE) if controller is None else \
                await controller.alter_reassignments(asked)
        except ControllerMovedError:
            outcome = (ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
        if isinstance(outcome, dict):
            results.update(outcome)
        else:
            error = outcome
    if error[0]:
        return R(throttle_time_ms=0, allow_replication_factor_change=allowed, error_code=error[0],
                 error_message=error[1], responses=[])
    by_topic: dict[str, list] = {}
    for tp in targets:
        code, message = results[tp]
        by_topic.setdefault(tp.topic, []).append(R.ReassignablePartitionResponse(
            partition_index=tp.partition, error_code=code, error_message=message))
    return R(throttle_time_ms=0, allow_replication_factor_change=allowed, error_code=ErrorCode.NONE,
             error_message=None, responses=[R.ReassignableTopicResponse(name=name, partitions=found)
                                            for name, found in by_topic.items()])


@handles(46)
async def list_partition_reassignments(broker: Broker, header, request):
    R = messages.ListPartitionReassignmentsResponse
    wanted = None if request.topics is None else \
        [TopicPartition(t.name, index) for t in request.topics for index in t.partition_indexes]
    if getattr(broker, "cluster", None) is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[])
    controller = active_controller(broker)
    try:
        error, moving = (ErrorCode.NOT_CONTROLLER, {}) if controller is None else \
            await controller.list_reassignments(wanted)
    except ControllerMovedError:
        error, moving = ErrorCode.NOT_CONTROLLER, {}
    if error:
        return R(throttle_time_ms=0, error_code=error, error_message=NOT_CONTROLLER_MESSAGE, topics=[])
    by_topic: dict[str, list] = {}
    for tp, assignment in sorted(moving.items()):
        by_topic.setdefault(tp.topic, []).append(R.OngoingPartitionReassignment(
            partition_index=tp.partition, replicas=list(assignment.replicas), adding_replicas=list(assignment.adding),
            removing_replicas=list(assignment.removing)))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
             topics=[R.OngoingTopicReassignment(name=name, partitions=found) for name, found in by_topic.items()])
