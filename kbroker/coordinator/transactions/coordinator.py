"""The transaction coordinator (Kafka 3.9's TransactionCoordinator, transactions v1), on a single node or as one
member of a ZooKeeper-mode cluster.

Each transactional id lives in partition `abs(javaHash(id)) % transaction.state.log.num.partitions` of
`__transaction_state`; every change of its state is a record there first and in memory after, so a
restarted broker (or the next leader of the partition) replays the partition and finds every id as it was.
A single node coordinates every partition; a cluster member those whose leader it is (`owned`, loaded and
let go as leadership moves, as Kafka's onElection/onResignation), and its state writes count only once the
ISR has them (acks=all). Transactions left in PrepareCommit or PrepareAbort get their markers written at load.

Ending a transaction writes PrepareCommit/PrepareAbort, the markers into every partition of the
transaction, then CompleteCommit/CompleteAbort. A single node writes its markers (all local) before
EndTxn is answered; a cluster member answers once the Prepare record is replicated, as Kafka does, and sends
the markers on (WriteTxnMarkers to the partitions' leaders, kbroker/cluster/transaction_channel.py). A
transaction older than its timeout is aborted under a bumped epoch, which fences the producer that let it
lapse; so is the open transaction of a producer whose transactional id a new producer initialises.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from kbroker.cluster.partition import ReplicationError
from kbroker.cluster.producer_ids import ProducerIdsUnavailable
from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.log_replay import log_batches
from kbroker.coordinator.offsets import OFFSETS_TOPIC, coordinator_batch, length_prefixed
from kbroker.coordinator.transactions.markers import write_marker
from kbroker.coordinator.transactions.metadata import (
    COMPLETED,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TransactionMetadata,
    TxnState,
)
from kbroker.coordinator.transactions.records import (
    TRANSACTION_TOPIC,
    TRANSACTIONS_V2,
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
ACKS_ALL = -1  # Kafka writes __transaction_state with acks=all (TransactionLog.EnforcedRequiredAcks)
MARKER_RETRY_S = 1.0  # how soon a refused marker is tried again (Kafka's marker channel retries with a backoff)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def transaction_topic_configs(config) -> dict[str, str]:
    """`__transaction_state`'s own settings, as Kafka's TransactionStateManager gives them."""
    return {"cleanup.policy": "compact", "compression.type": "uncompressed", "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
            "segment.bytes": str(config["transaction.state.log.segment.bytes"])}


class TransactionCoordinator:
    """Built by `Broker.transactions` on first use; a single node replays `__transaction_state` then."""

    def __init__(self, broker) -> None:
        self.broker = broker
        config = broker.config
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.id_expiration_ms = int(config["transactional.id.expiration.ms"])
        self.abort_interval_s = int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]) / 1000
        self.expire_interval_s = int(config["transaction.remove.expired.transaction.cleanup.interval.ms"]) / 1000
        self.write_timeout_ms = int(config["request.timeout.ms"])  # Kafka's TransactionConfig.requestTimeoutMs
        # the partitions whose ids this broker coordinates; None: all of them (a single node)
        self.owned: set[int] | None = set() if config.cluster_mode else None
        topic = broker.topics.get(TRANSACTION_TOPIC) if self.owned is None else None  # a member learns it at load
        self.partitions = topic.partitions if topic else int(config["transaction.state.log.num.partitions"])
        self.transactions: dict[str, TransactionMetadata] = {}
        self._unfinished: dict[str, set[tuple[str, int]]] = {}  # prepared ids -> partitions still without a marker
        self._completing: dict[str, int] = {}  # ids whose markers are being written now -> their partition's load
        self._loads: dict[int, int] = {}  # partition -> how often it was loaded or let go (a stale wait's check)
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        if topic is not None:
            for partition in range(self.partitions):
                self._replay_partition(partition)
            log.info("loaded the state of %d transactional ids", len(self.transactions))

    # --- where ids live --------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    def owns(self, partition: int) -> bool:
        return self.owned is None or partition in self.owned

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """Why this broker cannot coordinate the id now (another broker leads its partition, or its log dir
        failed), else None."""
        partition = self.partition_for(transactional_id)
        if not self.owns(partition):
            return ErrorCode.NOT_COORDINATOR
        logs = self.broker.logs
        if logs.has_offline_partitions and logs.is_offline(TRANSACTION_TOPIC, partition):
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

    # --- a cluster: the ids of the partitions this broker leads ------------------------------

    def load_partition(self, partition: int, partition_count: int) -> None:
        """This broker leads `__transaction_state`-`partition` now: its ids are read from the log and served,
        and the transactions a previous coordinator left prepared get their markers (Kafka's onElection)."""
        if self.owned is None or partition in self.owned:
            return
        self.partitions = partition_count
        self._drop_ids(partition)
        self._loads[partition] = self._loads.get(partition, 0) + 1
        try:
            self._replay_partition(partition)
        except BaseException:
            self._drop_ids(partition)  # nothing half-loaded stays behind
            raise
        self.owned.add(partition)
        log.info("coordinating the transactional ids of %s-%d", TRANSACTION_TOPIC, partition)
        for metadata in self._ids_of(partition):
            if metadata.state in PREPARED:
                self._spawn(self._complete(metadata))

    def unload_partition(self, partition: int) -> None:
        """Another broker leads `__transaction_state`-`partition` now: its ids leave memory (Kafka's
        onResignation); markers under way stop at their next step, the new coordinator sends them again."""
        if self.owned is None or partition not in self.owned:
            return
        self.owned.discard(partition)
        self._drop_ids(partition)
        self._loads[partition] = self._loads.get(partition, 0) + 1
        log.info("no longer coordinating the transactional ids of %s-%d", TRANSACTION_TOPIC, partition)

    def _ids_of(self, partition: int) -> list[TransactionMetadata]:
        return [m for m in self.transactions.values() if self.partition_for(m.transactional_id) == partition]

    def _drop_ids(self, partition: int) -> None:
        for metadata in self._ids_of(partition):
            del self.transactions[metadata.transactional_id]
            self._unfinished.pop(metadata.transactional_id, None)
            self._completing.pop(metadata.transactional_id, None)

    # --- the log -----------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Created on first use, as Kafka does when the first transactional producer asks for its coordinator (a
        cluster creates it through ZooKeeper, kbroker/apis/offsets.py)."""
        if self.owned is None and TRANSACTION_TOPIC not in self.broker.topics:
            self.broker.create_topic(TRANSACTION_TOPIC, self.partitions, transaction_topic_configs(self.broker.config))

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

    async def _write(self, metadata: TransactionMetadata, *, tombstone: bool = False) -> ErrorCode:
        """The record first, memory after: what is answered is what a restart (or the next coordinator) finds. In a
        cluster the id is busy (CONCURRENT_TRANSACTIONS) until the ISR has the record."""
        self.ensure_topic()
        transactional_id = metadata.transactional_id
        partition = self.partition_for(transactional_id)
        leader = self.broker.replicas.get(TRANSACTION_TOPIC, partition)
        plog = self.broker.partition_log(TRANSACTION_TOPIC, partition)
        if not self.owns(partition) or leader is None or plog is None:
            return ErrorCode.NOT_COORDINATOR
        now = _now_ms()
        value = None if tombstone else encode_value(metadata)
        batch = coordinator_batch([(length_prefixed(encode_key(transactional_id)), length_prefixed(value))], now)
        try:
            info = leader.append_as_leader(batch, now, ACKS_LEADER if self.owned is None else ACKS_ALL,
                                           coordinator=True)
        except OSError as error:
            self.broker.logs.io_error(plog, error, f"appending to {TRANSACTION_TOPIC}-{partition}")
            return ErrorCode.NOT_COORDINATOR
        except (LogError, ReplicationError) as error:
            log.warning("cannot write the state of transactional id %s: %s", transactional_id, error)
            return append_error(error.error_code)
        except Exception:
            log.exception("cannot write the state of transactional id %s", transactional_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        self.broker.notify_appended(TRANSACTION_TOPIC, partition)
        if self.owned is not None:
            error = await self._replicated(metadata, partition, info.last_offset + 1)
            if error:
                return error
        if tombstone:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = metadata
        return ErrorCode.NONE

    async def _replicated(self, metadata: TransactionMetadata, partition: int, end: int) -> ErrorCode:
        """Wait until the ISR has the record (Kafka's appendTransactionToLog with acks=all); the id stays busy
        meanwhile and keeps its old state if the wait fails. If the partition was let go meanwhile (and perhaps
        loaded again), the id is not this request's to touch any more, as Kafka checks the coordinator epoch."""
        transactional_id = metadata.transactional_id
        before = self.transactions.get(transactional_id)
        self.transactions[transactional_id] = (before or metadata).moved(pending=metadata.state)
        key = (TRANSACTION_TOPIC, partition)
        load = self._loads.get(partition, 0)
        error = (await self.broker.replicas.wait_for_acks({key: end}, self.write_timeout_ms)).get(key, ErrorCode.NONE)
        if self._loads.get(partition, 0) != load or not self.owns(partition):
            return ErrorCode.NOT_COORDINATOR
        if error:
            log.warning("the state of transactional id %s was not replicated: %s", transactional_id,
                        getattr(error, "name", error))
            if before is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = before
            return append_error(error)
        return ErrorCode.NONE

    async def _new_producer_id(self) -> int:
        """A fresh producer id: this node's counter, or a cluster member's block from the controller (raises
        ProducerIdsUnavailable while none is at hand)."""
        member = getattr(self.broker, "cluster", None)
        if member is None or member.producer_ids is None:
            return self.broker.allocate_producer_id()
        return await member.producer_ids.generate()

    # --- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
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
        found = self.transactions.get(transactional_id)
        current = found
        try:
            if current is None or current.state == TxnState.DEAD:
                current = TransactionMetadata(transactional_id, await self._new_producer_id(), NO_PRODUCER_EPOCH,
                                              timeout_ms, TxnState.EMPTY, last_update_ms=now)
            if self.transactions.get(transactional_id) is not found:  # another request moved the id meanwhile
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if current.pending is not None:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if expected is not None and not _may_reinitialise(current, *expected):
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if current.state in PREPARED:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if current.state == TxnState.ONGOING:  # a zombie's transaction is aborted first; the client retries
                return await self._fence_and_abort(current) or ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if current.epoch_exhausted and (expected is None or expected[1] == current.producer_epoch):
                moved = current.new_producer_id(await self._new_producer_id(), timeout_ms, expected is not None, now)
                if self.transactions.get(transactional_id) is not found:
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            else:
                moved = current.new_epoch(timeout_ms, expected[1] if expected else None, now)
                if moved is None:
                    return ErrorCode.PRODUCER_FENCED, -1, -1
        except ProducerIdsUnavailable:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
        error = await self._write(moved)
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

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]], client_tv: int = 0) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction; `client_tv` 2 for the adds a partition leader (Produce v12+) or
        the group coordinator (TxnOffsetCommit v5+) makes for a transactions v2 producer. A transition under way is
        checked first, as Kafka 4 does (a single node), or after the producer's id and epoch, as Kafka 3.9 does (a
        cluster, for v1 requests)."""
        if client_tv >= TRANSACTIONS_V2 or self.owned is None:
            found = self.transactions.get(transactional_id) if transactional_id else None
            if found is not None and found.pending is not None and not self.coordinator_error(transactional_id):
                return ErrorCode.CONCURRENT_TRANSACTIONS
        error, current = self.current(transactional_id, producer_id, producer_epoch)
        if current is None:
            return error
        if current.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        added = frozenset(partitions)
        if current.state == TxnState.ONGOING and added <= current.partitions:
            return ErrorCode.NONE
        return await self._write(current.with_partitions(added, _now_ms(), client_tv))

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
        """The `__consumer_offsets` partition a group's transactional offsets go to (AddOffsetsToTxn): by the topic's
        partition count, which a cluster member knows from its metadata cache."""
        known = self.broker.known_topics()[0].get(OFFSETS_TOPIC)
        count = known.partitions if known is not None else int(self.broker.config["offsets.topic.num.partitions"])
        return OFFSETS_TOPIC, partition_for(group_id, count)

    # --- EndTxn ----------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> ErrorCode:
        """Kafka's handleEndTransaction from a client."""
        error, current = self.current(transactional_id, producer_id, producer_epoch)
        if current is None:
            return error
        state = current.state
        if state == TxnState.ONGOING:
            return await self._end(current, commit)
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of an end that succeeded
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    async def end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 commit: bool) -> tuple[ErrorCode, int, int]:
        """Kafka 4's endTransaction for EndTxn v5 (transactions v2): (error, the producer id and epoch the client
        continues with). Every end bumps the epoch, so a retry of an end that succeeded comes one epoch behind and
        gets the same answer; an abort with nothing added (Empty, or a completed transaction) is a new, empty one."""
        nothing = -1, -1
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, *nothing
        problem = self.coordinator_error(transactional_id)
        if problem is not None:
            return problem, *nothing
        current = self.transactions.get(transactional_id)
        if current is None or current.state == TxnState.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, *nothing
        error, retry = _v2_end_check(current, producer_id, producer_epoch)
        if error:
            return error, *nothing
        action = _v2_end_action(current.state, commit, retry)
        if action is ErrorCode.NONE:  # a retry of the end that succeeded
            return ErrorCode.NONE, *current.end_answer()
        if action is not None:
            return action, *nothing
        error, prepared = await self._end_v2(current, commit)
        if error:
            return error, *nothing
        return ErrorCode.NONE, *prepared.completed(prepared.last_update_ms).end_answer()

    async def _end_v2(self, current: TransactionMetadata, commit: bool) -> tuple[ErrorCode, TransactionMetadata]:
        """Kafka 4's v2 end from the current epoch (a fresh producer id if it ran out): (error, the Prepare state)."""
        try:
            next_producer_id = await self._new_producer_id() if current.epoch_exhausted else NO_PRODUCER_ID
        except ProducerIdsUnavailable:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, current
        if self.transactions.get(current.transactional_id) is not current:  # moved while the id was allocated
            return ErrorCode.CONCURRENT_TRANSACTIONS, current
        prepared = current.prepared_v2(commit, next_producer_id, _now_ms())
        return await self._prepare_and_complete(prepared), prepared

    async def _fence_and_abort(self, current: TransactionMetadata) -> ErrorCode:
        """Abort the open transaction under the next epoch, so its producer can write no more of it. A single node
        (transactions v2 finalized) does it as Kafka 4.4: the v2 end from the current epoch, an exhausted one
        moving the producer to a new id; a cluster as Kafka 3.9."""
        if self.owned is not None:
            return await self._end(current.fenced(), commit=False)
        return (await self._end_v2(current, commit=False))[0]

    async def _end(self, current: TransactionMetadata, commit: bool) -> ErrorCode:
        return await self._prepare_and_complete(current.prepared(commit, _now_ms()))

    async def _prepare_and_complete(self, prepared: TransactionMetadata) -> ErrorCode:
        """Write the Prepare record, then the markers and the Complete record (see `_complete`)."""
        error = await self._write(prepared)
        if error:
            return error
        if self.owned is None:
            await self._complete(self.transactions[prepared.transactional_id])  # local markers: before the answer
        else:
            self._spawn(self._complete(self.transactions[prepared.transactional_id]))
        return ErrorCode.NONE

    async def _complete(self, prepared: TransactionMetadata) -> None:
        """Markers into the partitions of the transaction still without one, then CompleteCommit/CompleteAbort.
        A partition leaves the transaction once its marker is written or the partition is gone (Kafka drops a
        deleted topic's too); any other refusal keeps the transaction prepared (requests on the id meanwhile get
        CONCURRENT_TRANSACTIONS) and `retry_unfinished` tries again, as Kafka's marker channel retries until the
        leader takes the marker: completing without it would leave data the producer was told is committed in an
        open transaction."""
        transactional_id = prepared.transactional_id
        partition = self.partition_for(transactional_id)
        load = self._loads.get(partition, 0)
        if not self.owns(partition) or self._completing.get(transactional_id) == load:
            return
        self._completing[transactional_id] = load
        try:
            commit = prepared.state == TxnState.PREPARE_COMMIT
            remaining = self._unfinished.setdefault(transactional_id, set(prepared.partitions))
            self.transactions[transactional_id] = prepared.moved(pending=prepared.state)
            outcomes = await self._write_markers(prepared, sorted(remaining), self.coordinator_epoch(partition),
                                                 commit)
            if self._loads.get(partition, 0) != load:
                return  # the partition was let go meanwhile: whoever loads it next completes the transaction
            for (topic, index), error in outcomes.items():
                if error == ErrorCode.NONE or (error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                               and self._partition_gone(topic, index)):
                    remaining.discard((topic, index))
                else:
                    log.warning("the %s marker of transactional id %s was refused by %s-%d (%s); retrying",
                                "COMMIT" if commit else "ABORT", transactional_id, topic, index,
                                getattr(error, "name", error))
            if not remaining and await self._write(prepared.completed(_now_ms())) == ErrorCode.NONE:
                self._unfinished.pop(transactional_id, None)
        finally:
            if self._completing.get(transactional_id) == load:
                del self._completing[transactional_id]

    def _partition_gone(self, topic: str, index: int) -> bool:
        """Whether a partition of the transaction was deleted (Kafka needs no marker there): a leader's
        UNKNOWN_TOPIC_OR_PARTITION may only mean it does not host the partition (stale metadata, a failed log dir)."""
        known = self.broker.known_topics()[0].get(topic)
        return known is None or index >= known.partitions

    async def _write_markers(self, prepared: TransactionMetadata, partitions: list[tuple[str, int]],
                             coordinator_epoch: int, commit: bool) -> dict[tuple[str, int], ErrorCode]:
        """Each partition's answer to its marker: written here if this broker leads it, else by its leader through
        WriteTxnMarkers (a cluster). A cluster's markers count once the partition's ISR has them."""
        member = getattr(self.broker, "cluster", None)
        outcomes: dict[tuple[str, int], ErrorCode] = {}
        local: dict[tuple[str, int], int] = {}  # partition -> the end of its marker
        remote: list[tuple[str, int]] = []
        now = _now_ms()
        for topic, index in partitions:
            leader = self.broker.replicas.get(topic, index)
            if member is not None and (leader is None or not leader.is_leader):
                remote.append((topic, index))
                continue
            try:
                outcomes[(topic, index)], end = write_marker(self.broker, topic, index, prepared.producer_id,
                                                             prepared.producer_epoch, coordinator_epoch, commit, now)
            except Exception:
                log.exception("writing a marker of transactional id %s to %s-%d", prepared.transactional_id, topic,
                              index)
                outcomes[(topic, index)] = ErrorCode.UNKNOWN_SERVER_ERROR
                continue
            if member is not None and end >= 0:
                local[(topic, index)] = end
        if local:
            waited = await self.broker.replicas.wait_for_acks(local, self.write_timeout_ms)
            outcomes.update((key, error) for key, error in waited.items() if error)
        if remote:
            outcomes.update(await member.transaction_channel.write_markers(
                remote, prepared.producer_id, prepared.producer_epoch, coordinator_epoch, commit))
        return outcomes

    def retry_unfinished(self, now_ms: int = 0) -> int:
        """Markers (or the Complete record) that could not be written yet, tried again; how many ids are left."""
        for transactional_id in list(self._unfinished):
            metadata = self.transactions.get(transactional_id)
            if metadata is None or metadata.state not in PREPARED:
                self._unfinished.pop(transactional_id, None)
            elif transactional_id not in self._completing:
                self._spawn(self._complete(metadata.moved(pending=None)))
        return len(self._unfinished)

    async def complete_prepared(self) -> None:
        """Finish what a crash left between PrepareCommit/PrepareAbort and its markers (Kafka does it at load)."""
        for metadata in list(self.transactions.values()):
            if metadata.state in PREPARED:
                await self._complete(metadata)

    # --- timeouts and expiry --------------------------------------------------------------------

    async def abort_timed_out(self, now_ms: int) -> int:
        """Kafka's abortTimedOutTransactions: an Ongoing transaction past its timeout is aborted, fenced."""
        timed_out = [m for m in self.transactions.values()
                     if m.state == TxnState.ONGOING and m.pending is None and m.start_ms + m.timeout_ms < now_ms]
        for metadata in timed_out:
            if self.transactions.get(metadata.transactional_id) is not metadata:
                continue  # moved while an earlier abort was written
            log.info("aborting the transaction of %s (producer id %d, epoch %d): it passed its timeout of %d ms",
                     metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, metadata.timeout_ms)
            await self._fence_and_abort(metadata)
        return len(timed_out)

    async def remove_expired(self, now_ms: int) -> int:
        """Kafka's transactional.id.expiration.ms: an id idle that long with no transaction open is forgotten
        (a tombstone, so compaction drops it too)."""
        expired = [m for m in self.transactions.values()
                   if m.state in COMPLETED and m.pending is None and m.last_update_ms + self.id_expiration_ms <= now_ms]
        for metadata in expired:
            if self.transactions.get(metadata.transactional_id) is metadata:
                await self._write(metadata, tombstone=True)
        return len(expired)

    async def start(self) -> None:
        """Finish prepared transactions and start the timers (inside the broker's event loop)."""
        await self.complete_prepared()
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
                done = work(_now_ms())
                if asyncio.iscoroutine(done):
                    await done
            except Exception:
                log.exception("transaction coordinator housekeeping failed")

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def close(self) -> None:
        for task in [*self._tasks, *self._background]:
            task.cancel()
        self._tasks = []
        self._background = set()

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
        longer ago than that; the pattern is a regex matched against the whole id (KIP-1152), in Kafka's dialect:
        RE2 (Kafka's RE2/J), linear in the id's length, so no pattern can stall the broker. One RE2 refuses
        raises InvalidRegex (Kafka's InvalidRegularExpression)."""
        from kbroker.coordinator.topic_regex import compile_regex

        named = {name: TxnState.from_kafka_name(name) for name in state_names}
        states = {state for state in named.values() if state is not None}
        unknown = [name for name, state in named.items() if state is None]
        now = _now_ms()
        matcher = compile_regex(id_pattern) if id_pattern else None
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


def _v2_end_check(current: TransactionMetadata, producer_id: int, producer_epoch: int) -> tuple[ErrorCode, bool]:
    """Kafka 4's checks of an EndTxn v5 against the id's state, in its order: (error, whether the request retries the
    end that bumped the epoch, or that moved the producer to a new id when the epoch ran out)."""
    retry_on_overflow = (current.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                         and current.producer_epoch == 0)
    retry_on_bump = current.producer_epoch == producer_epoch + 1
    if current.pending is not None:
        return ErrorCode.CONCURRENT_TRANSACTIONS, False
    if current.producer_id != producer_id and not retry_on_overflow:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, False
    same_epoch = producer_epoch == current.producer_epoch
    if current.state in (TxnState.ONGOING, TxnState.EMPTY):
        valid = same_epoch
    elif current.state in PREPARED:
        valid = retry_on_bump
    else:
        valid = retry_on_bump or retry_on_overflow or same_epoch
    if not valid:
        return ErrorCode.PRODUCER_FENCED, False
    return ErrorCode.NONE, retry_on_bump or retry_on_overflow


def _v2_end_action(state: TxnState, commit: bool, retry: bool) -> ErrorCode | None:
    """Kafka 4's EndTxn v5 state table: None to end the transaction now (an Ongoing one, or a new empty abort), NONE
    for a retry of the end that succeeded, else the error."""
    if state == TxnState.ONGOING:
        return None
    if state in PREPARED:
        ending = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return ErrorCode.CONCURRENT_TRANSACTIONS if state == ending else ErrorCode.INVALID_TXN_STATE
    if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        if retry:
            same_end = state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
            return ErrorCode.NONE if same_end else ErrorCode.INVALID_TXN_STATE
        return ErrorCode.INVALID_TXN_STATE if commit else None
    if state == TxnState.EMPTY:
        return ErrorCode.INVALID_TXN_STATE if commit else None
    return ErrorCode.INVALID_TXN_STATE


def _may_reinitialise(current: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's isValidProducerId for an InitProducerId naming the producer's id and epoch (KIP-360)."""
    return (current.producer_epoch == NO_PRODUCER_EPOCH or producer_id == current.producer_id
            or (producer_id == current.last_producer_id and producer_epoch >= 32766))
