"""What the ZooKeeper-mode controller knows, as Kafka 3.9's ControllerContext keeps it.

Plain data and the questions the controller asks of it (is this replica online, which partitions does this broker
lead, which leader epoch does a StopReplica carry); no I/O. The state machines and event handlers mutate it; the
ZooKeeper layer fills it on failover. Sets Kafka iterates in hash order come back sorted here, so a run is
reproducible.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from kbroker.cluster.controller_states import PartitionStatus, ReplicaStatus
from kbroker.cluster.elections import ReplicaLiveness, target_replicas
from kbroker.cluster.model import BrokerRegistration, LeaderAndIsr, PartitionState, ReplicaAssignment

INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0
NO_EPOCH = -1             # LeaderAndIsr.NoEpoch: a partition the controller has no leadership for
EPOCH_DURING_DELETE = -2  # the leader epoch StopReplica carries for a topic queued for deletion
LEADER_DURING_DELETE = -2  # the leader UpdateMetadata announces for a topic queued for deletion


class TopicPartition(NamedTuple):
    """A partition; a plain (topic, partition) tuple compares equal to it, which is how zk.py keys states."""

    topic: str
    partition: int


class PartitionAndReplica(NamedTuple):
    """One replica of one partition: the unit the replica state machine moves."""

    topic_partition: TopicPartition
    replica: int

    @property
    def topic(self) -> str:
        return self.topic_partition.topic


def origin_replicas(assignment: ReplicaAssignment) -> tuple[int, ...]:
    """The replicas before the reassignment: all less those being added (ReplicaAssignment.originReplicas)."""
    return _multiset_diff(assignment.replicas, assignment.adding)


def is_being_reassigned(assignment: ReplicaAssignment) -> bool:
    return bool(assignment.adding or assignment.removing)


def reassign_to(assignment: ReplicaAssignment, target: Iterable[int]) -> ReplicaAssignment:
    """The assignment while moving to `target`: target first, then the origin replicas (ReplicaAssignment.reassignTo).

    Kafka cannot restore the original order on cancel, because the origin is only what remains after the target.
    """
    target = tuple(target)
    origin = origin_replicas(assignment)
    full = tuple(dict.fromkeys(target + origin))
    return ReplicaAssignment(full, _multiset_diff(full, origin), _multiset_diff(full, target))


def remove_replica(assignment: ReplicaAssignment, replica: int) -> ReplicaAssignment:
    return ReplicaAssignment(tuple(r for r in assignment.replicas if r != replica),
                             tuple(r for r in assignment.adding if r != replica),
                             tuple(r for r in assignment.removing if r != replica))


def _multiset_diff(items: Iterable[int], remove: Iterable[int]) -> tuple[int, ...]:
    left = list(remove)
    kept = []
    for item in items:
        if item in left:
            left.remove(item)
        else:
            kept.append(item)
    return tuple(kept)


def during_delete(leader_and_isr: LeaderAndIsr) -> LeaderAndIsr:
    """LeaderAndIsr.duringDelete: what UpdateMetadata says of a partition whose topic is queued for deletion. Kafka
    builds it fresh from the ISR, so the leader epoch and partition epoch read 0."""
    return LeaderAndIsr(leader=LEADER_DURING_DELETE, leader_epoch=0, isr=leader_and_isr.isr, partition_epoch=0)


def _partition_key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


@dataclass
class ControllerContext:
    """The controller's cache: brokers, topics, assignments, leadership, state-machine states, deletions."""

    epoch: int = INITIAL_CONTROLLER_EPOCH
    epoch_zk_version: int = INITIAL_CONTROLLER_EPOCH_ZK_VERSION
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    partitions_being_reassigned: set[TopicPartition] = field(default_factory=set)
    partition_states: dict[TopicPartition, PartitionStatus] = field(default_factory=dict)
    replica_states: dict[PartitionAndReplica, ReplicaStatus] = field(default_factory=dict)
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    offline_partition_count: int = 0
    preferred_replica_imbalance_count: int = 0
    _brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    _leadership: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    _topic_names: dict[uuid.UUID, str] = field(default_factory=dict)

    # ---- brokers

    def set_live_brokers(self, brokers: Iterable[BrokerRegistration]) -> None:
        self._brokers.clear()
        self.add_live_brokers(brokers)

    def add_live_brokers(self, brokers: Iterable[BrokerRegistration]) -> None:
        """Brokers carry their epoch (the registration znode's czxid) in `broker_epoch`."""
        for broker in brokers:
            self._brokers[broker.broker_id] = broker

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self._brokers.pop(broker_id, None)

    def update_broker_metadata(self, broker: BrokerRegistration) -> None:
        self._brokers[broker.broker_id] = broker

    @property
    def live_broker_ids(self) -> frozenset[int]:
        """Registered brokers that are not shutting down."""
        return frozenset(self._brokers).difference(self.shutting_down_broker_ids)

    @property
    def live_or_shutting_down_broker_ids(self) -> frozenset[int]:
        return frozenset(self._brokers)

    def live_or_shutting_down_brokers(self) -> list[BrokerRegistration]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def live_or_shutting_down_broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def live_broker_epochs(self) -> dict[int, int]:
        return {b: r.broker_epoch for b, r in sorted(self._brokers.items())}

    def broker_epoch(self, broker_id: int) -> int | None:
        broker = self._brokers.get(broker_id)
        return None if broker is None else broker.broker_epoch

    def is_live_broker(self, broker_id: int) -> bool:
        return broker_id in self._brokers and broker_id not in self.shutting_down_broker_ids

    def is_replica_online(self, broker_id: int, tp: TopicPartition, include_shutting_down: bool = False) -> bool:
        """The broker is registered (and, unless asked, not shutting down) and its log dir for `tp` is not offline."""
        up = broker_id in self._brokers if include_shutting_down else self.is_live_broker(broker_id)
        return up and tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    def liveness(self, tp: TopicPartition) -> ReplicaLiveness:
        """The view elections.py takes of one partition's replicas."""
        offline_dirs = (b for b, tps in self.replicas_on_offline_dirs.items() if tp in tps)
        return ReplicaLiveness.of(self._brokers, self.shutting_down_broker_ids, offline_dirs)

    # ---- topics and assignments

    def set_all_topics(self, topics: Iterable[str]) -> None:
        self.all_topics = set(topics)

    def add_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        """Kafka refuses an id that contradicts one it already has, either way round."""
        if topic not in self.all_topics:
            raise ValueError(f"topic {topic} is not contained in all topics.")
        if self.topic_ids.get(topic, topic_id) != topic_id:
            raise ValueError(f"topic ID map already contained ID for topic {topic} and new ID {topic_id} did not "
                             f"match existing ID {self.topic_ids[topic]}")
        if self._topic_names.get(topic_id, topic) != topic:
            raise ValueError(f"topic name map already contained ID {topic_id} and new name {topic} did not match "
                             f"existing name {self._topic_names[topic_id]}")
        self.topic_ids[topic] = topic_id
        self._topic_names[topic_id] = topic

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def partition_replica_assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.partition_full_replica_assignment(tp).replicas

    def partition_full_replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.partition_assignments.get(tp.topic, {}).get(tp.partition, ReplicaAssignment(()))

    def update_partition_full_replica_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        topic = self.partition_assignments.setdefault(tp.topic, {})
        previous = topic.get(tp.partition)
        topic[tp.partition] = assignment
        leadership = self._leadership.get(tp)
        self._update_imbalance(tp, previous, leadership, assignment, leadership)

    def partition_full_replica_assignment_for_topic(self, topic: str) -> dict[int, ReplicaAssignment]:
        return dict(sorted(self.partition_assignments.get(topic, {}).items()))

    def all_partitions(self) -> list[TopicPartition]:
        return sorted((TopicPartition(t, p) for t, parts in self.partition_assignments.items() for p in parts),
                      key=_partition_key)

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.partition_assignments.get(topic, {}))]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.partition_replica_assignment(tp)]

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, b) for b in sorted(set(broker_ids)) for tp in self.partitions_on_broker(b)]

    def replicas_for_topic(self, topic: str) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in self.partitions_for_topic(topic)
                for r in self.partition_replica_assignment(tp)]

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in sorted(set(partitions), key=_partition_key)
                for r in self.partition_replica_assignment(tp)]

    def online_and_offline_replicas(self) -> tuple[list[PartitionAndReplica], list[PartitionAndReplica]]:
        online, offline = [], []
        for tp in self.all_partitions():
            for replica in self.partition_replica_assignment(tp):
                (online if self.is_replica_online(replica, tp) else offline).append(PartitionAndReplica(tp, replica))
        return online, offline

    def remove_topic(self, topic: str) -> None:
        """Forget a deleted topic: assignment, leadership, id, deletion marks."""
        if topic not in self.topics_to_be_deleted:
            self._clean_imbalance(topic)
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.all_topics.discard(topic)
        topic_id = self.topic_ids.pop(topic, None)
        if topic_id is not None:
            self._topic_names.pop(topic_id, None)
        for partition in self.partition_assignments.pop(topic, {}):
            self._leadership.pop(TopicPartition(topic, partition), None)

    # ---- deletion bookkeeping

    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        for topic in sorted(set(topics) - self.topics_to_be_deleted):
            self.topics_to_be_deleted.add(topic)
            self._clean_imbalance(topic)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return topic in self.topics_with_deletion_started

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    # ---- replica states

    def replica_state(self, replica: PartitionAndReplica) -> ReplicaStatus:
        return self.replica_states[replica]

    def put_replica_state(self, replica: PartitionAndReplica, state: ReplicaStatus) -> None:
        self.replica_states[replica] = state

    def put_replica_state_if_absent(self, replica: PartitionAndReplica, state: ReplicaStatus) -> None:
        self.replica_states.setdefault(replica, state)

    def remove_replica_state(self, replica: PartitionAndReplica) -> None:
        self.replica_states.pop(replica, None)

    def replicas_in_state(self, topic: str, state: ReplicaStatus) -> list[PartitionAndReplica]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) == state]

    def are_all_replicas_in_state(self, topic: str, state: ReplicaStatus) -> bool:
        return all(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaStatus) -> bool:
        return any(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    # ---- partition states

    def partition_state(self, tp: TopicPartition) -> PartitionStatus:
        return self.partition_states[tp]

    def put_partition_state(self, tp: TopicPartition, state: PartitionStatus) -> None:
        previous = self.partition_states.get(tp, PartitionStatus.NON_EXISTENT)
        self.partition_states[tp] = state
        self._count_offline(tp, previous, state)

    def put_partition_state_if_absent(self, tp: TopicPartition, state: PartitionStatus) -> None:
        if tp not in self.partition_states:
            self.partition_states[tp] = state
            self._count_offline(tp, PartitionStatus.NON_EXISTENT, state)

    def partitions_in_states(self, states: Iterable[PartitionStatus], topic: str | None = None) -> list[TopicPartition]:
        wanted = set(states)
        candidates = self.partitions_for_topic(topic) if topic is not None else self.partition_states
        return sorted((tp for tp in candidates if self.partition_states.get(tp) in wanted), key=_partition_key)

    def _count_offline(self, tp: TopicPartition, previous: PartitionStatus, state: PartitionStatus) -> None:
        """OfflinePartitionsCount, which ignores topics whose deletion has started."""
        if self.is_topic_deletion_in_progress(tp.topic):
            return
        if previous != PartitionStatus.OFFLINE and state == PartitionStatus.OFFLINE:
            self.offline_partition_count += 1
        elif previous == PartitionStatus.OFFLINE and state != PartitionStatus.OFFLINE:
            self.offline_partition_count -= 1

    # ---- leadership

    def partition_leadership_info(self, tp: TopicPartition) -> PartitionState | None:
        return self._leadership.get(tp)

    def put_partition_leadership_info(self, tp: TopicPartition, state: PartitionState) -> None:
        previous = self._leadership.get(tp)
        self._leadership[tp] = state
        assignment = self.partition_full_replica_assignment(tp)
        self._update_imbalance(tp, assignment, previous, assignment, state)

    def clear_partition_leadership_info(self) -> None:
        self._leadership.clear()

    def partitions_leadership_info(self) -> dict[TopicPartition, PartitionState]:
        return dict(sorted(self._leadership.items(), key=lambda item: _partition_key(item[0])))

    def leader_epoch(self, tp: TopicPartition) -> int:
        """What StopReplica carries: -2 for a topic queued for deletion, else the cached epoch, or -1."""
        if self.is_topic_queued_up_for_deletion(tp.topic):
            return EPOCH_DURING_DELETE
        state = self._leadership.get(tp)
        return NO_EPOCH if state is None else state.leader_and_isr.leader_epoch

    def partitions_with_leaders(self) -> list[TopicPartition]:
        return [tp for tp in self.partitions_leadership_info() if not self.is_topic_queued_up_for_deletion(tp.topic)]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return [tp for tp, s in self.partitions_leadership_info().items()
                if not self.is_replica_online(s.leader_and_isr.leader, tp)
                and not self.is_topic_queued_up_for_deletion(tp.topic)]

    def partition_leaders_on_broker(self, broker_id: int) -> list[TopicPartition]:
        """Partitions the broker still leads and could hand over (more than one replica): what a controlled
        shutdown answers as remaining."""
        return [tp for tp, s in self.partitions_leadership_info().items()
                if not self.is_topic_queued_up_for_deletion(tp.topic) and s.leader_and_isr.leader == broker_id
                and len(self.partition_replica_assignment(tp)) > 1]

    # ---- PreferredReplicaImbalanceCount

    def _update_imbalance(self, tp: TopicPartition, old_assignment: ReplicaAssignment | None,
                          old_state: PartitionState | None, new_assignment: ReplicaAssignment | None,
                          new_state: PartitionState | None) -> None:
        if self.is_topic_queued_up_for_deletion(tp.topic):
            return
        if old_assignment is not None and old_state is not None and not _has_preferred_leader(old_assignment,
                                                                                                old_state):
            self.preferred_replica_imbalance_count -= 1
        if new_assignment is not None and new_state is not None and not _has_preferred_leader(new_assignment,
                                                                                                new_state):
            self.preferred_replica_imbalance_count += 1

    def _clean_imbalance(self, topic: str) -> None:
        for partition, assignment in self.partition_assignments.get(topic, {}).items():
            state = self._leadership.get(TopicPartition(topic, partition))
            if state is not None and not _has_preferred_leader(assignment, state):
                self.preferred_replica_imbalance_count -= 1

    def reset(self) -> None:
        """Forget everything, as a resigning controller does (resetContext)."""
        fresh = ControllerContext(epoch=0, epoch_zk_version=0)
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))


def _has_preferred_leader(assignment: ReplicaAssignment, state: PartitionState) -> bool:
    """A reassigning partition whose preferred replica is still being added counts as balanced until it joins
    the ISR; otherwise the preferred (first) replica must lead."""
    if not assignment.replicas:
        return True
    preferred = assignment.replicas[0]
    if is_being_reassigned(assignment) and preferred in assignment.adding:
        return preferred not in state.leader_and_isr.isr
    return state.leader_and_isr.leader == preferred


def completed_assignment(assignment: ReplicaAssignment) -> ReplicaAssignment:
    """Step B2 of a reassignment: the target replicas, nothing adding or removing."""
    return replace(assignment, replicas=target_replicas(assignment), adding=(), removing=())
