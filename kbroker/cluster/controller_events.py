"""The ZooKeeper-mode controller's event handlers, as Kafka 3.9's KafkaController runs them.

`on_*` functions are Kafka's callbacks (onBrokerStartup, onBrokerFailure, onNewPartitionCreation, ...) and compose
freely; `process_*` functions are the events (a broker change, a topic change, a controlled shutdown request,
an election, ...) and return a ControllerOutput: the ZooKeeper writes, the request batches in the order sent,
the state changes given up on, and the answer a requesting broker or client gets. Reassignment and AlterPartition
live in controller_reassignment and controller_alter_partition; topic deletion in controller_deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kbroker.cluster.controller_context import PartitionAndReplica, TopicPartition, is_being_reassigned
from kbroker.cluster.controller_core import AUTO_REBALANCE_FIRST_DELAY_S, UNKNOWN_PARTITION, ControllerCore, event
from kbroker.cluster.controller_reassignment import initialize_partition_reassignments, maybe_resume_reassignments
from kbroker.cluster.controller_states import PartitionStatus, ReplicaStatus
from kbroker.cluster.controller_store import StateChangeFailed
from kbroker.cluster.elections import elect_preferred
from kbroker.cluster.model import NO_LEADER, BrokerRegistration, LeaderAndIsr, PartitionState, TopicAssignment
from kbroker.cluster.partition_state_machine import CONTROLLED_SHUTDOWN, OFFLINE, PREFERRED, ElectionStrategy
from wire.errors import ErrorCode

ApiError = tuple[ErrorCode, str | None]
UNKNOWN_BROKER_EPOCH = -1  # a ControlledShutdown request from a broker that predates KIP-380
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."  # Errors' own message

# ---------------------------------------------------------------------------------------------- brokers


def on_broker_startup(core: ControllerCore, new_brokers: Iterable[int]) -> None:
    """New brokers: the others hear of them, they get every partition's state, their replicas go online, new
    and offline partitions get leaders, and reassignments and deletions waiting on them resume."""
    context = core.context
    new = sorted(set(new_brokers))
    for broker in new:
        context.replicas_on_offline_dirs.pop(broker, None)
    existing = sorted(context.live_or_shutting_down_broker_ids - set(new))
    core.send_update_metadata(existing)
    core.send_update_metadata(new, context.partitions_with_leaders())
    replicas = context.replicas_on_brokers(new)
    core.replica_state_machine.handle_state_changes(replicas, ReplicaStatus.ONLINE)
    core.partition_state_machine.trigger_online_partition_state_change()
    maybe_resume_reassignments(core, set(new))
    deleting = {r.topic for r in replicas if core.topic_deletion.is_topic_queued_up_for_deletion(r.topic)}
    if deleting:
        core.topic_deletion.resume_deletion_for_topics(deleting)


def on_broker_failure(core: ControllerCore, dead_brokers: Iterable[int]) -> None:
    """Dead brokers (already removed from the live set): their replicas go offline."""
    dead = sorted(set(dead_brokers))
    for broker in dead:
        core.context.replicas_on_offline_dirs.pop(broker, None)
        core.context.shutting_down_broker_ids.discard(broker)
    on_replicas_become_offline(core, core.context.replicas_on_brokers(dead))


def on_replicas_become_offline(core: ControllerCore, replicas: Iterable[PartitionAndReplica]) -> None:
    """Partitions whose leader went offline are elected anew (with the other new/offline ones); the replicas go
    Offline, or fail their topic's deletion. With nothing else announced, every broker still gets UpdateMetadata."""
    replicas = list(replicas)
    deleting = [r for r in replicas if core.topic_deletion.is_topic_queued_up_for_deletion(r.topic)]
    others = [r for r in replicas if r not in deleting]
    psm = core.partition_state_machine
    psm.handle_state_changes(core.context.partitions_with_offline_leader(), PartitionStatus.OFFLINE)
    results = psm.trigger_online_partition_state_change()
    core.replica_state_machine.handle_state_changes(others, ReplicaStatus.OFFLINE)
    if deleting:
        core.topic_deletion.fail_replica_deletion(deleting)
    if not others and all(isinstance(o, Exception) for o in results.values()):
        core.send_update_metadata_to_all()


@event
def process_broker_change(core: ControllerCore, registered: Iterable[BrokerRegistration]) -> None:
    """/brokers/ids changed: brokers new to the controller start, brokers gone fail, and a broker registered again
    with a higher epoch (it restarted within the session) fails and starts."""
    if not core.active:
        return
    current = {b.broker_id: b for b in registered}
    known = core.context.live_or_shutting_down_broker_ids
    new = sorted(set(current) - known)
    dead = sorted(known - set(current))
    bounced = sorted(b for b in set(current) & known if current[b].broker_epoch > _epoch(core, b))
    if new:
        core.context.add_live_brokers(current[b] for b in new)
        on_broker_startup(core, new)
    if bounced:
        core.context.remove_live_brokers(bounced)
        on_broker_failure(core, bounced)
        core.context.add_live_brokers(current[b] for b in bounced)
        on_broker_startup(core, bounced)
    if dead:
        core.context.remove_live_brokers(dead)
        on_broker_failure(core, dead)


def _epoch(core: ControllerCore, broker_id: int) -> int:
    epoch = core.context.broker_epoch(broker_id)
    return -1 if epoch is None else epoch


@event
def process_broker_modification(core: ControllerCore, broker: BrokerRegistration) -> None:
    """A live broker rewrote its registration: new endpoints or features go to every broker."""
    old = core.context.live_or_shutting_down_broker(broker.broker_id)
    if not core.active or old is None:
        return
    if old.endpoints != broker.endpoints or old.features != broker.features:
        core.context.update_broker_metadata(broker)
        core.send_update_metadata_to_all()


@event
def process_leader_and_isr_response(core: ControllerCore, broker_id: int, error: ErrorCode,
                                    partition_errors: Mapping[TopicPartition, ErrorCode]) -> None:
    """Replicas a broker answers KAFKA_STORAGE_ERROR for are on an offline log dir; they go offline."""
    if not core.active or error != ErrorCode.NONE:
        return
    previous = core.context.replicas_on_offline_dirs.get(broker_id, set())
    online = {TopicPartition(*tp) for tp, e in partition_errors.items() if e == ErrorCode.NONE}
    offline = {TopicPartition(*tp) for tp, e in partition_errors.items() if e == ErrorCode.KAFKA_STORAGE_ERROR}
    current = (previous - online) | offline
    core.context.replicas_on_offline_dirs[broker_id] = current
    newly = current - previous
    if newly:
        on_replicas_become_offline(core, [PartitionAndReplica(tp, broker_id) for tp in sorted(newly)])


# ---------------------------------------------------------------------------------------------- topics


def on_new_partition_creation(core: ControllerCore, partitions: Iterable[TopicPartition]) -> None:
    """New -> replicas New -> leaders elected (state znodes created) -> replicas Online."""
    partitions = sorted(set(partitions))
    psm, rsm = core.partition_state_machine, core.replica_state_machine
    psm.handle_state_changes(partitions, PartitionStatus.NEW)
    rsm.handle_state_changes(core.context.replicas_for_partitions(partitions), ReplicaStatus.NEW)
    psm.handle_state_changes(partitions, PartitionStatus.ONLINE, OFFLINE)
    rsm.handle_state_changes(core.context.replicas_for_partitions(partitions), ReplicaStatus.ONLINE)


@event
def process_topic_change(core: ControllerCore, topics: Iterable[str],
                         new_assignments: Mapping[str, TopicAssignment]) -> None:
    """/brokers/topics changed: `topics` is the full list now, `new_assignments` the assignments of the topics not
    seen before. Deleted topics are forgotten, new ones get their ids and leaders."""
    if not core.active:
        return
    context = core.context
    topics = set(topics)
    deleted = context.all_topics - topics
    context.set_all_topics(topics)
    for topic in sorted(deleted):
        context.remove_topic(topic)
    added: list[TopicPartition] = []
    for name, assignment in sorted(new_assignments.items()):
        context.add_topic_id(name, assignment.topic_id)
        for partition, replicas in sorted(assignment.partitions.items()):
            tp = TopicPartition(name, partition)
            context.update_partition_full_replica_assignment(tp, replicas)
            added.append(tp)
    if added:
        on_new_partition_creation(core, added)


@event
def process_partition_modifications(core: ControllerCore, assignment: TopicAssignment) -> list[int]:
    """A topic's assignment changed (CreatePartitions): partitions the controller does not know yet are created.
    While the topic is queued for deletion nothing is added; returns the partitions Kafka would restore the
    znode without (the caller rewrites the assignment)."""
    if not core.active:
        return []
    new = {p: a for p, a in assignment.partitions.items()
           if not core.context.partition_replica_assignment(TopicPartition(assignment.name, p))}
    if core.topic_deletion.is_topic_queued_up_for_deletion(assignment.name):
        return sorted(new)
    for partition, replicas in sorted(new.items()):
        core.context.update_partition_full_replica_assignment(TopicPartition(assignment.name, partition), replicas)
    if new:
        on_new_partition_creation(core, [TopicPartition(assignment.name, p) for p in new])
    return []


@event
def process_topic_deletion(core: ControllerCore, marked: Iterable[str]) -> None:
    """/admin/delete_topics changed: marks for unknown topics are dropped; the rest are queued (made ineligible
    while a partition is being reassigned), or dropped when delete.topic.enable is false."""
    if not core.active:
        return
    marked = set(marked)
    unknown = sorted(marked - core.context.all_topics)
    if unknown:
        core.store.delete_topic_deletions(unknown, core.context.epoch_zk_version)
    to_delete = marked & core.context.all_topics
    if not core.config.delete_topic_enable:
        if to_delete:
            core.store.delete_topic_deletions(sorted(to_delete), core.context.epoch_zk_version)
        return
    if to_delete:
        # Kafka marks reassigning topics ineligible before queueing them, so only topics already queued are held
        reassigning = {tp.topic for tp in core.context.partitions_being_reassigned}
        core.topic_deletion.mark_topic_ineligible_for_deletion(to_delete & reassigning)
        core.topic_deletion.enqueue_topics_for_deletion(sorted(to_delete))


@event
def process_topic_deletion_stop_replica_response(core: ControllerCore, replica_id: int, error: ErrorCode,
                                                 partition_errors: Mapping[TopicPartition, ErrorCode]) -> None:
    """A StopReplica (delete) answer for partitions of topics being deleted: failed replicas become ineligible,
    the others deleted."""
    if not core.active:
        return
    errors = {TopicPartition(*tp): e for tp, e in partition_errors.items()
              if core.context.is_topic_deletion_in_progress(tp[0])}
    failed = set(errors) if error != ErrorCode.NONE else {tp for tp, e in errors.items() if e != ErrorCode.NONE}
    core.topic_deletion.fail_replica_deletion([PartitionAndReplica(tp, replica_id) for tp in sorted(failed)])
    if len(failed) != len(errors):
        deleted = sorted(set(errors) - failed)
        core.topic_deletion.complete_replica_deletion([PartitionAndReplica(tp, replica_id) for tp in deleted])


# ---------------------------------------------------------------------------------------------- controlled shutdown


@event
def process_controlled_shutdown(core: ControllerCore, broker_id: int,
                                broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
    """ControlledShutdown (7): the broker's leaderships move to other ISR members, it leaves the ISR of what it
    follows (StopReplica without delete), and it is told which partitions it still leads. The error is
    NOT_CONTROLLER off the controller, STALE_BROKER_EPOCH for an older epoch, BROKER_NOT_AVAILABLE for an unknown
    broker (UNKNOWN_SERVER_ERROR when it also sent an epoch: Kafka's cache lookup fails first)."""
    if not core.active:
        return ErrorCode.NOT_CONTROLLER, []
    context = core.context
    cached = context.broker_epoch(broker_id)
    if broker_epoch != UNKNOWN_BROKER_EPOCH:
        if cached is None:
            return ErrorCode.UNKNOWN_SERVER_ERROR, []
        if broker_epoch < cached:
            return ErrorCode.STALE_BROKER_EPOCH, []
    if cached is None:
        return ErrorCode.BROKER_NOT_AVAILABLE, []
    context.shutting_down_broker_ids.add(broker_id)
    to_act_on = [tp for tp in context.partitions_on_broker(broker_id)
                 if len(context.partition_replica_assignment(tp)) > 1
                 and context.partition_leadership_info(tp) is not None
                 and not core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic)]
    led = [tp for tp in to_act_on if _leader(core, tp) == broker_id]
    followed = [tp for tp in to_act_on if tp not in led]
    core.partition_state_machine.handle_state_changes(led, PartitionStatus.ONLINE, CONTROLLED_SHUTDOWN)
    if followed:
        core.batch.new_batch()
        for tp in followed:
            core.batch.add_stop_replica([broker_id], tp, delete_partition=False)
        core.batch.send(context.epoch)
    core.replica_state_machine.handle_state_changes([PartitionAndReplica(tp, broker_id) for tp in followed],
                                                    ReplicaStatus.OFFLINE)
    return ErrorCode.NONE, context.partition_leaders_on_broker(broker_id)


def _leader(core: ControllerCore, tp: TopicPartition) -> int:
    state = core.context.partition_leadership_info(tp)
    return NO_LEADER if state is None else state.leader_and_isr.leader


# ---------------------------------------------------------------------------------------------- elections


def on_replica_election(core: ControllerCore, partitions: Iterable[TopicPartition], election_type: str,
                        trigger: str) -> dict[TopicPartition, LeaderAndIsr | Exception]:
    """Elect preferred leaders, or (`unclean`) leaders for offline partitions; unclean ones only when an admin
    asked (`trigger` is admin, auto or zk)."""
    if election_type == "preferred":
        strategy = PREFERRED
    else:
        strategy = ElectionStrategy("offline", allow_unclean=trigger == "admin")
    return core.partition_state_machine.handle_state_changes(partitions, PartitionStatus.ONLINE, strategy)


@event
def process_replica_leader_election(core: ControllerCore, partitions: Iterable[TopicPartition],
                                    election_type: str = "preferred",
                                    trigger: str = "admin") -> dict[TopicPartition, int | ApiError]:
    """ElectLeaders (43) and /admin/preferred_replica_election: per partition, the new leader or Kafka's error
    (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, INVALID_TOPIC_EXCEPTION for
    a topic being deleted, UNKNOWN_TOPIC_OR_PARTITION)."""
    partitions = [TopicPartition(*tp) for tp in partitions]
    if not core.active:
        return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in partitions}
    known = set(core.context.all_partitions())
    results: dict[TopicPartition, int | ApiError] = {}
    electable = []
    for tp in partitions:
        if tp not in known:
            results[tp] = UNKNOWN_PARTITION
        elif core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic):
            results[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
        elif _election_needed(core, tp, election_type):
            electable.append(tp)
        else:
            results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    not_available = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type == "preferred"
                     else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
    for tp, outcome in on_replica_election(core, electable, election_type, trigger).items():
        if isinstance(outcome, StateChangeFailed):
            results[tp] = (not_available, str(outcome))
        elif isinstance(outcome, Exception):
            results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, None)
        else:
            results[tp] = outcome.leader
    return results


def _election_needed(core: ControllerCore, tp: TopicPartition, election_type: str) -> bool:
    leader = _leader(core, tp)
    if election_type == "preferred":
        return leader != core.context.partition_replica_assignment(tp)[0]
    return leader == NO_LEADER or not core.context.is_live_broker(leader)


def leader_imbalance(core: ControllerCore) -> dict[int, list[TopicPartition]]:
    """For each preferred replica, the partitions it prefers but does not lead (topics being deleted aside)."""
    context = core.context
    preferred: dict[int, list[TopicPartition]] = {}
    for tp in context.all_partitions():
        replicas = context.partition_replica_assignment(tp)
        if replicas and not core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic):
            preferred.setdefault(replicas[0], []).append(tp)
    return preferred


@event
def process_auto_preferred_replica_leader_election(core: ControllerCore) -> list[TopicPartition]:
    """The periodic check (leader.imbalance.check.interval.seconds): for each broker whose share of partitions it
    prefers but does not lead exceeds leader.imbalance.per.broker.percentage, elect it where it is online and in
    the ISR. Returns the partitions it tried; the next check is scheduled on `core.clock`."""
    if not core.active:
        return []
    try:
        return _check_and_trigger_auto_rebalance(core)
    finally:
        core.schedule_auto_rebalance(core.config.leader_imbalance_check_interval_seconds)


def _check_and_trigger_auto_rebalance(core: ControllerCore) -> list[TopicPartition]:
    context = core.context
    tried: list[TopicPartition] = []
    for broker, partitions in sorted(leader_imbalance(core).items()):
        states = {tp: context.partition_leadership_info(tp) for tp in partitions}
        not_led = [tp for tp, s in states.items() if s is not None and s.leader_and_isr.leader != broker]
        ratio = len(not_led) / len(partitions)
        if ratio > core.config.leader_imbalance_per_broker_percentage / 100:
            candidates = [tp for tp in not_led if not core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic)
                          and tp.topic in context.all_topics and _can_preferred_lead(core, tp, states[tp])]
            on_replica_election(core, candidates, "preferred", "auto")
            tried += candidates
    return tried


def _can_preferred_lead(core: ControllerCore, tp: TopicPartition, state: PartitionState) -> bool:
    result = elect_preferred(core.context.partition_replica_assignment(tp), state.leader_and_isr,
                             core.context.liveness(tp))
    return result.leader_and_isr is not None


# ---------------------------------------------------------------------------------------------- failover


@event
def process_controller_failover(core: ControllerCore, epoch: int, epoch_zk_version: int,
                                brokers: Iterable[BrokerRegistration], topics: Iterable[TopicAssignment],
                                topics_to_delete: Iterable[str] = (),
                                pending_preferred: Iterable[TopicPartition] = ()) -> None:
    """Becoming controller (onControllerFailover, after ZooKeeper was read): fill the context, read every
    partition's state, queue deletions, tell every broker who is live, start both state machines, resume
    reassignments and deletions, finish pending preferred elections, and schedule the first auto-rebalance check."""
    context = core.context
    context.reset()
    context.epoch, context.epoch_zk_version = epoch, epoch_zk_version
    context.set_live_brokers(brokers)
    topics = list(topics)
    context.set_all_topics(t.name for t in topics)
    for topic in topics:
        context.add_topic_id(topic.name, topic.topic_id)
        for partition, assignment in topic.partitions.items():
            tp = TopicPartition(topic.name, partition)
            context.update_partition_full_replica_assignment(tp, assignment)
            if is_being_reassigned(assignment):
                context.partitions_being_reassigned.add(tp)
    for tp, state in core.store.partition_states(context.all_partitions()).items():
        context.put_partition_leadership_info(TopicPartition(*tp), state)
    to_delete = set(topics_to_delete)
    with_offline = {t for t in context.all_topics
                    if any(not context.is_replica_online(r.replica, r.topic_partition)
                           for r in context.replicas_for_topic(t))}
    reassigning = {tp.topic for tp in context.partitions_being_reassigned}
    core.topic_deletion.init(to_delete, with_offline | reassigning)
    core.send_update_metadata_to_all()
    core.replica_state_machine.startup()
    core.partition_state_machine.startup()
    initialize_partition_reassignments(core)
    core.topic_deletion.try_topic_deletion()
    pending = [TopicPartition(*tp) for tp in pending_preferred]
    pending = [tp for tp in pending if context.partition_replica_assignment(tp)
               and _leader(core, tp) != context.partition_replica_assignment(tp)[0]
               and not core.topic_deletion.is_topic_queued_up_for_deletion(tp.topic)]
    on_replica_election(core, pending, "preferred", "zk")
    if core.config.auto_leader_rebalance_enable:
        core.schedule_auto_rebalance(AUTO_REBALANCE_FIRST_DELAY_S)
