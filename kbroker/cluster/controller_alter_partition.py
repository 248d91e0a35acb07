"""AlterPartition (56) as Kafka 3.9's ZooKeeper controller answers it (KafkaController.tryProcessAlterPartition).

A leader proposes a new ISR at its leader epoch and partition epoch (the state znode's version). The controller
checks, in Kafka's order:
- not the active controller: NOT_CONTROLLER for the whole request;
- the broker is unknown or its epoch is not the registered one: STALE_BROKER_EPOCH for the whole request;
- per partition: unknown topic id (v2+) UNKNOWN_TOPIC_ID; no leadership known UNKNOWN_TOPIC_OR_PARTITION;
  a partition or leader epoch newer than the controller's NOT_CONTROLLER (it is probably no longer controller);
  an older leader epoch FENCED_LEADER_EPOCH; the same state already (older partition epoch allowed) is answered
  as it is; an older partition epoch INVALID_UPDATE_VERSION; RECOVERING with more than one ISR member, or going
  from RECOVERED to RECOVERING, INVALID_REQUEST; an ISR member that is not a live broker INELIGIBLE_REPLICA
  (OPERATION_NOT_ATTEMPTED before v2);
- accepted ISRs are written conditionally on the partition epoch; a version conflict is INVALID_UPDATE_VERSION.
Then every live broker gets UpdateMetadata for every partition named, and reassignments whose ISR change
succeeded may complete.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kbroker.cluster.controller_context import TopicPartition
from kbroker.cluster.controller_core import ControllerCore, event
from kbroker.cluster.controller_reassignment import maybe_complete_reassignment
from kbroker.cluster.controller_store import is_version_conflict
from kbroker.cluster.model import RECOVERED, RECOVERING, LeaderAndIsr, PartitionState
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID


@dataclass(frozen=True)
class BrokerState:
    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True)
class AlterPartitionPartitionData:
    """A request's partition (AlterPartitionRequest PartitionData); `new_isr_with_epochs` is read from v3."""

    partition_index: int
    leader_epoch: int
    new_isr: tuple[int, ...] = ()
    partition_epoch: int = 0
    leader_recovery_state: int = RECOVERED
    new_isr_with_epochs: tuple[BrokerState, ...] = ()


@dataclass(frozen=True)
class AlterPartitionTopicData:
    topic_name: str = ""                 # v0-1
    topic_id: uuid.UUID = ZERO_UUID      # v2+
    partitions: tuple[AlterPartitionPartitionData, ...] = ()


@dataclass(frozen=True)
class AlterPartitionRequestData:
    broker_id: int
    broker_epoch: int
    topics: tuple[AlterPartitionTopicData, ...]


@dataclass(frozen=True)
class AlterPartitionResponsePartition:
    partition_index: int
    error_code: int = 0
    leader_id: int = 0
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True)
class AlterPartitionResponseTopic:
    topic_name: str = ""
    topic_id: uuid.UUID = ZERO_UUID
    partitions: tuple[AlterPartitionResponsePartition, ...] = ()


@dataclass(frozen=True)
class AlterPartitionResponseData:
    error_code: int = 0
    topics: tuple[AlterPartitionResponseTopic, ...] = field(default_factory=tuple)


Outcome = ErrorCode | LeaderAndIsr


@event
def process_alter_partition(core: ControllerCore, request: AlterPartitionRequestData,
                            version: int) -> AlterPartitionResponseData:
    """Answer one AlterPartition request, then complete reassignments its ISR changes finished."""
    response, outcomes = _try_alter_partition(core, request, version)
    for tp, outcome in outcomes.items():
        if isinstance(outcome, LeaderAndIsr) and tp in core.context.partitions_being_reassigned:
            maybe_complete_reassignment(core, tp)
    return response


def _try_alter_partition(core: ControllerCore, request: AlterPartitionRequestData,
                         version: int) -> tuple[AlterPartitionResponseData, dict[TopicPartition, Outcome]]:
    if not core.active:
        return AlterPartitionResponseData(ErrorCode.NOT_CONTROLLER), {}
    if core.context.broker_epoch(request.broker_id) != request.broker_epoch:
        return AlterPartitionResponseData(ErrorCode.STALE_BROKER_EPOCH), {}
    use_ids = version > 1
    unknown_ids: list[AlterPartitionResponseTopic] = []
    proposed: dict[TopicPartition, LeaderAndIsr] = {}
    for topic in request.topics:
        name = core.context.topic_name(topic.topic_id) if use_ids else topic.topic_name
        if name is None:
            unknown_ids.append(AlterPartitionResponseTopic(topic_id=topic.topic_id, partitions=tuple(
                AlterPartitionResponsePartition(p.partition_index, ErrorCode.UNKNOWN_TOPIC_ID)
                for p in topic.partitions)))
            continue
        for p in topic.partitions:
            isr = tuple(b.broker_id for b in p.new_isr_with_epochs) if version >= 3 else tuple(p.new_isr)
            proposed[TopicPartition(name, p.partition_index)] = LeaderAndIsr(
                request.broker_id, p.leader_epoch, isr, p.leader_recovery_state, p.partition_epoch)
    outcomes: dict[TopicPartition, Outcome] = {}
    accepted: dict[TopicPartition, LeaderAndIsr] = {}
    for tp, new in proposed.items():
        verdict = _check(core, tp, new, version)
        if verdict is None:
            accepted[tp] = new
        else:
            outcomes[tp] = verdict
    outcomes.update(_write(core, accepted))
    core.send_update_metadata_to_all(list(proposed))
    return AlterPartitionResponseData(ErrorCode.NONE, tuple(unknown_ids) + _topics(core, outcomes, use_ids)), outcomes


def _check(core: ControllerCore, tp: TopicPartition, new: LeaderAndIsr, version: int) -> Outcome | None:
    """Kafka's per-partition validation; None when the proposal may be written."""
    state = core.context.partition_leadership_info(tp)
    if state is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    current = state.leader_and_isr
    if new.partition_epoch > current.partition_epoch or new.leader_epoch > current.leader_epoch:
        return ErrorCode.NOT_CONTROLLER
    if new.leader_epoch < current.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if _same_allowing_stale_partition_epoch(new, current):
        return current
    if new.partition_epoch < current.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    if new.leader_recovery_state == RECOVERING and len(new.isr) > 1:
        return ErrorCode.INVALID_REQUEST
    if current.leader_recovery_state == RECOVERED and new.leader_recovery_state == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    if set(new.isr) - core.context.live_broker_ids:
        return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
    return None


def _same_allowing_stale_partition_epoch(new: LeaderAndIsr, current: LeaderAndIsr) -> bool:
    return (new.leader == current.leader and new.leader_epoch == current.leader_epoch
            and tuple(new.isr) == tuple(current.isr) and new.leader_recovery_state == current.leader_recovery_state
            and new.partition_epoch <= current.partition_epoch)


def _write(core: ControllerCore, accepted: dict[TopicPartition, LeaderAndIsr]) -> dict[TopicPartition, Outcome]:
    """Write accepted ISRs; re-read the written states into the cache, as Kafka does."""
    outcomes: dict[TopicPartition, Outcome] = {}
    by_topic: dict[str, dict[int, PartitionState]] = {}
    for tp, new in sorted(accepted.items()):
        by_topic.setdefault(tp.topic, {})[tp.partition] = PartitionState(new, core.context.epoch)
    for topic, states in by_topic.items():
        results = core.store.update_partition_states(topic, states, core.context.epoch_zk_version)
        for partition, state in states.items():
            tp, result = TopicPartition(topic, partition), results.get(partition)
            if result is not None and result.ok:
                outcomes[tp] = LeaderAndIsr(state.leader_and_isr.leader, state.leader_and_isr.leader_epoch,
                                            state.leader_and_isr.isr, state.leader_and_isr.leader_recovery_state,
                                            result.version)
            elif result is not None and is_version_conflict(result):
                outcomes[tp] = ErrorCode.INVALID_UPDATE_VERSION
            else:
                outcomes[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
    written = [tp for tp, o in outcomes.items() if isinstance(o, LeaderAndIsr)]
    for tp, state in core.store.partition_states(written).items():
        core.context.put_partition_leadership_info(TopicPartition(*tp), state)
    return outcomes


def _topics(core: ControllerCore, outcomes: dict[TopicPartition, Outcome],
            use_ids: bool) -> tuple[AlterPartitionResponseTopic, ...]:
    topics = []
    for topic in sorted({tp.topic for tp in outcomes}):
        parts = tuple(_partition(tp.partition, outcomes[tp])
                      for tp in sorted(tp for tp in outcomes if tp.topic == topic))
        if use_ids:
            topics.append(AlterPartitionResponseTopic(topic_id=core.context.topic_ids.get(topic, ZERO_UUID),
                                                      partitions=parts))
        else:
            topics.append(AlterPartitionResponseTopic(topic_name=topic, partitions=parts))
    return tuple(topics)


def _partition(index: int, outcome: Outcome) -> AlterPartitionResponsePartition:
    if isinstance(outcome, LeaderAndIsr):
        return AlterPartitionResponsePartition(index, ErrorCode.NONE, outcome.leader, outcome.leader_epoch,
                                               tuple(outcome.isr), outcome.leader_recovery_state,
                                               outcome.partition_epoch)
    return AlterPartitionResponsePartition(index, outcome)
