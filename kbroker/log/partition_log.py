"""A partition's log: the `<topic>-<partition>` directory, its segments and its offsets.

Produce and fetch stay at batch level: `append` validates each batch (CRC-32C in C) and
writes it as a restamped copy of its header followed by its records where they lie, all
with one `writev`; `read` returns a FileSlice for sendfile. One event loop owns a log; the only other thread is the log
cleaner (kbroker.log.cleaner), so every public method takes `lock` (an uncontended RLock)
and the cleaner holds it only to look at the segments and to swap cleaned ones in.

Offsets kept here, as in Kafka's UnifiedLog: log start offset (first readable),
log end offset (next to assign), high watermark (set by the caller; LEO on a single
node), recovery point (everything below it is fsynced).

Idempotent producers: a ProducerStateManager (kbroker.log.producer_state) checks every
produced batch's producer id, epoch and sequence before anything is written, answers a
retried batch with its original offsets instead of writing it twice, and is snapshotted to
`<offset>.snapshot` at each roll and at clean close. Opening the log loads the latest
snapshot at or below the log end and replays only the batch headers after it.

Transactions (kbroker.log.transaction_index): an ABORT marker, appended by the coordinator,
replicated or found again by recovery, adds its transaction to the active segment's `.txnindex`;
READ_COMMITTED reads stop at the last stable offset and learn the aborted transactions of their
range from those files (`read_with_aborted_transactions`, `collect_aborted_transactions`).
"""

from __future__ import annotations

import bisect
import functools
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from kbroker.log.checkpoints import fsync_dir
from kbroker.log.config import LogConfig
from kbroker.log.errors import (
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)
from kbroker.log.file_slice import FileSlice
from kbroker.log.flusher import LogFlusher, PendingSync
from kbroker.log.leader_epoch_cache import LeaderEpochCache
from kbroker.log.loader import load_segments, replay_producer_state, segment_file_names
from kbroker.log.producer_state import BatchMetadata, ProducerStateManager
from kbroker.log.record_validation import RecordRules
from kbroker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from kbroker.log.transaction_index import AbortedTxn
from kbroker.logs import partition_fields
from wire.exceptions import RecordLayoutError
from wire.records import (
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    check_record_layout,
    max_record_timestamp_delta,
    records_section,
    restamped_header,
    validate_batch,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "LogConfig",
    "OffsetAndTimestamp",
    "PartitionLog",
]

NO_TIMESTAMP = -1
# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_MAGIC_OFFSET = 16

log = logging.getLogger(__name__)


class AppendInfo(NamedTuple):
    """What a produce response needs to know about an append."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    offset_of_max_timestamp: int  # last offset of the first batch holding max_timestamp
    log_start_offset: int
    valid_bytes: int
    duplicate: bool = False  # a retried idempotent batch: nothing written, offsets are the original's


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


def _records(buf: memoryview, position: int, header: BatchHeader) -> memoryview | bytes:
    """A batch's records section: where it lies when uncompressed (no copy), else decompressed."""
    if header.codec == 0:
        return buf[position + HEADER_SIZE : position + header.size]
    return records_section(buf, position)[1]


def _records_max_timestamp(buf: memoryview, position: int, header: BatchHeader) -> int:
    """The batch's largest record timestamp, from its records; RecordLayoutError when they disagree
    with its header."""
    if header.record_count <= 0:
        return header.max_timestamp
    claimed = header.max_timestamp - header.base_timestamp  # checked, not trusted
    return header.base_timestamp + max_record_timestamp_delta(_records(buf, position, header), header.record_count,
                                                              claimed)


def _check_records_layout(buf: memoryview, position: int, header: BatchHeader) -> None:
    """RecordLayoutError when the batch's records disagree with its header; for LogAppendTime topics,
    which need no record timestamps."""
    if header.record_count > 0:
        check_record_layout(_records(buf, position, header), header.record_count)


def _check_client_batch(header: BatchHeader) -> None:
    """Kafka's LogValidator rules for batches from producers (AppendOrigin.CLIENT)."""
    if header.record_count <= 0:
        raise InvalidRecordError(f"invalid record count {header.record_count}")
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecordError(
            f"lastOffsetDelta {header.last_offset_delta} disagrees with record count {header.record_count}"
        )
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(f"invalid sequence number {header.base_sequence}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _locked(method: Callable) -> Callable:
    """Run the method holding the log's lock (see the module docstring)."""

    @functools.wraps(method)
    def locked(self: PartitionLog, *args: object, **kwargs: object) -> object:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


class LastRecord(NamedTuple):
    """What compaction must keep of an active producer (Kafka's LastRecord): the batch ending at
    `last_data_offset` holds its last sequence; without data, its last marker holds the epoch."""

    last_data_offset: int | None
    producer_epoch: int


class PartitionLog:
    """One partition's segments and offsets; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = False,
        now_ms: int | None = None,
        flusher: LogFlusher | None = None,
    ) -> None:
        """Open the directory (creating it if needed), recovering from `recovery_point` unless
        `had_clean_shutdown` (see kbroker.log.loader for the rules). `flusher` runs the fsync
        that follows a roll in the background (the LogManager's); without one, roll does it."""
        now = _now_ms() if now_ms is None else now_ms
        self.dir = Path(directory)
        self.config = config or LogConfig()
        self._record_rules = RecordRules.of(self.dir.name, self.config)
        self.lock = threading.RLock()
        self._flusher = flusher
        self._truncations = 0  # bumped by every truncation, so the cleaner can tell it raced one
        self._cleaner_truncation_point: int | None = None
        loaded = load_segments(
            self.dir,
            self.config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            now_ms=now,
        )
        self._segments: list[LogSegment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._leo = loaded.log_end_offset
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self.truncated_on_load = loaded.truncated_bytes
        self._high_watermark = min(max(self._log_start_offset if high_watermark is None else high_watermark,
                                       self._log_start_offset), self._leo)
        self._last_flush_ms = now
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._bound_cache: tuple[int, int, int] | None = None  # (offset bound, segment base, position)
        self._dir_dirty = False
        self._closed = False
        self._producers = ProducerStateManager(self.dir, loaded.snapshot_offsets,
                                               self.config.producer_id_expiration_ms)
        self._producers.remove_stray_snapshots(self._bases)
        self._rebuild_producer_state(now, reload_from_clean_shutdown=had_clean_shutdown)
        self._producers.on_high_watermark_updated(self._high_watermark)  # as Kafka's first HW update
        self._epochs = LeaderEpochCache.load(  # the batches are read only if the file must be rebuilt
            self.dir, self._log_start_offset, self._leo,
            lambda: (header for segment in self._segments for _, header in segment.batch_headers()))

    # --- offsets ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        """Bytes in all segments' `.log` files."""
        return sum(s.size for s in self._segments)

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent producers seen on this partition (DescribeProducers reads it)."""
        return self._producers

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start offset, log end offset]; returns the value kept.
        Completed transactions whose markers it passes stop holding the LSO back."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._leo)
        self._producers.on_high_watermark_updated(self._high_watermark)
        return self._high_watermark

    # --- produce ------------------------------------------------------------------------

    @_locked
    def append(
        self,
        records: bytes | bytearray | memoryview,
        now_ms: int | None = None,
        *,
        leader_epoch: int | None = None,
        coordinator: bool = False,
    ) -> AppendInfo:
        """The produce path: validate, assign offsets, stamp times, write, roll and flush.

        Raises CorruptRecordError, UnsupportedMessageFormatError (magic 0/1),
        RecordTooLargeError, RecordBatchTooLargeError, InvalidRecordError,
        RecordValidationError (records breaking Kafka's per-record rules), or the producer
        state's InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError,
        TransactionCoordinatorFencedError (a marker from an older coordinator epoch);
        nothing is written unless every batch passes. An ABORT marker adds its transaction to
        the active segment's `.txnindex`. A retried idempotent batch writes
        nothing and returns the original offsets with `duplicate=True`. `coordinator=True`
        is Kafka's COORDINATOR origin (group/transaction coordinators): control batches
        allowed, client-only rules (sequences, duplicates) skipped. `records` is not copied:
        each batch is written as a restamped copy of its header followed by its records.
        """
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        view = memoryview(records)
        try:
            headers = self._validate_batches(view, coordinator)
            if len(view) > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"{len(view)} bytes of records exceed segment.bytes={self.config.segment_bytes}"
                )
            pieces, info = self._stamp(view, headers, now, leader_epoch, trust_max_timestamp=coordinator)
        except RecordLayoutError as error:  # an intact batch whose records disagree with it: Kafka's INVALID_RECORD
            raise InvalidRecordError(str(error)) from None
        producers = self._producers.prepare(
            headers, self._leo, now if self.config.log_append_time else None, client=not coordinator, buf=view
        )
        if producers.duplicate is not None:
            return self._duplicate_info(producers.duplicate)
        if leader_epoch != self._epochs.latest_epoch:  # a new epoch starts here (Kafka writes it first)
            self._epochs.assign_appended(leader_epoch, headers, info.first_offset)
        segment = self._maybe_roll(len(view), info, now)
        segment.append(pieces, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp)
        self._leo = info.last_offset + 1
        aborted = self._producers.commit(producers, self._leo)
        if aborted:
            self._add_aborted(segment, aborted)
        self._maybe_flush(now)
        return info

    @_locked
    def append_as_follower(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> AppendInfo | None:
        """Replication: write batches exactly as another log holds them (offsets, leader epochs and
        timestamps kept), as Kafka's appendAsFollower; markers end transactions as on the leader, but
        older epochs are logged, not refused (REPLICATION origin). A trailing partial batch (a fetch cut at its byte
        limit) is left for the next fetch; None when no whole batch came. Raises CorruptRecordError for a
        damaged batch and ValueError for one starting below the log end (nothing is written then)."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        view = memoryview(records)
        headers: list[BatchHeader] = []
        position = 0
        while len(view) - position >= HEADER_SIZE:
            length = int.from_bytes(view[position + 8:position + LOG_OVERHEAD], "big", signed=True)
            if len(view) - position < length + LOG_OVERHEAD:
                break  # the partial batch at the end of a size-capped fetch
            headers.append(validate_batch(view, position))
            position += headers[-1].size
        if not headers:
            return None
        whole = view[:position]
        first, last = headers[0].base_offset, headers[-1].base_offset + headers[-1].last_offset_delta
        if first < self._leo:
            raise ValueError(f"follower append at offset {first} is below the log end offset {self._leo}")
        newest = max(headers, key=lambda h: h.max_timestamp)
        info = AppendInfo(first, last, NO_TIMESTAMP, newest.max_timestamp, sum(h.record_count for h in headers),
                          newest.base_offset + newest.last_offset_delta, self._log_start_offset, position)
        producers = self._producers.prepare(headers, first, None, client=False, replication=True, buf=whole)
        self._epochs.assign_appended(None, headers, first)
        segment = self._maybe_roll(position, info, now)
        segment.append(whole, last, info.max_timestamp, info.offset_of_max_timestamp)
        self._leo = last + 1
        aborted = self._producers.commit(producers, self._leo)
        if aborted:
            self._add_aborted(segment, aborted)
        self._maybe_flush(now)
        return info

    def _add_aborted(self, segment: LogSegment, aborted: Sequence[AbortedTxn]) -> None:
        """Write aborted transactions to the `.txnindex` of the segment their markers went to."""
        for txn in aborted:
            if segment.txn_index.append(txn):
                self._dir_dirty = True  # a new file: the next flush syncs the directory too

    def _duplicate_info(self, original: BatchMetadata) -> AppendInfo:
        """Kafka's answer to a retried batch: its original offsets, and its timestamp as the
        log append time (UnifiedLog sets logAppendTime = the cached batch's timestamp)."""
        return AppendInfo(
            first_offset=original.first_offset,
            last_offset=original.last_offset,
            log_append_time=original.timestamp,
            max_timestamp=original.timestamp,
            record_count=0,
            offset_of_max_timestamp=original.last_offset,
            log_start_offset=self._log_start_offset,
            valid_bytes=0,
            duplicate=True,
        )

    def _validate_batches(self, buf: memoryview, coordinator: bool) -> list[BatchHeader]:
        """Headers of the batches in `buf`, each checked (structure, CRC, Kafka's client rules)."""
        if not buf:
            raise InvalidRecordError("produce request carries no record batch")
        headers: list[BatchHeader] = []
        position = 0
        while position < len(buf):
            if len(buf) - position > _MAGIC_OFFSET and buf[position + _MAGIC_OFFSET] in (0, 1):
                raise UnsupportedMessageFormatError(
                    f"message format v{buf[position + _MAGIC_OFFSET]} is not supported; use magic 2 batches"
                )
            header = validate_batch(buf, position)
            size = header.batch_length + LOG_OVERHEAD
            if size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
                )
            if not coordinator:
                _check_client_batch(header)
            headers.append(header)
            position += size
        return headers

    def _stamp(
        self, view: memoryview, headers: list[BatchHeader], now_ms: int, leader_epoch: int | None,
        trust_max_timestamp: bool = False,
    ) -> tuple[list[bytes | bytearray | memoryview], AppendInfo]:
        """Each batch as (restamped header, records): offsets from the log end, the leader epoch,
        and maxTimestamp as Kafka's LogValidator sets it, from the records whatever the producer
        wrote (kafkajs, for one, can understate it), or the append time on LogAppendTime topics.
        Reading the records is also their layout check (RecordLayoutError); on LogAppendTime
        topics they are walked for that alone, and where the records are read, Kafka's per-record rules are checked
        (RecordRules: keys, timestamps). `trust_max_timestamp`: the batches come from kbroker's own
        coordinators, which build their headers from the records, so the records need not be
        read again."""
        append_time = self.config.log_append_time
        timestamp_type = LOG_APPEND_TIME if append_time else CREATE_TIME
        next_offset = self._leo
        position = record_count = 0
        max_timestamp = offset_of_max = NO_TIMESTAMP
        pieces: list[bytes | bytearray | memoryview] = []
        for header in headers:
            if trust_max_timestamp:
                batch_max = now_ms if append_time else header.max_timestamp
            else:
                if append_time:  # the broker's clock stamps the batch: its records are walked for their layout only
                    _check_records_layout(view, position, header)
                    records_max = now_ms
                else:
                    records_max = _records_max_timestamp(view, position, header)  # also checks the records' layout
                self._record_rules.check(view, position, header, records_max, now_ms)
                batch_max = now_ms if append_time else records_max
            end = position + header.size
            pieces.append(restamped_header(view, position, header, next_offset, leader_epoch, batch_max,
                                           timestamp_type))
            if end > position + HEADER_SIZE:
                pieces.append(view[position + HEADER_SIZE : end])
            next_offset += header.last_offset_delta + 1
            if batch_max > max_timestamp:
                max_timestamp, offset_of_max = batch_max, next_offset - 1
            record_count += header.record_count
            position = end
        return pieces, AppendInfo(  # positional: the produce path builds one per partition
            self._leo,  # first_offset
            next_offset - 1,  # last_offset
            now_ms if append_time else NO_TIMESTAMP,  # log_append_time
            max_timestamp,
            record_count,
            offset_of_max,  # offset_of_max_timestamp
            self._log_start_offset,
            len(view),  # valid_bytes
        )

    # --- rolling and flushing -----------------------------------------------------------

    def _maybe_roll(self, messages_size: int, info: AppendInfo, now_ms: int) -> LogSegment:
        segment = self.active_segment
        if segment.should_roll(
            segment_bytes=self.config.segment_bytes,
            segment_ms=self.config.segment_ms,
            messages_size=messages_size,
            max_timestamp_in_messages=info.max_timestamp,
            max_offset_in_messages=info.last_offset,
            now_ms=now_ms,
        ):
            return self.roll(now_ms)
        return segment

    @_locked
    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset. As Kafka's roll, the segments
        before it are fsynced by a one-off background task (`flush_segments_below`), not here:
        the recovery point moves up to the new base offset once that task is done."""
        self._check_open()
        started = time.perf_counter()
        now = _now_ms() if now_ms is None else now_ms
        active = self.active_segment
        if active.base_offset == self._leo:
            return active  # empty active segment: nothing to roll
        active.on_become_inactive()
        for name in segment_file_names(self._leo):
            (self.dir / name).unlink(missing_ok=True)  # stale files from an earlier life of this offset
        segment = self._new_segment(self._leo, now)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        # a snapshot at the new base lets recovery start from this segment (Kafka's roll)
        self._producers.update_map_end_offset(segment.base_offset)
        snapshot = self._producers.take_snapshot(sync=False)  # fsynced by the background flush
        self._schedule_flush(segment.base_offset, snapshot, now)
        log.info("[LocalLog %s] Rolled new log segment at offset %d in %d ms.", self._log_ident,
                 segment.base_offset, (time.perf_counter() - started) * 1000,
                 extra={**partition_fields(self.dir), "offset": segment.base_offset})
        return segment

    @property
    def _log_ident(self) -> str:
        """"partition=t-0, dir=/var/kafka-logs", as Kafka's log lines name a partition's log."""
        return f"partition={self.dir.name}, dir={self.dir.parent}"

    def _schedule_flush(self, offset: int, snapshot: Path | None, now_ms: int) -> None:
        """Kafka's scheduleOnce("flush-log"); a log without a flusher (or whose flusher has shut
        down) flushes right away."""
        task = functools.partial(self.flush_segments_below, offset, snapshot=snapshot, now_ms=now_ms)
        action = f"flushing log {self.dir.name} up to offset {offset}"
        if self._flusher is None or not self._flusher.schedule(task, log_dir=self.dir.parent, action=action):
            task()

    def flush_segments_below(self, offset: int, *, snapshot: Path | None = None, now_ms: int | None = None) -> bool:
        """Kafka's flushUptoOffsetExclusive, run by the background flusher after a roll.

        Descriptors of the segments below `offset` not yet flushed, of the roll's producer
        snapshot and of the directory (if files came or went) are taken under `lock`; they are
        fsynced without it, so produce and fetch go on meanwhile; then, under the lock again,
        the recovery point moves forward to `offset`, unless the log was closed, truncated, or
        a segment still in it could not be synced. Returns whether it moved; raises the OSError
        of a failed sync of anything still in the open log (its log dir is then in trouble).
        """
        now = _now_ms() if now_ms is None else now_ms
        with self.lock:
            if self._closed or offset <= self._recovery_point:
                return False
            sync, truncations = self._pending_sync_below(offset, snapshot), self._truncations
        started = time.perf_counter()
        try:
            sync.run()
        finally:
            sync.close()
        self._observe_flush(time.perf_counter() - started)
        with self.lock:
            return self._mark_flushed(offset, sync, truncations, now)

    def _pending_sync_below(self, offset: int, snapshot: Path | None) -> PendingSync:
        """Under the lock: open what `flush_segments_below` syncs. Segments below `offset` are
        inactive, so their indexes were trimmed, hence written, and only need an fdatasync."""
        sync = PendingSync()
        first = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
        for segment in self._segments[first:]:
            if segment.base_offset >= offset:
                break
            try:
                sync.add_fd(segment.duplicate_fd(), segment)
            except (OSError, ValueError) as exc:
                sync.fail(segment, exc)
                continue
            for index in (segment.offset_index, segment.time_index):
                sync.add_path(index.path, segment, data_only=True)
            if segment.txn_index.exists:
                sync.add_path(segment.txn_index.path, segment, data_only=True)
        if snapshot is not None:
            sync.add_path(snapshot, snapshot, missing_ok=True)  # deleted meanwhile: nothing to keep
        if self._dir_dirty:  # left set: an explicit flush meanwhile must not skip the directory
            sync.add_path(self.dir, self.dir)
        return sync

    def _mark_flushed(self, offset: int, sync: PendingSync, truncations: int, now_ms: int) -> bool:
        """Under the lock, after the sync: Kafka's markFlushed, the recovery point only forward."""
        if self._closed or truncations != self._truncations:
            return False  # closed: its own flush decided; truncated: what was synced may be gone
        live = {id(s) for s in self._segments}
        # a snapshot counts too: an fsync that fails on a file still there is the disk's failure
        lost = [(owner, exc) for owner, exc in sync.failures
                if owner is self.dir or id(owner) in live or isinstance(owner, Path)]
        for _, exc in lost:
            if isinstance(exc, OSError):
                raise exc  # the recovery point stays; the caller takes the log dir offline
        if lost:
            log.error("background flush of %s below offset %d failed, recovery point kept at %d: %s",
                      self.dir.name, offset, self._recovery_point, "; ".join(f"{o}: {e}" for o, e in lost))
            return False
        point = min(offset, self._leo)
        if point <= self._recovery_point:
            return False
        self._recovery_point = point
        self._last_flush_ms = max(self._last_flush_ms, now_ms)
        return True

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        self._dir_dirty = True
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.max_index_size,
            now_ms=now_ms,
        )

    def _maybe_flush(self, now_ms: int) -> None:
        unflushed = self._leo - self._recovery_point
        if unflushed >= self.config.flush_interval_messages:
            self.flush(now_ms)
        elif self.config.flush_ms is not None:
            self.maybe_flush(now_ms)

    @_locked
    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if flush.ms has passed since the last flush (for a periodic scheduler)."""
        now = _now_ms() if now_ms is None else now_ms
        flush_ms = self.config.flush_ms
        if flush_ms is None or self._leo <= self._recovery_point or now - self._last_flush_ms < flush_ms:
            return False
        self.flush(now)
        return True

    @_locked
    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything appended so far; the recovery point becomes the log end offset."""
        self._check_open()
        started = time.perf_counter()
        self._flush_upto(self._leo, _now_ms() if now_ms is None else now_ms)
        self._observe_flush(time.perf_counter() - started)

    def _observe_flush(self, seconds: float) -> None:
        """Kafka's LogFlushRateAndTimeMs: every flush, explicit or the background one after a roll."""
        if self._flusher is not None:
            for observe in self._flusher.flush_observers:
                observe(seconds)

    def _flush_upto(self, offset: int, now_ms: int) -> None:
        first = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
        for segment in self._segments[first:]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False
        self._recovery_point = max(self._recovery_point, offset)
        self._last_flush_ms = now_ms

    # --- fetch --------------------------------------------------------------------------

    @_locked
    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        *,
        min_one_batch: bool = True,
    ) -> FileSlice | None:
        """Whole batches from the one holding `offset`, all with last offset < `max_offset_exclusive`.

        At most `max_bytes`, except that a first batch larger than that is returned alone
        (KIP-74) if `min_one_batch`. None when there is nothing to return yet, or nothing that
        fits; OffsetOutOfRangeError outside [log start offset, log end offset]. Reads stop at a
        segment's end.
        """
        return self._read(offset, max_bytes, max_offset_exclusive, min_one_batch)[0]

    @_locked
    def read_with_aborted_transactions(
        self,
        offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        *,
        min_one_batch: bool = True,
    ) -> tuple[FileSlice | None, list[AbortedTxn]]:
        """`read`, plus the aborted transactions a READ_COMMITTED fetch reports with it (Kafka's
        addAbortedTransactions): those overlapping [offset, upper bound), the upper bound being the first
        offset index entry at or past the end of the bytes returned, else the next segment's base offset,
        else the log end. No records, no transactions."""
        found, index = self._read(offset, max_bytes, max_offset_exclusive, min_one_batch)
        if found is None:
            return None, []
        segment = self._segments[index]
        upper = segment.fetch_upper_bound_offset(found.position, len(found))
        if upper is None:
            upper = self._segments[index + 1].base_offset if index + 1 < len(self._segments) else self._leo
        return found, self._collect_aborted(offset, upper, index)

    def _read(
        self, offset: int, max_bytes: int, max_offset_exclusive: int | None, min_one_batch: bool
    ) -> tuple[FileSlice | None, int]:
        """(what `read` returns, index of the segment it came from)."""
        self._check_open()
        leo = self._leo
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {leo}] of {self.dir.name}"
            )
        bound = leo if max_offset_exclusive is None else min(max_offset_exclusive, leo)
        if offset >= bound:
            return None, -1
        first = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for i in range(first, len(self._segments)):
            segment = self._segments[i]
            if segment.base_offset >= bound:
                return None, -1
            found = segment.read(offset, max_bytes, self._max_position(i, bound), min_one_batch)
            if found is not None:
                return (found, i) if len(found) else (None, -1)  # empty: the next batch is here but does not fit
        return None, -1

    def _max_position(self, index: int, bound: int) -> int | None:
        """Byte cap in segment `index` so that only batches ending below `bound` are read."""
        if bound >= self._leo:
            return None
        if index + 1 < len(self._segments) and self._segments[index + 1].base_offset <= bound:
            return None
        segment = self._segments[index]
        cached = self._bound_cache
        if cached is not None and cached[0] == bound and cached[1] == segment.base_offset:
            return cached[2]
        position = segment.position_of(bound)
        self._bound_cache = (bound, segment.base_offset, position)
        return position

    # --- ListOffsets --------------------------------------------------------------------

    @_locked
    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """First offset whose record timestamp is >= `timestamp` (ListOffsets), or None.

        Also answers ListOffsets' special values: -1 latest (log end offset), -2 and -4
        earliest (log start offset), -3 max timestamp.
        """
        self._check_open()
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return OffsetAndTimestamp(self._log_start_offset, NO_TIMESTAMP)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self._leo, NO_TIMESTAMP)
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        if timestamp < 0:
            raise ValueError(f"unsupported ListOffsets timestamp {timestamp}")
        for segment in list(self._segments):
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return OffsetAndTimestamp(found[1], found[0])
        return None

    @_locked
    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        """Offset and timestamp of the first record holding the log's largest timestamp."""
        self._check_open()
        segment = max(self._segments, key=lambda s: s.max_timestamp_so_far)
        found = segment.find_max_timestamp_record()
        return OffsetAndTimestamp(found[1], found[0]) if found else None

    # --- leader epochs (kbroker.log.leader_epoch_cache) ---------------------------------

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epochs

    @_locked
    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """A leader taking over at `epoch` marks where it starts (Kafka's makeLeader, at the log end)."""
        self._epochs.assign(epoch, start_offset)

    @_locked
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) when undefined."""
        return self._epochs.end_offset_for(epoch, self._leo)

    # --- deletion: DeleteRecords, retention, truncation ---------------------------------

    @_locked
    def delete_records_before(self, offset: int, now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1 = high watermark) and
        delete segments wholly below it. Returns the new log start offset (low watermark)."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        if offset == -1:
            offset = self._high_watermark
        if offset < 0 or offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {offset}: high watermark is {self._high_watermark}"
            )
        self._maybe_increment_log_start_offset(offset)
        self._delete_log_start_breached(now)
        self.purge_deleted(now)
        return self._log_start_offset

    def _maybe_increment_log_start_offset(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, offset)
        self._epochs.truncate_from_start(offset)
        self._producers.on_log_start_offset_incremented(offset)

    @_locked
    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention.bytes / retention.ms (policy "delete") and
        those below the log start offset; returns how many segments went."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        deleted = self._delete_log_start_breached(now)
        if self.config.deletes_by_retention:
            deleted += self._delete_retention_size_breached(now)
            deleted += self._delete_retention_ms_breached(now)
        self.purge_deleted(now)
        self._producers.remove_expired(now)  # producer.id.expiration.ms, checked on this timer
        return deleted

    def _delete_log_start_breached(self, now_ms: int) -> int:
        lso = self._log_start_offset
        return self._delete_old_segments(lambda _s, nxt: nxt is not None and nxt.base_offset <= lso, now_ms,
                                         f"log start offset {lso} breach")

    def _delete_retention_ms_breached(self, now_ms: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_old_segments(
            lambda s, _n: now_ms - s.largest_timestamp > retention_ms, now_ms,
            f"log retention time {retention_ms}ms breach based on the largest record timestamp in the segment")

    def _delete_retention_size_breached(self, now_ms: int) -> int:
        retention_bytes = self.config.retention_bytes
        size = self.size
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def over(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        return self._delete_old_segments(over, now_ms, f"log retention size {retention_bytes} breach")

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], now_ms: int, reason: str
    ) -> int:
        """Delete the leading run of segments matching `predicate` and below the HW.

        As in Kafka, if that is every segment (active included) a new empty active segment
        is rolled first, so the log end offset is kept.
        """
        deletable: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = following.base_offset if following is not None else self._leo
            if self._high_watermark < upper or not predicate(segment, following):
                break
            if following is None and segment.size == 0:
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self.roll(now_ms)
        for segment in deletable:
            log.info("[UnifiedLog %s] Deleting segment LogSegment(baseOffset=%d, size=%d, largestRecordTimestamp=%d)"
                     " due to %s", self._log_ident, segment.base_offset, segment.size, segment.largest_timestamp,
                     reason, extra={**partition_fields(self.dir), "offset": segment.base_offset})
        self._remove_segments(deletable, now_ms)
        self._maybe_increment_log_start_offset(self._segments[0].base_offset)
        return len(deletable)

    def _remove_segments(self, segments: list[LogSegment], now_ms: int) -> None:
        """Take segments out of the log; their files go `file.delete.delay.ms` later."""
        gone = {id(s) for s in segments}
        self._segments = [s for s in self._segments if id(s) not in gone]
        self._bases = [s.base_offset for s in self._segments]
        deadline = now_ms + self.config.file_delete_delay_ms
        for segment in segments:
            segment.mark_deleted()
            self._pending_deletes.append((deadline, segment))
            self._producers.delete_snapshot(segment.base_offset)
        self._dir_dirty = True

    @_locked
    def purge_deleted(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Remove the files of segments whose deletion delay has passed; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        due = [s for t, s in self._pending_deletes if force or t <= now]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if not (force or t <= now)]
        for segment in due:
            segment.delete()
        return len(due)

    @_locked
    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything from the batch holding `offset` on (replica truncation).

        Truncation is by whole batches, so the new log end offset is the start of the
        batch holding `offset` when `offset` falls inside one. Returns whether anything went.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            self._epochs.truncate_from_end(self._leo)  # as Kafka: an epoch may have begun at the log end
            return False
        now = _now_ms() if now_ms is None else now_ms
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now)
            return True
        self._note_truncation(offset)
        later = [s for s in self._segments if s.base_offset > offset]
        if later:
            self._remove_segments(later, now)
        self.active_segment.truncate_to(offset, now)
        self._leo = self.active_segment.read_next_offset()
        self._epochs.truncate_from_end(self._leo)
        self._after_truncation()
        self._rebuild_producer_state(now)
        if self._high_watermark >= self._leo:  # Kafka's truncateTo: the HW is set again at the new end
            self._producers.on_high_watermark_updated(self._high_watermark)
        self.purge_deleted(now)
        return True

    @_locked
    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete every segment and start an empty log at `offset`."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        self._note_truncation(0)
        self._remove_segments(list(self._segments), now)
        for name in segment_file_names(offset):
            (self.dir / name).unlink(missing_ok=True)
        self._segments = [self._new_segment(offset, now)]
        self._bases = [offset]
        self._leo = self._log_start_offset = self._recovery_point = self._high_watermark = offset
        self._after_truncation()
        self._epochs.clear()
        self._producers.truncate_fully_and_start_at(offset)
        self.purge_deleted(now)

    def _note_truncation(self, offset: int) -> None:
        self._truncations += 1
        point = self._cleaner_truncation_point
        self._cleaner_truncation_point = offset if point is None else min(point, offset)

    def _after_truncation(self) -> None:
        self._bound_cache = None
        self._recovery_point = min(self._recovery_point, self._leo)
        self._log_start_offset = min(self._log_start_offset, self._leo)
        self._high_watermark = min(self._high_watermark, self._leo)

    # --- producer state -----------------------------------------------------------------

    def _rebuild_producer_state(self, now_ms: int, *, reload_from_clean_shutdown: bool = False) -> None:
        """Kafka's rebuildProducerState: latest snapshot at or below the log end, then the
        headers of the batches after it. A cleanly shut down log without any snapshot
        predates them (an upgrade): as Kafka does, start empty instead of scanning it all."""
        state = self._producers
        if reload_from_clean_shutdown and state.latest_snapshot_offset is None:
            state.truncate_fully_and_start_at(self._leo)
        else:
            log.info("[UnifiedLog %s] Loading producer state till offset %d", self._log_ident, self._leo,
                     extra={**partition_fields(self.dir), "offset": self._leo})
            state.truncate_and_reload(self._log_start_offset, self._leo, now_ms)
            start = max(state.map_end_offset, self._log_start_offset)
            if start < self._leo:
                self._replay_producer_state(start)
        state.update_map_end_offset(self._leo)
        if state.take_snapshot() is not None:
            self._dir_dirty = True

    def _replay_producer_state(self, start: int) -> None:
        """Feed the producer state the headers (and markers) of every batch ending at or after `start`."""
        replay_producer_state(self._producers, self._segments, start)

    # --- compaction (kbroker.log.cleaner calls these holding `lock`) ----------------------

    @property
    def truncation_count(self) -> int:
        return self._truncations

    def take_cleaner_truncation_point(self) -> int | None:
        """The lowest offset truncated to since the last call (the cleaner's checkpoint must not
        stay above it, as Kafka's maybeTruncateCheckpoint ensures), or None."""
        point, self._cleaner_truncation_point = self._cleaner_truncation_point, None
        return point

    @property
    def first_unstable_offset(self) -> int | None:
        """Kafka's firstUnstableOffset: the first offset of the oldest transaction still open or whose
        marker the high watermark has not passed (never below the log start offset); None if none."""
        first = self._producers.first_unstable_offset
        return None if first is None else max(first, self._log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first unstable offset when it is below the high watermark, else the high
        watermark. READ_COMMITTED consumers read below it."""
        first = self.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

    @_locked
    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from the `.txnindex`
        files (Kafka's UnifiedLog.collectAbortedTransactions): those of the segment holding `start_offset`
        and of later ones, until an entry's LSO shows no later abort can overlap the range."""
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        return self._collect_aborted(start_offset, upper_bound_offset, first)

    def _collect_aborted(self, start_offset: int, upper_bound_offset: int, first: int) -> list[AbortedTxn]:
        found: list[AbortedTxn] = []
        for segment in self._segments[first:]:
            result = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            found += result.aborted
            if result.complete:
                break
        return found

    def last_records_of_active_producers(self) -> dict[int, LastRecord]:
        """Per producer id still in the producer state, what compaction must keep of it."""
        return {
            pid: LastRecord(e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
            for pid, e in self._producers.producers.items()
        }

    def replace_segments(
        self, cleaned: LogSegment, old: Sequence[LogSegment], *, truncations: int, now_ms: int | None = None
    ) -> bool:
        """Swap a cleaned `.cleaned` segment in for the adjacent segments `old`, crash-safely.

        Kafka's order: rename the cleaned files to `.swap`, rename the old ones to `.deleted`
        (their files stay open for in-flight fetches until file.delete.delay.ms), then drop the
        `.swap` suffix; the loader finishes or undoes each step after a crash. Returns False,
        changing nothing, when the log moved on meanwhile (closed, truncated since the cleaner
        read `truncations`, or any of `old` no longer in the log). The lock is held for the
        renames only; the last directory fsync (a crash before it is recovered from `.swap`)
        comes after.
        """
        with self.lock:
            swapped = self._swap_in(cleaned, old, truncations, _now_ms() if now_ms is None else now_ms)
        if swapped:
            fsync_dir(self.dir)
        return swapped

    def _swap_in(self, cleaned: LogSegment, old: Sequence[LogSegment], truncations: int, now: int) -> bool:
        ids = [id(s) for s in self._segments]
        if self._closed or truncations != self._truncations or not old or id(old[0]) not in ids:
            return False
        first = ids.index(id(old[0]))
        if [id(s) for s in self._segments[first : first + len(old)]] != [id(s) for s in old]:
            return False
        if first + len(old) == len(self._segments):
            raise ValueError("the active segment is never replaced by a cleaned one")
        cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.dir)
        deadline = now + self.config.file_delete_delay_ms
        for segment in old:
            segment.mark_deleted()
            self._pending_deletes.append((deadline, segment))
            if segment.base_offset != cleaned.base_offset:
                self._producers.delete_snapshot(segment.base_offset)
        cleaned.change_file_suffixes(SWAP_SUFFIX, "")
        self._segments = [*self._segments[:first], cleaned, *self._segments[first + len(old) :]]
        self._bases = [s.base_offset for s in self._segments]
        self._bound_cache = None
        return True

    # --- lifecycle ----------------------------------------------------------------------

    @_locked
    def update_config(self, config: LogConfig) -> None:
        """New topic settings take effect from the next append/roll/retention pass."""
        self.config = config
        self._record_rules = RecordRules.of(self.dir.name, config)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.dir} is closed")

    @_locked
    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to), trim the active indexes, close every file, finish
        pending deletions. A background flush still under way finishes on its own descriptors
        and then changes nothing: a closed log's recovery point stays as close left it."""
        if self._closed:
            return
        if flush:
            self.flush()
            self._producers.take_snapshot()  # at the log end: the next start replays nothing
        for segment in self._segments:
            segment.close()
        self.purge_deleted(force=True)
        self._closed = True

    def close_handles(self) -> None:
        """Kafka's closeHandlers, for a log whose dir failed: let go of every file and index
        without writing anything (no flush, no index trim, no snapshot, no file deletion), so
        the next start recovers the directory as after a crash. Any later call sees it closed."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            for segment in [*self._segments, *(s for _, s in self._pending_deletes)]:
                segment.abandon()
            self._pending_deletes = []

    @_locked
    def delete(self) -> None:
        """Close without flushing and remove the whole directory."""
        self.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self.dir)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._leo}, high_watermark={self._high_watermark}, "
            f"segments={len(self._segments)})"
        )
