"""A partition's idempotent-producer state and its `.snapshot` files (Kafka's ProducerStateManager).

Per producer id the partition keeps the current epoch and the metadata of the last five
batches written (Kafka's NUM_BATCHES_TO_RETAIN: the client has at most five requests in
flight, so a retry can only repeat one of those). An append from a client is checked batch
by batch, in order, as Kafka 3.9's ProducerAppendInfo does:

- a batch whose epoch equals the stored epoch and whose (first, last) sequence equals one
  of the five cached batches is a DUPLICATE: nothing of the request is written and the
  client is told the original offsets, error NONE;
- epoch below the stored epoch -> INVALID_PRODUCER_EPOCH (Kafka >= 2.7 on the produce path);
- a higher epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- the same epoch must continue at last sequence + 1 (Integer.MAX_VALUE wraps to 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer id with no state here (new, expired, or whose records retention removed) is
  accepted at any sequence (KIP-360, Kafka >= 2.5): UNKNOWN_PRODUCER_ID is never returned.

Transactional batches get the same checks and also open a transaction (its first offset is
kept for the snapshot); a non-transactional batch while one is open is INVALID_TXN_STATE.
A COMMIT/ABORT marker (coordinator or replication origin) may move the epoch up, stores its
coordinator epoch and closes the transaction; from the coordinator, a marker whose coordinator
epoch is below the stored one is TRANSACTION_COORDINATOR_FENCED, and one whose producer epoch is
below the stored one INVALID_PRODUCER_EPOCH (replication only logs both, as Kafka). An emptied
control batch (the cleaner removed its record) changes nothing.

Transactions and the last stable offset, as Kafka's ProducerStateManager: open transactions are
kept by first offset (`ongoing`); a completed one stays "unreplicated" until the high watermark
passes its marker, so the first unstable offset (the smallest first offset of either) keeps
READ_COMMITTED consumers below a marker until every ISR member has it. When a marker completes a
transaction, the LSO written to the `.txnindex` for an abort is the first offset of the oldest
open transaction of another producer, else the marker's offset + 1 (`commit` and `replay` return
those entries; the log writes them).

Snapshots are Kafka's files, `<20-digit offset>.snapshot` = the state of every producer
after all batches below that offset: int16 version (1), uint32 CRC-32C of everything after
it, int32 entry count, then per producer int64 producer_id, int16 epoch, int32 last_sequence,
int64 last_offset, int32 offset_delta, int64 timestamp, int32 coordinator_epoch, int64
current_txn_first_offset. Like Kafka's, a snapshot keeps only each producer's last batch, so
after a restart only a retry of that batch is recognised as a duplicate.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import crc32c

from kbroker.log.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kbroker.log.transaction_index import AbortedTxn
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_OVERHEAD,
    BatchHeader,
    iter_records,
    parse_control_key,
    parse_end_txn_value,
)

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "PRODUCER_ID_EXPIRATION_MS",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "EndTxnMarker",
    "ProducerAppend",
    "ProducerStateEntry",
    "ProducerStateManager",
    "decode_snapshot",
    "encode_snapshot",
    "parse_snapshot_name",
    "read_end_txn_marker",
    "snapshot_name",
]

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_INT32_MAX = 2**31 - 1
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers the entry count and the entries
_ENTRY = struct.Struct(">qhiqiqiq")  # see the module docstring for the field names

log = logging.getLogger(__name__)


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` wrapping past Integer.MAX_VALUE to 0, as Kafka's batches do."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """The inverse of `increment_sequence`."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One written batch of a producer, enough to recognise its retry and answer it."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def _batches() -> deque[BatchMetadata]:
    return deque(maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerStateEntry:
    """What the partition knows of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int = -1
    batches: deque[BatchMetadata] = field(default_factory=_batches)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        """A copy to stage a request's changes on, so a rejected request changes nothing."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the old epoch's batches: their sequences no longer matter."""
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with this epoch and exact sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None


class EndTxnMarker(NamedTuple):
    """What a COMMIT/ABORT control record says (Kafka's EndTransactionMarker)."""

    aborted: bool
    coordinator_epoch: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its producer, first offset, the marker's offset, and how it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerAppend(NamedTuple):
    """The outcome of checking one request: staged entries to commit, or the duplicate found; and, in
    batch order, the transactions it starts (first offset, producer id) and those its markers end."""

    updates: dict[int, ProducerStateEntry]
    duplicate: BatchMetadata | None = None
    started: Sequence[tuple[int, int]] = ()
    completed: Sequence[CompletedTxn] = ()


_NOTHING = ProducerAppend({})


def _last_sequence(header: BatchHeader) -> int:
    return increment_sequence(header.base_sequence, header.last_offset_delta)


def read_end_txn_marker(batch: bytes | bytearray | memoryview, position: int = 0) -> EndTxnMarker | None:
    """The marker of the control batch at `position`, or None when the cleaner emptied the batch or
    its record is another control type. Raises DecodeError (CorruptRecordError) for a malformed one."""
    record = next(iter(iter_records(batch, position)), None)
    if record is None:
        return None
    control_type = parse_control_key(record.key)
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    return EndTxnMarker(control_type == CONTROL_ABORT, parse_end_txn_value(record.value))


# --- snapshot files -----------------------------------------------------------------------


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> int | None:
    """The offset of a `<20 digits>.snapshot` file name, else None."""
    match = _SNAPSHOT_NAME.match(name)
    return int(match.group(1)) if match else None


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's snapshot bytes for these producers (sorted by id, so the bytes are stable)."""
    rows = sorted(entries, key=lambda e: e.producer_id)
    out = bytearray(_HEAD.size + _ENTRY.size * len(rows))
    position = _HEAD.size
    for entry in rows:
        _ENTRY.pack_into(
            out,
            position,
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
        position += _ENTRY.size
    struct.pack_into(">i", out, _CRC_START, len(rows))
    _HEAD.pack_into(out, 0, SNAPSHOT_VERSION, crc32c.crc32c(memoryview(out)[_CRC_START:]), len(rows))
    return bytes(out)


def decode_snapshot(data: bytes | bytearray | memoryview) -> list[ProducerStateEntry]:
    """Producers from snapshot bytes; CorruptSnapshotError unless version, size and CRC agree."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    return [_entry_from_row(*row) for row in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size :])]


def _entry_from_row(
    producer_id: int,
    epoch: int,
    last_seq: int,
    last_offset: int,
    offset_delta: int,
    timestamp: int,
    coordinator_epoch: int,
    txn_first_offset: int,
) -> ProducerStateEntry:
    entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch, timestamp, txn_first_offset)
    if last_offset >= 0:  # -1: the producer has no data batch (only a marker)
        entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
    return entry


def _write_snapshot(path: Path, data: bytes, sync: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


# --- the manager ----------------------------------------------------------------------------


class ProducerStateManager:
    """The producer table of one partition, its end offset and its snapshot files.

    `map_end_offset` is the log offset the table is up to date with; the owning log moves it
    on every append (`commit`) and replays batch headers (`replay`) to catch it up after
    loading a snapshot. Not thread-safe, like the log that owns it.
    """

    def __init__(self, directory: Path, snapshot_offsets: Iterable[int] = (),
                 expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> None:
        """`snapshot_offsets`: the `.snapshot` files already in `directory` (from its scan);
        `expiration_ms`: producer.id.expiration.ms."""
        self.dir = Path(directory)
        self.expiration_ms = expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # open transactions, first offset -> producer id; kept in ascending first offset (a transaction
        # always starts above every open one), so the first key is the oldest
        self._ongoing: dict[int, int] = {}
        # completed transactions whose marker the high watermark has not passed: first offset -> (producer
        # id, marker offset)
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self._snapshots: list[int] = sorted(set(snapshot_offsets))
        self._map_end_offset = 0
        self._last_snap_offset = 0

    # --- reading --------------------------------------------------------------------------

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Active producers by id (read-only): what DescribeProducers reports."""
        return MappingProxyType(self._producers)

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def snapshot_offsets(self) -> tuple[int, ...]:
        return tuple(self._snapshots)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    # --- transactions -----------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """Kafka's firstUnstableOffset: the first offset of the oldest transaction that is open or whose
        marker the high watermark has not passed yet; None when there is none."""
        if not self._unreplicated:
            return next(iter(self._ongoing), None)
        first = min(self._unreplicated)
        if self._ongoing:
            return min(first, next(iter(self._ongoing)))
        return first

    @property
    def ongoing_transactions(self) -> Mapping[int, int]:
        """Open transactions, first offset -> producer id, oldest first (read-only)."""
        return MappingProxyType(self._ongoing)

    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """The LSO written with an aborted transaction (Kafka's lastStableOffset(completedTxn)): the first
        offset of the oldest open transaction of another producer, else the marker's offset + 1."""
        for first_offset, producer_id in self._ongoing.items():
            if producer_id != txn.producer_id:
                return first_offset
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """The transaction is no longer open; it holds the LSO back until the high watermark passes it."""
        self._ongoing.pop(txn.first_offset, None)
        self._unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        if self._unreplicated:
            self._remove_unreplicated_below(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Completed transactions whose marker went with the log's start are no longer unstable."""
        if self._unreplicated:
            self._remove_unreplicated_below(log_start_offset)

    def _remove_unreplicated_below(self, offset: int) -> None:
        self._unreplicated = {first: txn for first, txn in self._unreplicated.items() if txn[1] >= offset}

    def _complete_all(self, completed: Sequence[CompletedTxn]) -> list[AbortedTxn]:
        """Complete the transactions in order, returning the `.txnindex` entries of the aborted ones, each
        with the LSO of the moment just before it completed."""
        aborted = []
        for txn in completed:
            if txn.aborted:
                aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                          self.last_stable_offset_of(txn)))
            self.complete_txn(txn)
        return aborted

    # --- the produce path -------------------------------------------------------------------

    def prepare(
        self,
        headers: Sequence[BatchHeader],
        first_offset: int,
        append_time_ms: int | None = None,
        *,
        client: bool = True,
        replication: bool = False,
        buf: bytes | bytearray | memoryview | None = None,
    ) -> ProducerAppend:
        """Check a request's batches (to be written from `first_offset`) without changing anything.

        Returns the staged entries for `commit`, or the duplicate batch found (client
        origin only). Raises InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError or TransactionCoordinatorFencedError. `append_time_ms` is set for
        LogAppendTime topics, whose batches get that timestamp. `replication`: a follower's
        append, whose epochs are logged rather than refused. `buf` holds the batches one after
        another (what `headers` were read from): a control batch's marker is read from it, and
        without it a control batch counts as emptied.
        """
        updates: dict[int, ProducerStateEntry] | None = None
        started: list[tuple[int, int]] | None = None
        completed: list[CompletedTxn] | None = None
        offset = first_offset
        position = 0
        for header in headers:
            batch_first, batch_position = offset, position
            offset += header.last_offset_delta + 1
            position += header.batch_length + LOG_OVERHEAD
            if header.producer_id < 0:
                continue
            current = self._producers.get(header.producer_id)
            if client and current is not None and not header.is_control:
                duplicate = current.find_duplicate(
                    header.producer_epoch, header.base_sequence, _last_sequence(header)
                )
                if duplicate is not None:
                    return ProducerAppend({}, duplicate)
            if updates is None:
                updates = {}
            staged = updates.get(header.producer_id)
            if staged is None:
                staged = current.copy() if current is not None else ProducerStateEntry(header.producer_id)
                updates[header.producer_id] = staged
            timestamp = header.max_timestamp if append_time_ms is None else append_time_ms
            if header.is_control:
                marker = read_end_txn_marker(buf, batch_position) if buf is not None else None
                if marker is None:
                    continue  # an emptied control batch: Kafka changes nothing for it
                done = _end_transaction(staged, header, marker, batch_first, timestamp, replication)
                if done is not None:
                    completed = [] if completed is None else completed
                    completed.append(done)
                continue
            _check_epoch(staged, header, batch_first, replication)
            if client:
                _check_sequence(staged, current, header, batch_first)
            if _stage_data_batch(staged, header, batch_first, timestamp):
                started = [] if started is None else started
                started.append((batch_first, header.producer_id))
        if updates is None:
            return _NOTHING
        return ProducerAppend(updates, None, started or (), completed or ())

    def commit(self, append: ProducerAppend, end_offset: int) -> Sequence[AbortedTxn]:
        """Make a written request's staged entries current; the table now reaches `end_offset`. Returns
        the `.txnindex` entries of the transactions its ABORT markers ended, for the log to write (after
        the request's transactions started, then in marker order, as Kafka's append)."""
        self._map_end_offset = end_offset
        if not append.updates:
            return ()
        self._producers.update(append.updates)
        for first_offset, producer_id in append.started:
            self._ongoing[first_offset] = producer_id
        return self._complete_all(append.completed) if append.completed else ()

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def replay(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> AbortedTxn | None:
        """Apply one batch already in the log (loading, recovery), without checks, as Kafka's
        replication origin does; `marker` is a control batch's (None: an emptied one).
        `header.base_offset` must be the batch's real offset. Returns the `.txnindex` entry when
        the batch is an ABORT marker ending a transaction (recovery writes it)."""
        if header.producer_id < 0:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        if header.is_control:
            if marker is None:
                return None
            done = _end_transaction(entry, header, marker, header.base_offset, header.max_timestamp, True)
            aborted = self._complete_all((done,)) if done is not None else ()
            return aborted[0] if aborted else None
        if _stage_data_batch(entry, header, header.base_offset, header.max_timestamp, check_txn=False):
            self._ongoing[header.base_offset] = header.producer_id
        return None

    # --- expiry -------------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int | None = None) -> int:
        """Forget producers idle for `expiration_ms` (default: this manager's) with no open
        transaction; returns how many."""
        if expiration_ms is None:
            expiration_ms = self.expiration_ms
        expired = [pid for pid, e in self._producers.items() if _is_expired(e, now_ms, expiration_ms)]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    # --- snapshots ------------------------------------------------------------------------

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write a snapshot at `map_end_offset`, unless one is there already. `sync=False`
        leaves the fsync to the caller (a roll: Kafka's background "flush-log" task does it)."""
        if self._map_end_offset <= self._last_snap_offset:
            return None
        offset = self._map_end_offset
        path = self.dir / snapshot_name(offset)
        _write_snapshot(path, encode_snapshot(self._producers.values()), sync)
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        self._last_snap_offset = offset
        return path

    def delete_snapshot(self, offset: int) -> None:
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        (self.dir / snapshot_name(offset)).unlink(missing_ok=True)

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Kafka's rule on load: delete snapshots without a segment at their offset, except
        the largest such one when it lies above every segment (the clean-shutdown snapshot)."""
        bases = set(segment_bases)
        strays = [offset for offset in self._snapshots if offset not in bases]
        keep = strays[-1] if strays and bases and strays[-1] > max(bases) else None
        for offset in strays:
            if offset != keep:
                self.delete_snapshot(offset)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """After truncation or on load: drop snapshots above the log end and, unless the table
        already ends there, reload it from the latest snapshot (the caller replays the rest)."""
        for offset in [o for o in self._snapshots if o > log_end_offset]:
            self.delete_snapshot(offset)
        if log_end_offset == self._map_end_offset:
            return
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()  # the new end is at or below the high watermark (Kafka's reasoning)
        self._load_latest_snapshot(log_start_offset, now_ms)

    def _load_latest_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        """The newest readable snapshot becomes the table; corrupt ones are deleted on the way."""
        while self._snapshots:
            offset = self._snapshots[-1]
            try:
                entries = decode_snapshot((self.dir / snapshot_name(offset)).read_bytes())
            except (CorruptSnapshotError, FileNotFoundError):
                self.delete_snapshot(offset)
                continue
            self._producers = {
                e.producer_id: e for e in entries if not _is_expired(e, now_ms, self.expiration_ms)
            }
            self._ongoing = dict(sorted((e.current_txn_first_offset, e.producer_id)
                                        for e in self._producers.values() if e.current_txn_first_offset >= 0))
            self._map_end_offset = self._last_snap_offset = offset
            return
        self._map_end_offset = self._last_snap_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """An emptied log: no producers, no transactions, no snapshots, the table starts at `offset`."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        for snapshot in list(self._snapshots):
            self.delete_snapshot(snapshot)
        self._last_snap_offset = 0
        self._map_end_offset = offset


def _is_expired(entry: ProducerStateEntry, now_ms: int, expiration_ms: int) -> bool:
    return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms


def _check_sequence(
    staged: ProducerStateEntry, current: ProducerStateEntry | None, header: BatchHeader, offset: int
) -> None:
    """Kafka's ProducerAppendInfo.checkSequence for a client's data batch."""
    first_seq = header.base_sequence
    where = f"producer {header.producer_id} at offset {offset}"
    if header.producer_epoch != staged.producer_epoch:
        if first_seq != 0 and staged.producer_epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceError(
                f"new epoch {header.producer_epoch} of {where} starts at sequence {first_seq}, not 0 "
                f"(current epoch {staged.producer_epoch})"
            )
        return
    known = current is not None and current.producer_epoch != NO_PRODUCER_EPOCH
    if known and not in_sequence(staged.last_seq, first_seq):
        raise OutOfOrderSequenceError(
            f"out of order sequence number for {where}: {first_seq} (incoming), "
            f"{staged.last_seq} (current end sequence)"
        )


def _check_epoch(entry: ProducerStateEntry, header: BatchHeader, offset: int, replication: bool) -> None:
    """Kafka's checkProducerEpoch: a lower epoch is refused, except from replication (logged)."""
    if header.producer_epoch < entry.producer_epoch:
        message = (f"epoch {header.producer_epoch} of producer {header.producer_id} at offset {offset} "
                   f"is below the last seen epoch {entry.producer_epoch}")
        if not replication:
            raise InvalidProducerEpochError(message)
        log.warning("%s (replicated as the leader wrote it)", message)


def _stage_data_batch(
    entry: ProducerStateEntry, header: BatchHeader, first_offset: int, timestamp: int, *, check_txn: bool = True
) -> bool:
    """Record a data batch in `entry`; True when it opens a transaction (the first transactional one)."""
    delta = header.last_offset_delta
    entry.add_batch(header.producer_epoch, _last_sequence(header), first_offset + delta, delta, timestamp)
    in_txn = entry.current_txn_first_offset >= 0
    if in_txn and not header.is_transactional and check_txn:
        raise InvalidTxnStateError(
            f"non-transactional batch from producer {header.producer_id} at offset {first_offset} "
            f"while its transaction from offset {entry.current_txn_first_offset} is open"
        )
    if not in_txn and header.is_transactional:
        entry.current_txn_first_offset = first_offset
        return True
    return False


def _end_transaction(
    entry: ProducerStateEntry, header: BatchHeader, marker: EndTxnMarker, offset: int, timestamp: int,
    replication: bool,
) -> CompletedTxn | None:
    """A COMMIT/ABORT marker at `offset` (Kafka's appendEndTxnMarker): epochs checked, the coordinator
    epoch stored, the epoch may move up, the open transaction ends. Returns it, or None when the
    producer had none open (a marker without data changes no LSO and no index)."""
    _check_epoch(entry, header, offset, replication)
    if entry.coordinator_epoch > marker.coordinator_epoch:
        message = (f"coordinator epoch {marker.coordinator_epoch} of the marker of producer {header.producer_id} "
                   f"at offset {offset} is below the current one {entry.coordinator_epoch} (zombie coordinator)")
        if not replication:
            raise TransactionCoordinatorFencedError(message)
        log.info("%s (replicated as the leader wrote it)", message)
    first = entry.current_txn_first_offset
    completed = CompletedTxn(header.producer_id, first, offset, marker.aborted) if first >= 0 else None
    entry.maybe_update_epoch(header.producer_epoch)
    entry.current_txn_first_offset = -1
    entry.coordinator_epoch = marker.coordinator_epoch
    entry.last_timestamp = timestamp
    return completed
