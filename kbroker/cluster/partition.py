"""One partition's replication state on this broker, as Kafka 3.9's Partition keeps it.

Why one object: every API that may append to or read a partition asks it, so leadership, the
leader epoch, the ISR and the high watermark are decided in one place. The log itself
(kbroker.log) knows nothing of replicas; this class wraps it.

The rules, from Kafka's Partition and Replica (ZooKeeper mode):

- A LeaderAndIsr is applied only at a higher leader epoch; the replica manager answers
  STALE_CONTROLLER_EPOCH otherwise (`leader_and_isr_error`). Becoming leader at a new epoch
  records the epoch's start offset (the log end) and resets every follower's state.
- The leader learns a follower's log end offset from the fetch offset of its Fetch requests.
  A follower is caught up when its LEO equals the leader's, or when it last was within
  replica.lag.time.max.ms (`last_caught_up_time_ms`, which also credits a fetch that reached
  the LEO the leader had at the follower's previous fetch).
- The high watermark is the smallest LEO among the ISR (the "maximal" ISR, counting an
  expansion not yet confirmed) and the caught-up followers outside it; it only moves forward,
  and not at all while the ISR is smaller than the effective min.insync.replicas (KIP-966,
  KAFKA-15583, Kafka 3.7+). A partition with no followers has its LEO as its HW.
- Effective min.insync.replicas = min(min.insync.replicas, replicas): acks=all is refused with
  NOT_ENOUGH_REPLICAS before the append when the ISR is smaller, and answered with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank while the produce waited.
- ISR changes are proposed, never applied directly: an expansion when a follower outside the
  ISR reaches the HW and the current epoch's start offset, a shrink when an ISR follower is no
  longer caught up. The proposal goes to `propose_isr` (AlterPartition to the controller, wired
  elsewhere); one is in flight at a time, and `isr_change_confirmed` / `isr_change_failed`
  apply the controller's answer as Kafka does.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kbroker.cluster.model import RECOVERED, LeaderAndIsr
from kbroker.log.errors import OffsetOutOfRangeError
from kbroker.log.file_slice import FileSlice
from kbroker.log.partition_log import AppendInfo, PartitionLog
from kbroker.log.transaction_index import AbortedTxn
from wire.errors import ErrorCode

logger = logging.getLogger(__name__)

NO_EPOCH = -1            # a request's current_leader_epoch / last_fetched_epoch when it makes no claim
EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch while the controller deletes the topic
UNKNOWN_OFFSET = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
ACKS_ALL = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # a Fetch / ListOffsets request's isolation_level

# AlterPartition errors after which the proposal is dropped and the ISR stays as last committed
_RESET_TO_COMMITTED = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# errors that leave the proposal pending until the controller's next LeaderAndIsr replaces it
_AWAIT_METADATA = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                             ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED})


def _ids(broker_ids) -> str:
    """An ISR as Kafka's log lines write it: 1,2,3."""
    return ",".join(str(b) for b in sorted(broker_ids))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class ReplicationError(Exception):
    """A request this partition refuses for a replication reason; `error_code` is Kafka's answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its Fetch requests (Kafka's ReplicaState)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms

    def record_fetch(self, fetch_offset: int, log_start_offset: int, now_ms: int, leader_end_offset: int) -> None:
        """A fetch at `fetch_offset` reached the leader's LEO of now (caught up now) or of the previous
        fetch (caught up then): so a follower of a busy partition, always a little behind, stays in sync."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_end_offset, self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = now_ms

    def reset(self, now_ms: int, leader_end_offset: int, new_leader: bool, in_sync: bool) -> None:
        """On an election: an ISR member counts as caught up now, any other not at all, so it cannot hold
        the HW back; a new leader forgets what an earlier term learnt of the follower's log."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if new_leader:
            self.log_end_offset = self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0


@dataclass(frozen=True)
class PendingIsr:
    """An ISR change sent to the controller, not yet confirmed. Until then the committed ISR decides
    acks=all refusals, and the union of both (the stricter set) the HW and acks=all completion."""

    proposed: LeaderAndIsr
    committed_isr: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.committed_isr | frozenset(self.proposed.isr)


class FetchedData(NamedTuple):
    """One partition's answer to a Fetch: its records (None when there are none to send) and offsets."""

    records: FileSlice | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) when the fetcher's log diverged
    last_stable_offset: int = UNKNOWN_OFFSET
    # READ_COMMITTED consumers only: the aborted transactions of the range read (None: not asked for)
    aborted_transactions: list[AbortedTxn] | None = None


class Partition:
    """A partition's role, leader epoch, ISR and followers on this broker; see the module docstring."""

    def __init__(self, topic: str, index: int, log: PartitionLog | None, local_broker_id: int, *,
                 min_insync_replicas: Callable[[], int] = lambda: 1,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 propose_isr: Callable[[Partition, LeaderAndIsr], object] | None = None,
                 clock: Callable[[], int] = now_ms) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self.min_insync_replicas = min_insync_replicas  # read at each use: topic and broker configs change live
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.propose_isr = propose_isr  # the AlterPartition hook; None: no controller to tell
        self.on_high_watermark: Callable[[Partition], object] | None = None  # set by the replica manager
        self.on_isr_committed: Callable[[frozenset[int], frozenset[int]], object] | None = None  # (before, after)
        self.clock = clock
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = 0
        self.controller_epoch = 0
        self.leader_recovery_state = RECOVERED
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()  # as the controller last committed it
        self.pending_isr: PendingIsr | None = None
        self.epoch_start_offset: int | None = None  # where this leader's epoch began (leader only)
        self.followers: dict[int, FollowerState] = {}

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def _fields(self, leader_epoch: int) -> dict[str, object]:
        """The `extra=` fields of this partition's log lines (kbroker.logs' JSON output shows them)."""
        return {"topic": self.topic, "partition": self.index, "broker_id": self.local_broker_id,
                "leader": self.leader_id, "isr": sorted(self.isr), "epoch": leader_epoch}

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.index}, {self.role.value}, leader={self.leader_id}, "
                f"epoch={self.leader_epoch}, replicas={list(self.replicas)}, isr={sorted(self.isr)})")

    # --- state ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr if self.pending_isr is None else self.pending_isr.maximal_isr

    @property
    def high_watermark(self) -> int:
        return self._log().high_watermark

    def effective_min_isr(self) -> int:
        """min.insync.replicas capped at the replica count (Kafka 3.7+): a topic asking for more
        replicas than it has is served as if it asked for all of them."""
        if not self.followers:
            return 1  # the configs need not be read: the cap is 1
        return min(self.min_insync_replicas(), len(self.followers) + 1)

    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    def _log(self) -> PartitionLog:
        if self.log is None:
            raise ReplicationError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   f"no log for {self.topic}-{self.index} on broker {self.local_broker_id}")
        return self.log

    # --- leadership (LeaderAndIsr) ----------------------------------------------------

    def leader_and_isr_error(self, leader_epoch: int) -> ErrorCode:
        """A ZooKeeper controller's LeaderAndIsr applies only at a newer leader epoch; an older or the
        same one is answered STALE_CONTROLLER_EPOCH (Kafka 3.9, ZooKeeper mode)."""
        return ErrorCode.NONE if leader_epoch > self.leader_epoch else ErrorCode.STALE_CONTROLLER_EPOCH

    def stop_replica_error(self, leader_epoch: int) -> ErrorCode:
        """StopReplica fences only an epoch older than ours (-1 and -2 are always accepted)."""
        if leader_epoch in (NO_EPOCH, EPOCH_DURING_DELETE) or leader_epoch >= self.leader_epoch:
            return ErrorCode.NONE
        return ErrorCode.FENCED_LEADER_EPOCH

    def make_leader(self, state: LeaderAndIsr, replicas: tuple[int, ...], controller_epoch: int,
                    log: PartitionLog | None = None) -> bool:
        """Lead at `state` (whose leader is this broker). Returns whether this broker was not the leader
        before; False without change for a state older than the partition epoch we know."""
        if state.partition_epoch < self.partition_epoch:
            return False
        if log is not None:
            self.log = log
        leader_log = self._log()
        self.controller_epoch = controller_epoch
        now = self.clock()
        was_leader = self.is_leader
        self._set_assignment(replicas, state.isr, leader=True)
        if state.leader_epoch > self.leader_epoch:
            start = leader_log.log_end_offset
            leader_log.maybe_assign_epoch_start_offset(state.leader_epoch, start)
            for follower in self.followers.values():
                follower.reset(now, start, not was_leader, follower.broker_id in self.isr)
            logger.info("[Partition %s broker=%d] %s starts at leader epoch %d from offset %d with partition epoch %d, "
                     "high watermark %d, ISR [%s]. Previous leader epoch was %d.", self.name, self.local_broker_id,
                     self.name, state.leader_epoch, start, state.partition_epoch, leader_log.high_watermark,
                     _ids(state.isr), self.leader_epoch, extra=self._fields(state.leader_epoch))
            self.leader_epoch = state.leader_epoch
            self.epoch_start_offset = start
        self.partition_epoch = state.partition_epoch
        self.leader_recovery_state = RECOVERED
        self.role, self.leader_id = Role.LEADER, self.local_broker_id
        self.maybe_increment_high_watermark(now)
        return not was_leader

    def make_follower(self, state: LeaderAndIsr, replicas: tuple[int, ...], controller_epoch: int,
                      log: PartitionLog | None = None) -> bool:
        """Follow `state.leader`. Returns whether the leader epoch changed (the fetcher must restart);
        False without change for a state older than the partition epoch we know."""
        if state.partition_epoch < self.partition_epoch:
            return False
        if log is not None:
            self.log = log
        self.controller_epoch = controller_epoch
        new_epoch = state.leader_epoch > self.leader_epoch
        if new_epoch:
            logger.info("[Partition %s broker=%d] Follower %s starts at leader epoch %d from offset %d with partition "
                     "epoch %d and high watermark %d. Current leader is %d. Previous leader %d and previous leader "
                     "epoch was %d.", self.name, self.local_broker_id, self.name, state.leader_epoch,
                     self.log.log_end_offset if self.log else -1, state.partition_epoch,
                     self.log.high_watermark if self.log else -1, state.leader, self.leader_id, self.leader_epoch,
                     extra={**self._fields(state.leader_epoch), "leader": state.leader})
        self.role, self.leader_id = Role.FOLLOWER, state.leader
        self.leader_epoch = state.leader_epoch
        self.epoch_start_offset = None
        self.partition_epoch = state.partition_epoch
        self.leader_recovery_state = state.leader_recovery_state
        self._set_assignment(replicas, (), leader=False)
        return new_epoch

    def make_none(self) -> None:
        """Stop replicating (StopReplica): neither leader nor follower, the log left as it is."""
        self.role, self.leader_id = Role.NONE, -1
        self.isr, self.pending_isr, self.followers = frozenset(), None, {}

    def _set_assignment(self, replicas: tuple[int, ...], isr: tuple[int, ...], *, leader: bool) -> None:
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pending_isr = None
        if not leader:
            self.followers = {}
            return
        self.followers = {r: self.followers.get(r) or FollowerState(r) for r in self.replicas
                          if r != self.local_broker_id}

    # --- epochs a request claims ------------------------------------------------------

    def check_current_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's check of a request's current_leader_epoch (-1: none claimed)."""
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH  # the client knows a newer leader than this broker

    def local_log_error(self, current_leader_epoch: int, require_leader: bool) -> ErrorCode:
        """The epoch first, then leadership, as Kafka's getLocalLog."""
        error = self.check_current_leader_epoch(current_leader_epoch)
        if error:
            return error
        if (require_leader and not self.is_leader) or self.log is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    # --- produce ----------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, now_ms: int, required_acks: int, *,
                         coordinator: bool = False) -> AppendInfo:
        """Append a produce request's records, stamped with the leader epoch. Raises ReplicationError
        (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS) or what PartitionLog.append raises."""
        if self.role is not Role.LEADER or self.log is None:
            raise ReplicationError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   f"Leader not local for partition {self.topic}-{self.index} on broker "
                                   f"{self.local_broker_id}")
        log = self.log
        if required_acks == ACKS_ALL and self.followers and len(self.isr) < self.effective_min_isr():
            raise ReplicationError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                   f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy "
                                   f"the min.isr requirement of {self.effective_min_isr()} for partition "
                                   f"{self.topic}-{self.index}")
        info = log.append(records, now_ms, leader_epoch=self.leader_epoch, coordinator=coordinator)
        if not self.followers:
            # The whole ISR is this broker: its LEO is the HW. Nobody is told: no acks=all produce can
            # wait on a partition without followers (the last one leaving released them, through
            # make_leader), and the caller wakes the fetches that wait for appends.
            log.update_high_watermark(log.log_end_offset)
        else:
            self.maybe_increment_high_watermark(now_ms)
        return info

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """Whether an acks=all append ending before `required_offset` is complete, and its error."""
        if self.role is not Role.LEADER or self.log is None:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if self.effective_min_isr() <= len(self.maximal_isr):
            return True, ErrorCode.NONE
        return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND  # the ISR shrank while the produce waited

    # --- high watermark ---------------------------------------------------------------

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Move the HW forward to the smallest LEO of the maximal ISR and of the caught-up followers;
        True if it moved (and `on_high_watermark` was told)."""
        if not self.is_leader or self.log is None or self.is_under_min_isr():
            return False
        now = self.clock() if now_ms is None else now_ms
        log = self.log
        leader_end = log.log_end_offset
        new_hw = leader_end
        maximal = self.maximal_isr
        for follower in self.followers.values():
            if follower.log_end_offset < new_hw and (
                    follower.broker_id in maximal
                    or follower.is_caught_up(leader_end, now, self.replica_lag_time_max_ms)):
                new_hw = follower.log_end_offset
        if new_hw <= log.high_watermark:
            return False
        log.update_high_watermark(new_hw)
        if self.on_high_watermark is not None:
            self.on_high_watermark(self)
        return True

    # --- follower fetches -------------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    now_ms: int, leader_end_offset: int) -> bool:
        """Record a follower's fetch (its LEO is the fetch offset), propose adding it to the ISR if it
        caught up, and move the HW; True if the HW moved."""
        follower = self.followers.get(replica_id)
        if follower is None or not self.is_leader:
            return False
        before = follower.log_end_offset
        follower.record_fetch(fetch_offset, log_start_offset, now_ms, leader_end_offset)
        self.maybe_expand_isr(replica_id)
        return before != follower.log_end_offset and self.maybe_increment_high_watermark(now_ms)

    def read(self, fetch_offset: int, max_bytes: int, *, current_leader_epoch: int = NO_EPOCH,
             last_fetched_epoch: int = NO_EPOCH, require_leader: bool = True, replica_id: int = -1,
             min_one_batch: bool = True, isolation_level: int = READ_UNCOMMITTED) -> FetchedData:
        """Records for a Fetch: up to the LEO for a follower (`replica_id` >= 0), up to the LSO for a
        READ_COMMITTED consumer, which also gets the aborted transactions of the range (Kafka's
        FetchIsolation), up to the HW for any other. Raises ReplicationError for a fenced or unknown
        epoch, a non-leader (`require_leader`) or an unknown follower, and OffsetOutOfRangeError as
        PartitionLog.read does."""
        error = self.local_log_error(current_leader_epoch, require_leader)
        if not error and replica_id >= 0 and replica_id not in self.followers:
            # the follower is not (yet) a replica here: the fetcher retries
            error = ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch != NO_EPOCH \
                else ErrorCode.NOT_LEADER_OR_FOLLOWER
        if error:
            raise ReplicationError(error, f"cannot serve {self.topic}-{self.index} at leader epoch "
                                          f"{current_leader_epoch}: {self!r}")
        log = self._log()
        high_watermark, log_start, log_end = log.high_watermark, log.log_start_offset, log.log_end_offset
        last_stable = log.last_stable_offset
        if last_fetched_epoch >= 0:
            diverging = self._diverging_epoch(log, fetch_offset, last_fetched_epoch)
            if diverging is not None:
                return FetchedData(None, high_watermark, log_start, log_end, diverging, last_stable)
        records = None
        if replica_id < 0 and isolation_level == READ_COMMITTED:
            aborted: list[AbortedTxn] = []
            if max_bytes > 0 or min_one_batch:
                records, aborted = log.read_with_aborted_transactions(fetch_offset, max_bytes, last_stable,
                                                                      min_one_batch=min_one_batch)
            return FetchedData(records, high_watermark, log_start, log_end, None, last_stable, aborted)
        if max_bytes > 0 or min_one_batch:
            bound = log_end if replica_id >= 0 else high_watermark
            records = log.read(fetch_offset, max_bytes, bound, min_one_batch=min_one_batch)
        return FetchedData(records, high_watermark, log_start, log_end, None, last_stable)

    def _diverging_epoch(self, log: PartitionLog, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """Where the fetcher's log left ours (KIP-320 / KIP-595 truncation): its last fetched epoch ends
        here before its fetch offset, or is unknown here."""
        epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
        if epoch == NO_EPOCH or end_offset == UNKNOWN_OFFSET:
            raise OffsetOutOfRangeError(f"could not determine the end offset of epoch {last_fetched_epoch} "
                                        f"in {self.topic}-{self.index}")
        if fetch_offset < log.log_start_offset:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} is below the log start offset "
                                        f"{log.log_start_offset} of {self.topic}-{self.index}")
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    # --- ISR changes ------------------------------------------------------------------

    def low_watermark(self, is_alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the lowest log start offset among this leader and its followers on
        live brokers (-1 for one that has not fetched yet), which DeleteRecords waits to see pass its offset."""
        lowest = self._log().log_start_offset
        for follower in self.followers.values():
            if is_alive(follower.broker_id) and follower.log_start_offset < lowest:
                lowest = follower.log_start_offset
        return lowest

    def expand_candidates(self) -> frozenset[int]:
        """Followers outside the ISR that reached the HW within the current leader epoch."""
        if not self.is_leader or self.log is None or self.epoch_start_offset is None:
            return frozenset()
        hw, start = self.log.high_watermark, self.epoch_start_offset
        return frozenset(f.broker_id for f in self.followers.values()
                         if f.broker_id not in self.isr and f.log_end_offset >= hw and f.log_end_offset >= start)

    def shrink_candidates(self, now_ms: int | None = None) -> frozenset[int]:
        """ISR followers no longer caught up (replica.lag.time.max.ms); none while a change is in flight."""
        if not self.is_leader or self.log is None or self.pending_isr is not None:
            return frozenset()
        now = self.clock() if now_ms is None else now_ms
        leader_end = self.log.log_end_offset
        out = set()
        for replica_id in self.isr - {self.local_broker_id}:
            follower = self.followers.get(replica_id)
            if follower is None or not follower.is_caught_up(leader_end, now, self.replica_lag_time_max_ms):
                out.add(replica_id)
        return frozenset(out)

    def maybe_expand_isr(self, replica_id: int) -> LeaderAndIsr | None:
        """Propose `replica_id` for the ISR if it may join; the proposal, or None."""
        if self.pending_isr is not None or replica_id not in self.expand_candidates():
            return None
        logger.info("[Partition %s broker=%d] Expanding ISR from %s to %s", self.name, self.local_broker_id,
                 _ids(self.isr), _ids(self.isr | {replica_id}), extra=self._fields(self.leader_epoch))
        return self._propose(self.isr | {replica_id})

    def maybe_shrink_isr(self, now_ms: int | None = None) -> LeaderAndIsr | None:
        """Propose dropping the followers that fell behind (Kafka runs this every lag.time.max / 2)."""
        out = self.shrink_candidates(now_ms)
        if not out:
            return None
        leader_log = self._log()
        ends = {r: self.followers[r].log_end_offset if r in self.followers else -1 for r in sorted(out)}
        lagging = " ".join(f"(brokerId: {r}, endOffset: {end})" for r, end in ends.items())
        logger.info("[Partition %s broker=%d] Shrinking ISR from %s to %s. Leader: (highWatermark: %d, endOffset: %d). "
                 "Out of sync replicas: %s.", self.name, self.local_broker_id, _ids(self.isr), _ids(self.isr - out),
                 leader_log.high_watermark, leader_log.log_end_offset, lagging, extra=self._fields(self.leader_epoch))
        return self._propose(self.isr - out)

    def _propose(self, isr: frozenset[int]) -> LeaderAndIsr:
        proposed = LeaderAndIsr(self.local_broker_id, self.leader_epoch, tuple(sorted(isr)),
                                self.leader_recovery_state, self.partition_epoch)
        self.pending_isr = PendingIsr(proposed, self.isr)
        if self.propose_isr is not None:
            self.propose_isr(self, proposed)
        return proposed

    def isr_change_confirmed(self, proposed: LeaderAndIsr, confirmed: LeaderAndIsr) -> bool:
        """The controller accepted `proposed` as `confirmed`: commit it (unless leadership moved on
        meanwhile) and move the HW; True if the HW moved."""
        if self.pending_isr is None or self.pending_isr.proposed != proposed:
            return False  # a LeaderAndIsr replaced the state since: this answer is out of date
        if confirmed.leader_epoch != self.leader_epoch or confirmed.partition_epoch < self.partition_epoch:
            return False  # stale: stay pending until new metadata arrives
        before, self.isr = self.isr, frozenset(confirmed.isr)
        if self.on_isr_committed is not None:
            self.on_isr_committed(before, self.isr)
        self.partition_epoch = confirmed.partition_epoch
        self.leader_recovery_state = confirmed.leader_recovery_state
        self.pending_isr = None
        logger.info("[Partition %s broker=%d] ISR updated to %s and version updated to %d", self.name,
                 self.local_broker_id, _ids(self.isr), self.partition_epoch, extra=self._fields(self.leader_epoch))
        return self.maybe_increment_high_watermark()

    def isr_change_failed(self, proposed: LeaderAndIsr, error: ErrorCode) -> bool:
        """The controller refused `proposed`; True if the caller should send it again."""
        if self.pending_isr is None or self.pending_isr.proposed != proposed:
            return False
        if error in _RESET_TO_COMMITTED:
            self.pending_isr = None
            return False
        return error not in _AWAIT_METADATA
