"""This broker's partitions: the one place the APIs ask "may I append to / read this partition?".

As Kafka's ReplicaManager, it holds a Partition (kbroker.cluster.partition) per hosted
partition, applies the controller's LeaderAndIsr and StopReplica with Kafka's epoch fencing,
parks acks=all produces in a purgatory until the ISR has their records, and records the
followers' fetches. A single node is the same code: every partition hosted as leader at epoch 0
with itself as the only replica and ISR (`host_sole_replica`), no ZooKeeper, no controller.

What a partition this broker does not host answers is the `unhosted_error` callable's choice: the
broker says KAFKA_STORAGE_ERROR for a failed log dir and UNKNOWN_TOPIC_OR_PARTITION for an unknown
partition; a cluster member says NOT_LEADER_OR_FOLLOWER for one its metadata knows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kbroker.cluster.model import LeaderAndIsr, PartitionState
from kbroker.cluster.partition import DEFAULT_REPLICA_LAG_TIME_MAX_MS, Partition, now_ms
from kbroker.log.errors import LogDirOfflineError
from kbroker.log.partition_log import PartitionLog
from wire.errors import ErrorCode

TopicPartition = tuple[str, int]
SINGLE_NODE_LEADER_EPOCH = 0  # Kafka's first leader epoch: what a single node leads every partition at


def _unknown(topic: str, partition: int) -> ErrorCode:
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderAndIsrPartition(NamedTuple):
    """One partition of a LeaderAndIsr request: its state (with the controller epoch that wrote it)
    and its assigned replicas."""

    topic: str
    partition: int
    state: PartitionState
    replicas: tuple[int, ...]


@dataclass
class LeadershipChanges:
    """A LeaderAndIsr request's outcome: the errors to answer, and the partitions whose fetchers
    (follower) or loaded state (leader: e.g. a group coordinator) must change."""

    error: ErrorCode = ErrorCode.NONE
    partition_errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    became_leader: list[Partition] = field(default_factory=list)
    became_follower: list[Partition] = field(default_factory=list)


class DelayedProduce:
    """An acks=all produce waiting until each partition's HW reaches the end of what it appended."""

    def __init__(self, required_offsets: Mapping[TopicPartition, int]) -> None:
        self.waiting = dict(required_offsets)  # partitions still waiting -> the offset the HW must reach
        self.keys = tuple(self.waiting)
        self.errors: dict[TopicPartition, ErrorCode] = {}
        self.future: asyncio.Future | None = None  # made only if the produce has to wait

    def try_complete(self, lookup: Callable[[str, int], Partition | ErrorCode]) -> bool:
        """Settle every partition that is done (or failed); True when none is left waiting."""
        for key, required in list(self.waiting.items()):
            found = lookup(*key)
            done, error = (found.check_enough_replicas_reach_offset(required) if isinstance(found, Partition)
                           else (False, found))
            if done or error:
                self.errors[key] = error
                del self.waiting[key]
        if self.waiting:
            return False
        if self.future is not None and not self.future.done():
            self.future.set_result(None)
        return True


class ProducePurgatory:
    """acks=all produces parked by partition, as Kafka's produce purgatory: a HW move (or a change
    of leadership) on one partition retries only the produces that wait on it."""

    def __init__(self) -> None:
        self._watchers: dict[TopicPartition, set[DelayedProduce]] = {}

    def watch(self, produce: DelayedProduce) -> None:
        for key in produce.keys:
            self._watchers.setdefault(key, set()).add(produce)

    def remove(self, produce: DelayedProduce) -> None:
        for key in produce.keys:
            waiting = self._watchers.get(key)
            if waiting is not None:
                waiting.discard(produce)
                if not waiting:
                    del self._watchers[key]

    def wake(self, key: TopicPartition, lookup: Callable[[str, int], Partition | ErrorCode]) -> None:
        waiting = self._watchers.get(key)
        if not waiting:
            return
        for produce in list(waiting):
            if produce.try_complete(lookup):
                self.remove(produce)

    def watched(self, key: TopicPartition) -> int:
        """How many produces wait on `key`."""
        return len(self._watchers.get(key, ()))

    def size(self) -> int:
        """Kafka's produce PurgatorySize: waiting produces counted once per partition they watch."""
        return sum(len(waiting) for waiting in self._watchers.values())


class ReplicaManager:
    """The partitions this broker hosts; see the module docstring."""

    def __init__(self, local_broker_id: int, *,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 min_insync_replicas: Callable[[str], int] = lambda topic: 1,
                 unhosted_error: Callable[[str, int], ErrorCode] = _unknown,
                 clock: Callable[[], int] = now_ms) -> None:
        self.local_broker_id = local_broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas  # topic -> its min.insync.replicas, read at each use
        self.unhosted_error = unhosted_error
        self.clock = clock
        self.controller_epoch = 0
        self.purgatory = ProducePurgatory()
        # AlterPartition: (partition, proposed LeaderAndIsr); None until a controller channel is wired in
        self.propose_isr: Callable[[Partition, LeaderAndIsr], object] | None = None
        # told (topic, partition) when a HW moves (consumers' long-polling fetches wake on it) and when leadership
        # changes (every fetch parked there wakes)
        self.on_high_watermark: Callable[[str, int], object] | None = None
        self.on_leadership_moved: Callable[[str, int], object] | None = None
        self._partitions: dict[TopicPartition, Partition] = {}
        self.isr_shrinks = 0  # ISR changes the controller committed (Kafka's IsrShrinksPerSec / IsrExpandsPerSec)
        self.isr_expands = 0

    # --- hosting ----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def lookup(self, topic: str, partition: int) -> Partition | ErrorCode:
        """The hosted partition, or the error a request for it gets (its role is the caller's to check)."""
        found = self._partitions.get((topic, partition))
        if found is None:
            return self.unhosted_error(topic, partition)
        log = found.log
        if log is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if log.closed:  # its log dir failed (or it is being deleted)
            return self.unhosted_error(topic, partition)
        return found

    def _new_partition(self, topic: str, index: int, log: PartitionLog | None) -> Partition:
        partition = Partition(topic, index, log, self.local_broker_id,
                              min_insync_replicas=lambda: self.min_insync_replicas(topic),
                              replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                              propose_isr=self._propose_isr, clock=self.clock)
        partition.on_high_watermark = self._high_watermark_moved
        partition.on_isr_committed = self._count_isr_change
        self._partitions[(topic, index)] = partition
        return partition

    def host_sole_replica(self, topic: str, index: int, log: PartitionLog) -> Partition:
        """Host a partition this broker alone replicates and leads (the single node): epoch 0, ISR
        [self], as a controller of a one-broker cluster would set it. Idempotent for the same log."""
        found = self._partitions.get((topic, index))
        if found is not None and found.log is log and found.is_leader:
            return found
        partition = self._new_partition(topic, index, log)
        me = (self.local_broker_id,)
        partition.make_leader(LeaderAndIsr(self.local_broker_id, SINGLE_NODE_LEADER_EPOCH, me), me,
                              self.controller_epoch)
        return partition

    def remove(self, topic: str, index: int) -> Partition | None:
        """Stop hosting a partition (topic deleted, replica moved away); produces waiting on it answer."""
        partition = self._partitions.pop((topic, index), None)
        if partition is not None:
            partition.make_none()
            self._leadership_moved(partition)
        return partition

    # --- controller requests ----------------------------------------------------------

    def become_leader_or_follower(self, controller_epoch: int, states: Iterable[LeaderAndIsrPartition],
                                  log_for: Callable[[str, int], PartitionLog]) -> LeadershipChanges:
        """Apply a LeaderAndIsr request as Kafka 3.9 does in ZooKeeper mode: an older controller epoch is
        refused whole, an older or equal leader epoch per partition (STALE_CONTROLLER_EPOCH), and a
        partition not assigned to this broker answers UNKNOWN_TOPIC_OR_PARTITION. `log_for` opens or
        creates the local log (LogDirOfflineError: KAFKA_STORAGE_ERROR)."""
        changes = LeadershipChanges()
        if controller_epoch < self.controller_epoch:
            changes.error = ErrorCode.STALE_CONTROLLER_EPOCH
            return changes
        self.controller_epoch = controller_epoch
        for item in states:
            key = (item.topic, item.partition)
            changes.partition_errors[key] = self._apply_leader_and_isr(item, log_for, changes)
        return changes

    def _apply_leader_and_isr(self, item: LeaderAndIsrPartition, log_for: Callable[[str, int], PartitionLog],
                              changes: LeadershipChanges) -> ErrorCode:
        state = item.state.leader_and_isr
        partition = self._partitions.get((item.topic, item.partition)) or \
            self._new_partition(item.topic, item.partition, None)
        error = partition.leader_and_isr_error(state.leader_epoch)
        if error:
            return error
        if self.local_broker_id not in item.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            log = partition.log if partition.log is not None and not partition.log.closed \
                else log_for(item.topic, item.partition)
        except LogDirOfflineError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if state.leader == self.local_broker_id:
            if partition.make_leader(state, item.replicas, item.state.controller_epoch, log):
                changes.became_leader.append(partition)
            if self.on_leadership_moved is not None:  # a fetch of the old leader epoch answers FENCED_LEADER_EPOCH now
                self.on_leadership_moved(item.topic, item.partition)
        elif partition.make_follower(state, item.replicas, item.state.controller_epoch, log):
            changes.became_follower.append(partition)
            self._leadership_moved(partition)  # produces waiting here answer NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def stop_replicas(self, controller_epoch: int, leader_epochs: Mapping[TopicPartition, int],
                      delete: bool) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """StopReplica's epoch checks: an older controller epoch is refused whole, an older leader epoch
        per partition (FENCED_LEADER_EPOCH). With `delete` the stopped partitions are no longer hosted
        (the caller deletes their logs); without, they stay hosted and stop replicating."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH, {}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        for key, leader_epoch in leader_epochs.items():
            partition = self._partitions.get(key)
            error = ErrorCode.NONE if partition is None else partition.stop_replica_error(leader_epoch)
            if partition is not None and not error and delete:
                self.remove(*key)
            errors[key] = error
        return ErrorCode.NONE, errors

    # --- produce ----------------------------------------------------------------------

    async def wait_for_acks(self, required_offsets: Mapping[TopicPartition, int],
                            timeout_ms: int) -> dict[TopicPartition, ErrorCode]:
        """Each partition's acks=all answer once its HW reaches the offset given (the end of what the
        produce appended): NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER..., or
        REQUEST_TIMED_OUT for those still waiting after `timeout_ms`."""
        produce = DelayedProduce(required_offsets)
        if produce.try_complete(self.lookup):
            return produce.errors
        produce.future = asyncio.get_running_loop().create_future()
        self.purgatory.watch(produce)
        try:
            await asyncio.wait_for(produce.future, max(0, timeout_ms) / 1000)
        except TimeoutError:
            pass
        finally:
            self.purgatory.remove(produce)
        for key in produce.waiting:
            produce.errors[key] = ErrorCode.REQUEST_TIMED_OUT
        return produce.errors

    # --- follower fetches and the ISR -------------------------------------------------

    def record_follower_fetch(self, partition: Partition, replica_id: int, fetch_offset: int,
                              log_start_offset: int, leader_end_offset: int, now_ms: int | None = None) -> bool:
        """A follower fetched from `fetch_offset` (its LEO); True if that moved the HW."""
        now = self.clock() if now_ms is None else now_ms
        return partition.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset, now,
                                                     leader_end_offset)

    def maybe_shrink_isrs(self, now_ms: int | None = None) -> list[tuple[Partition, LeaderAndIsr]]:
        """Kafka's isr-expiration task (every replica.lag.time.max.ms / 2): propose dropping lagging
        followers from the ISR of every partition led here."""
        now = self.clock() if now_ms is None else now_ms
        proposals = []
        for partition in list(self._partitions.values()):
            proposed = partition.maybe_shrink_isr(now)
            if proposed is not None:
                proposals.append((partition, proposed))
        return proposals

    def _propose_isr(self, partition: Partition, proposed: LeaderAndIsr) -> None:
        if self.propose_isr is not None:
            self.propose_isr(partition, proposed)

    def _count_isr_change(self, before: frozenset[int], after: frozenset[int]) -> None:
        if len(after) < len(before):
            self.isr_shrinks += 1
        elif len(after) > len(before):
            self.isr_expands += 1

    def _high_watermark_moved(self, partition: Partition) -> None:
        self.purgatory.wake((partition.topic, partition.index), self.lookup)
        if self.on_high_watermark is not None:
            self.on_high_watermark(partition.topic, partition.index)

    def _leadership_moved(self, partition: Partition) -> None:
        self.purgatory.wake((partition.topic, partition.index), self.lookup)  # they find their answer changed
        if self.on_leadership_moved is not None:
            self.on_leadership_moved(partition.topic, partition.index)
