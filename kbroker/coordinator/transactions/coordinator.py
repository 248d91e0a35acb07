"""The transaction coordinator of a single node (Kafka 3.9's TransactionCoordinator, transactions v1).

Each transactional id lives in partition `abs(javaHash(id)) % transaction.state.log.num.partitions` of
`__transaction_state`; every change of its state is a record there first and in memory after, so a
restarted broker replays the topic and finds every id as it was. Transactions left in PrepareCommit or
PrepareAbort by a crash get their markers written at load, as Kafka's coordinator does on election.

Ending a transaction writes PrepareCommit/PrepareAbort, the markers into every partition of the
transaction (all local on a single node, so they are written before EndTxn is answered), then
CompleteCommit/CompleteAbort. A transaction older than its timeout is aborted under a bumped epoch, which
fences the producer that let it lapse; so is the open transaction of a producer whose transactional id
a new producer initialises.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterable

from kbroker.cluster.partition import ReplicationError
from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.log_replay import log_batches
from kbroker.coordinator.offsets import OFFSETS_TOPIC, coordinator_batch, length_prefixed
from kbroker.coordinator.transactions.markers import write_marker
from kbroker.coordinator.transactions.metadata import (
    COMPLETED,
    NO_PRODUCER_EPOCH,
    PREPARED,
    TransactionMetadata,
    TxnState,
)
from kbroker.coordinator.transactions.records import (
    TRANSACTION_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kbroker.log.errors import LogError
from wire.errors import ErrorCode
from wire.records import iter_records

log = logging.getLogger(__name__)
ACKS_LEADER = 1
MARKER_RETRY_S = 1.0  # how soon a refused marker is tried again (Kafka's marker channel retries with a backoff)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    """Built by `Broker.transactions` on first use, replaying `__transaction_state` if it exists."""

    def __init__(self, broker) -> None:
        self.broker = broker
        config = broker.config
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.id_expiration_ms = int(config["transactional.id.expiration.ms"])
        self.abort_interval_s = int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]) / 1000
        self.expire_interval_s = int(config["transaction.remove.expired.transaction.cleanup.interval.ms"]) / 1000
        topic = broker.topics.get(TRANSACTION_TOPIC)
        self.partitions = topic.partitions if topic else int(config["transaction.state.log.num.partitions"])
        self.transactions: dict[str, TransactionMetadata] = {}
        self._unfinished: dict[str, set[tuple[str, int]]] = {}  # prepared ids -> partitions still without a marker
        self._tasks: list[asyncio.Task] = []
        if topic is not None:
            for partition in range(self.partitions):
                self._replay_partition(partition)
            log.info("loaded the state of %d transactional ids", len(self.transactions))

    # --- where ids live --------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """Why this broker cannot coordinate the id now (its partition's log dir failed), else None."""
        if self.broker.config.cluster_mode:  # a cluster's transaction coordinators are still to come (issue 15)
            return ErrorCode.NOT_COORDINATOR
        logs = self.broker.logs
        if logs.has_offline_partitions and logs.is_offline(TRANSACTION_TOPIC, self.partition_for(transactional_id)):
            return ErrorCode.NOT_COORDINATOR
        return None

    def coordinator_epoch(self, partition: int) -> int:
        """The epoch markers carry (Kafka's coordinator epoch: the leader epoch of the id's `__transaction_state`
        partition; a marker with an older one is refused). The newest epoch the partition's log knows counts too, so
        a log dir taken over from Kafka, whose epochs grew with every leader change, is not fenced by its past."""
        leader = self.broker.replicas.get(TRANSACTION_TOPIC, partition)
        plog = self.broker.partition_log(TRANSACTION_TOPIC, partition)
        logged = plog.leader_epoch_cache.latest_epoch if plog is not None else -1
        return max(leader.leader_epoch if leader is not None else 0, logged, 0)

    # --- the log -----------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Created on first use, as Kafka does when the first transactional producer asks for its coordinator."""
        if TRANSACTION_TOPIC not in self.broker.topics:
            config = self.broker.config
            self.broker.create_topic(TRANSACTION_TOPIC, self.partitions, {
                "cleanup.policy": "compact", "compression.type": "uncompressed", "unclean.leader.election.enable":
                "false", "segment.bytes": str(config["transaction.state.log.segment.bytes"])})

    def _replay_partition(self, partition: int) -> None:
        plog = self.broker.partition_log(TRANSACTION_TOPIC, partition)
        if plog is None:
            return
        for buf, pos, header in log_batches(plog):
            if not header.is_control:
                for record in iter_records(buf, pos):
                    self._apply(record.key, record.value)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        try:
            transactional_id = decode_key(bytes(key))
            if transactional_id is None:
                return
            if value is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = decode_value(transactional_id, bytes(value))
        except Exception:  # one bad record must not stop the broker from starting
            log.exception("skipping an unreadable %s record", TRANSACTION_TOPIC)

    def _write(self, metadata: TransactionMetadata, *, tombstone: bool = False) -> ErrorCode:
        """The record first, memory after: what is answered is what a restart finds."""
        self.ensure_topic()
        partition = self.partition_for(metadata.transactional_id)
        leader = self.broker.replicas.get(TRANSACTION_TOPIC, partition)
        if leader is None or self.broker.partition_log(TRANSACTION_TOPIC, partition) is None:
            return ErrorCode.NOT_COORDINATOR
        now = _now_ms()
        value = None if tombstone else encode_value(metadata)
        batch = coordinator_batch([(length_prefixed(encode_key(metadata.transactional_id)),
                                    length_prefixed(value))], now)
        try:
            leader.append_as_leader(batch, now, ACKS_LEADER, coordinator=True)
        except OSError as error:
            plog = self.broker.partition_log(TRANSACTION_TOPIC, partition)
            self.broker.logs.io_error(plog, error, f"appending to {TRANSACTION_TOPIC}-{partition}")
            return ErrorCode.NOT_COORDINATOR
        except (LogError, ReplicationError) as error:
            log.warning("cannot write the state of transactional id %s: %s", metadata.transactional_id, error)
            return append_error(error.error_code)
        except Exception:
            log.exception("cannot write the state of transactional id %s", metadata.transactional_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        self.broker.notify_appended(TRANSACTION_TOPIC, partition)
        if tombstone:
            self.transactions.pop(metadata.transactional_id, None)
        else:
            self.transactions[metadata.transactional_id] = metadata
        return ErrorCode.NONE

    # --- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                         producer_epoch: int) -> tuple[ErrorCode, int, int]:
        """Kafka's handleInitProducerId for a transactional id: (error, producer id, epoch)."""
        if not transactional_id or (producer_id < 0) != (producer_epoch < 0):  # both given or neither (KIP-360)
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        problem = self.coordinator_error(transactional_id)
        if problem is not None:
            return problem, -1, -1
        now = _now_ms()
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        current = self.transactions.get(transactional_id)
        if current is None or current.state == TxnState.DEAD:
            current = TransactionMetadata(transactional_id, self.broker.allocate_producer_id(), NO_PRODUCER_EPOCH,
                                          timeout_ms, TxnState.EMPTY, last_update_ms=now)
        if current.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected is not None and not _may_reinitialise(current, *expected):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if current.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if current.state == TxnState.ONGOING:  # a zombie's transaction is aborted first; the client retries
            return self._fence_and_abort(current) or ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if current.epoch_exhausted and (expected is None or expected[1] == current.producer_epoch):
            moved = current.new_producer_id(self.broker.allocate_producer_id(), timeout_ms, expected is not None, now)
        else:
            moved = current.new_epoch(timeout_ms, expected[1] if expected else None, now)
            if moved is None:
                return ErrorCode.PRODUCER_FENCED, -1, -1
        error = self._write(moved)
        if error:
            return error, -1, -1
        return ErrorCode.NONE, moved.producer_id, moved.producer_epoch

    # --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def current(self, transactional_id: str, producer_id: int, producer_epoch: int
                ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's state if this producer may act on it (Kafka's checks shared by AddPartitions and EndTxn)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        problem = self.coordinator_error(transactional_id)
        if problem is not None:
            return problem, None
        current = self.transactions.get(transactional_id)
        if current is None or current.state == TxnState.DEAD or current.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if current.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if current.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, current

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> ErrorCode:
        error, current = self.current(transactional_id, producer_id, producer_epoch)
        if current is None:
            return error
        if current.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        added = frozenset(partitions)
        if current.state == TxnState.ONGOING and added <= current.partitions:
            return ErrorCode.NONE
        return self._write(current.with_partitions(added, _now_ms()))

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partition: tuple[str, int]) -> ErrorCode:
        """Kafka's verify-only AddPartitionsToTxn for one partition: whether the producer's ongoing transaction has it
        (TRANSACTION_ABORTABLE if not, CONCURRENT_TRANSACTIONS while it ends)."""
        error, current = self.current(transactional_id, producer_id, producer_epoch)
        if current is None:
            return error
        if current.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE if partition in current.partitions else ErrorCode.TRANSACTION_ABORTABLE

    def group_partition(self, group_id: str) -> tuple[str, int]:
        """The `__consumer_offsets` partition a group's transactional offsets go to (AddOffsetsToTxn)."""
        return OFFSETS_TOPIC, self.broker.coordinator.offsets.partition_for(group_id)

    # --- EndTxn ----------------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool) -> ErrorCode:
        """Kafka's handleEndTransaction from a client."""
        error, current = self.current(transactional_id, producer_id, producer_epoch)
        if current is None:
            return error
        state = current.state
        if state == TxnState.ONGOING:
            return self._end(current, commit)
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of an end that succeeded
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    def _fence_and_abort(self, current: TransactionMetadata) -> ErrorCode:
        """Abort the open transaction under the next epoch, so its producer can write no more of it."""
        return self._end(current.fenced(), commit=False)

    def _end(self, current: TransactionMetadata, commit: bool) -> ErrorCode:
        error = self._write(current.prepared(commit, _now_ms()))
        if error:
            return error
        self._complete(self.transactions[current.transactional_id])
        return ErrorCode.NONE

    def _complete(self, prepared: TransactionMetadata) -> None:
        """Markers into the partitions of the transaction still without one, then CompleteCommit/CompleteAbort.
        A partition leaves the transaction once its marker is written or the partition is gone (Kafka drops a
        deleted topic's too); any other refusal keeps the transaction prepared (requests on the id meanwhile get
        CONCURRENT_TRANSACTIONS) and `retry_unfinished` tries again, as Kafka's marker channel retries until the
        leader takes the marker: completing without it would leave data the producer was told is committed in an
        open transaction."""
        transactional_id = prepared.transactional_id
        commit = prepared.state == TxnState.PREPARE_COMMIT
        remaining = self._unfinished.setdefault(transactional_id, set(prepared.partitions))
        self.transactions[transactional_id] = prepared.moved(pending=prepared.state)
        epoch = self.coordinator_epoch(self.partition_for(transactional_id))
        now = _now_ms()
        for topic, partition in sorted(remaining):
            try:
                error = write_marker(self.broker, topic, partition, prepared.producer_id, prepared.producer_epoch,
                                     epoch, commit, now)
            except Exception:
                log.exception("writing a marker of transactional id %s to %s-%d", transactional_id, topic, partition)
                continue
            if error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                remaining.discard((topic, partition))
            else:
                log.warning("the %s marker of transactional id %s was refused by %s-%d (%s); retrying",
                            "COMMIT" if commit else "ABORT", transactional_id, topic, partition,
                            getattr(error, "name", error))
        if not remaining and self._write(prepared.completed(_now_ms())) == ErrorCode.NONE:
            del self._unfinished[transactional_id]

    def retry_unfinished(self, now_ms: int = 0) -> int:
        """Markers (or the Complete record) that could not be written yet, tried again; how many ids are left."""
        for transactional_id in list(self._unfinished):
            metadata = self.transactions.get(transactional_id)
            if metadata is None or metadata.state not in PREPARED:
                self._unfinished.pop(transactional_id, None)
                continue
            self._complete(metadata.moved(pending=None))
        return len(self._unfinished)

    def complete_prepared(self) -> None:
        """Finish what a crash left between PrepareCommit/PrepareAbort and its markers (Kafka does it at load)."""
        for metadata in list(self.transactions.values()):
            if metadata.state in PREPARED:
                self._complete(metadata)

    # --- timeouts and expiry --------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> int:
        """Kafka's abortTimedOutTransactions: an Ongoing transaction past its timeout is aborted, fenced."""
        timed_out = [m for m in self.transactions.values()
                     if m.state == TxnState.ONGOING and m.pending is None and m.start_ms + m.timeout_ms < now_ms]
        for metadata in timed_out:
            log.info("aborting the transaction of %s (producer id %d, epoch %d): it passed its timeout of %d ms",
                     metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, metadata.timeout_ms)
            self._fence_and_abort(metadata)
        return len(timed_out)

    def remove_expired(self, now_ms: int) -> int:
        """Kafka's transactional.id.expiration.ms: an id idle that long with no transaction open is forgotten
        (a tombstone, so compaction drops it too)."""
        expired = [m for m in self.transactions.values()
                   if m.state in COMPLETED and m.pending is None and m.last_update_ms + self.id_expiration_ms <= now_ms]
        for metadata in expired:
            self._write(metadata, tombstone=True)
        return len(expired)

    def start(self) -> None:
        """Finish prepared transactions and start the timers (inside the broker's event loop)."""
        self.complete_prepared()
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._every(self.abort_interval_s, self.abort_timed_out)),
                           loop.create_task(self._every(self.expire_interval_s, self.remove_expired)),
                           loop.create_task(self._every(MARKER_RETRY_S, self.retry_unfinished))]

    @staticmethod
    async def _every(interval_s: float, work) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                work(_now_ms())
            except Exception:
                log.exception("transaction coordinator housekeeping failed")

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    # --- DescribeTransactions / ListTransactions -------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        problem = self.coordinator_error(transactional_id)
        if problem is not None:
            return problem, None
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, metadata

    def list(self, state_names: list[str], producer_ids: set[int], duration_ms: int,
             id_pattern: str | None) -> tuple[list[str], list[TransactionMetadata]]:
        """Kafka's listTransactionStates: (the state names it does not know, the matching transactions). A filter
        given matches only what it names (unknown names match nothing); a duration keeps transactions started
        longer ago than that; the pattern is a regex matched against the whole id (KIP-1152)."""
        named = {name: TxnState.from_kafka_name(name) for name in state_names}
        states = {state for state in named.values() if state is not None}
        unknown = [name for name, state in named.items() if state is None]
        now = _now_ms()
        matcher = re.compile(id_pattern) if id_pattern else None
        return unknown, [
            m for m in self.transactions.values()
            if m.state != TxnState.DEAD and (not state_names or m.state in states)
            and (not producer_ids or m.producer_id in producer_ids)
            and (duration_ms < 0 or now - m.start_ms > duration_ms)
            and (matcher is None or matcher.fullmatch(m.transactional_id))]


def append_error(error_code: int) -> ErrorCode:
    """What a client is told when its transaction state could not be written (Kafka's appendTransactionToLog)."""
    if error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                      ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _may_reinitialise(current: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's isValidProducerId for an InitProducerId naming the producer's id and epoch (KIP-360)."""
    return (current.producer_epoch == NO_PRODUCER_EPOCH or producer_id == current.producer_id
            or (producer_id == current.last_producer_id and producer_epoch >= 32766))
