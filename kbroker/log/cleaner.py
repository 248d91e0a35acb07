"""Log compaction for `cleanup.policy=compact` partitions, as Kafka's LogCleaner does it.

One background thread (`LogCleaner`) repeatedly picks the compacted partition whose dirty
part is the largest share of its log and cleans it; when none qualifies it sleeps
`log.cleaner.backoff.ms`. What it does, rule for rule after Kafka 3.9:

Choosing (LogCleanerManager): the clean part of a log is [log start, first dirty offset), the
first dirty offset coming from `cleaner-offset-checkpoint` in the log dir (reset to the log
start offset when missing, below the log start or beyond the log end, or lowered after a
truncation). Cleaning never goes past the first uncleanable offset: the active segment, the
last stable offset (high watermark / first open transaction), and the first segment whose
newest record is younger than `min.compaction.lag.ms`; it is rounded down to a segment base.
A log qualifies when dirty bytes / (clean + dirty bytes) exceeds `min.cleanable.dirty.ratio`,
or when its oldest dirty segment began more than `max.compaction.lag.ms` ago.

Cleaning (Cleaner): an offset map (MD5 of key -> latest offset, bounded by
`log.cleaner.dedupe.buffer.size`) is built over the dirty range; if it fills up, this round
ends where it stopped. Then every segment from the log's start up to that end is recopied,
in groups that fit one segment (segment.bytes, segment.index.bytes, int32 relative offsets),
into one `<base>.log.cleaned` per group, keeping:

- records at or past the map's last offset, and records whose offset is the latest for their
  key (records without a key are dropped);
- tombstones (null values) until the delete horizon stored in their batch has passed: the
  first cleaning that keeps a tombstone rewrites its batch with deleteHorizonMs = now +
  `delete.retention.ms` (attribute bit 6, baseTimestamp; KIP-534), and a later cleaning at or
  after that time drops it. Magic 2 only, so Kafka's legacy rule (segment mtime) never applies;
- batches of aborted transactions (known from the `.txnindex` files, as in Kafka) are dropped; a
  COMMIT/ABORT marker is kept while batches of its transaction remain, then gets a delete horizon
  the same way tombstones do. An ABORT marker kept because this round met batches of its
  transaction carries its entry into the cleaned segment's `.txnindex`;
- the batch holding an active producer's last sequence (or, without data, its last marker)
  stays, emptied to its 61-byte header if need be, and so does the last batch before the end
  of the round (KAFKA-17076), so producer state and offsets survive compaction.

Surviving records stay in their original batch: same base offset, last offset delta,
producer id/epoch/sequence, leader epoch and attributes, re-encoded with the batch's own
codec and a fresh CRC when anything changed, copied byte for byte otherwise. Offsets are
never reassigned, so compaction leaves gaps, and order never changes.

Swapping (PartitionLog.replace_segments, under the partition's lock only): `.cleaned` ->
`.swap`, old segments -> `.deleted` (removed file.delete.delay.ms later, so fetches holding
their files finish), `.swap` -> final names. The loader finishes or undoes any of this after
a crash. Reading is done through duplicated file descriptors, so produce, fetch, retention
and truncation never wait for the cleaner; a swap whose sources changed meanwhile is dropped.

Python's GIL makes a second cleaner thread pointless, so `log.cleaner.threads` > 1 runs one;
0 runs none. So that the event loop is not starved of the GIL while the cleaner computes,
starting the thread lowers the interpreter's switch interval to 1 ms (from CPython's 5 ms):
a thread waiting for the GIL then gets it within about a millisecond. Measured on a loaded
2-core machine while a 6 MB log was compacted: append+read p99 ~9 ms, against 18-29 ms at
the default interval; explicit yields (sleep, sched_yield) cost more and did no better.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offsets_checkpoint,
    write_offsets_checkpoint,
)
from kbroker.log.config import LONG_MAX, LogConfig
from kbroker.log.partition_log import LastRecord, PartitionLog
from kbroker.log.record_keys import RecordKey, record_keys
from kbroker.log.segment import CLEANED_SUFFIX, LogSegment, segment_name
from kbroker.log.transaction_index import AbortedTxn, TransactionIndex
from wire.exceptions import CorruptRecordError
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    build_batch_like,
    decode_batch,
    iter_batches,
    parse_control_key,
    read_batch_header,
    validate_batch,
)

if TYPE_CHECKING:
    from kbroker.log.manager import LogManager

__all__ = [
    "CleanerConfig",
    "CleaningAbortedError",
    "LogCleaner",
    "LogToClean",
    "OffsetMap",
    "clean_log",
    "group_segments_by_size",
    "log_to_clean",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_INT32_MAX = 2**31 - 1
# What one offset-map entry costs in CPython (16-byte digest object, int, dict slot), so
# that log.cleaner.dedupe.buffer.size bounds real memory as it does in Kafka (24 bytes there).
_MAP_ENTRY_BYTES = 128
_SWITCH_INTERVAL_S = 0.001  # see the module docstring
_SHORT_KEY = 16  # keys up to an MD5 digest's size are mapped as they are


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's `log.cleaner.*` settings, with Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    max_io_bytes_per_second: float = sys.float_info.max

    _PROPERTIES = {
        "log.cleaner.enable": "enable",
        "log.cleaner.threads": "threads",
        "log.cleaner.backoff.ms": "backoff_ms",
        "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
        "log.cleaner.io.buffer.size": "io_buffer_size",
        "log.cleaner.io.buffer.load.factor": "io_buffer_load_factor",
        "log.cleaner.io.max.bytes.per.second": "max_io_bytes_per_second",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | object) -> CleanerConfig:
        """From anything indexable by Kafka property name (a dict, kbroker's BrokerConfig)."""
        values: dict[str, object] = {}
        for name, field_name in cls._PROPERTIES.items():
            try:
                value = props[name]  # type: ignore[index]
            except KeyError:
                continue
            if value is not None:
                values[field_name] = value
        return cls(**values)

    @property
    def map_entries(self) -> int:
        """How many keys one cleaning round may map (Kafka: slots x load factor)."""
        return max(1, int(self.dedupe_buffer_size // _MAP_ENTRY_BYTES * self.io_buffer_load_factor))

    @property
    def read_chunk(self) -> int:
        """Bytes read from a segment at a time (Kafka: io.buffer.size / threads / 2)."""
        return max(HEADER_SIZE, self.io_buffer_size // 2)


class CleaningAbortedError(Exception):
    """The cleaning of a partition stopped early: broker shutdown, partition deleted, or the
    log changed under the cleaner. Nothing was swapped in for the group being cleaned."""


# --- choosing what to clean -------------------------------------------------------------------


def _bases(segments: Sequence[LogSegment]) -> list[int]:
    return [s.base_offset for s in segments]


def log_segments(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): the segment holding `start` (or the first one) and every
    later one whose base offset is below `end`."""
    if end <= start:
        return []
    first = max(0, bisect.bisect_right(_bases(segments), start) - 1)
    return [s for s in segments[first:] if s.base_offset < end]


@dataclass(frozen=True)
class LogToClean:
    """A log picked for cleaning and the sizes that ranked it (Kafka's LogToClean)."""

    tp: TopicPartition
    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def log_to_clean(
    tp: TopicPartition, log: PartitionLog, first_dirty: int, uncleanable: int, need_compaction_now: bool = False
) -> LogToClean:
    """Size up [first_dirty, uncleanable) of `log`; the caller holds `log.lock`."""
    segments = log.segments
    clean_bytes = sum(s.size for s in log_segments(segments, -1, first_dirty))
    later = log_segments(segments, uncleanable, log.active_segment.base_offset)
    first_uncleanable = (later[0] if later else log.active_segment).base_offset
    cleanable = log_segments(segments, min(first_dirty, first_uncleanable), first_uncleanable)
    return LogToClean(
        tp, log, first_dirty, first_uncleanable, clean_bytes, sum(s.size for s in cleanable), need_compaction_now
    )


def cleanable_offsets(log: PartitionLog, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint must be rewritten),
    Kafka's LogCleanerManager.cleanableOffsets; the caller holds `log.lock`."""
    start = log.log_start_offset
    dirty = start if checkpoint is None else checkpoint
    force = False
    if dirty < start or dirty > log.log_end_offset:
        dirty, force = start, True
    limits = [log.last_stable_offset, log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in log_segments(log.segments, dirty, log.active_segment.base_offset):
            if segment.largest_timestamp > now_ms - lag:
                limits.append(segment.base_offset)
                break
    return dirty, max(dirty, min(limits)), force


def max_compaction_delay(log: PartitionLog, first_dirty: int, now_ms: int) -> int:
    """How long past `max.compaction.lag.ms` the oldest dirty segment is (0: not overdue)."""
    stamps = [s.first_batch_timestamp for s in log_segments(log.segments, first_dirty, log.active_segment.base_offset)]
    valid = [t for t in stamps if t is not None and t > 0]
    earliest = min(valid) if valid else LONG_MAX
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def group_segments_by_size(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Runs of adjacent segments that fit one segment together (Kafka's groupSegmentsBySize)."""
    remaining = list(segments)
    groups: list[list[LogSegment]] = []
    while remaining:
        group = [remaining.pop(0)]
        log_size, index_size, time_size = group[0].size, _index_bytes(group[0]), _time_index_bytes(group[0])
        while remaining:
            nxt = remaining[0]
            last_offset = remaining[1].base_offset - 1 if len(remaining) > 1 else first_uncleanable - 1
            if (
                log_size + nxt.size > max_size
                or index_size + _index_bytes(nxt) > max_index_size
                or time_size + _time_index_bytes(nxt) > max_index_size
                or (nxt.size and last_offset - group[0].base_offset > _INT32_MAX)
            ):
                break
            group.append(remaining.pop(0))
            log_size += nxt.size
            index_size += _index_bytes(nxt)
            time_size += _time_index_bytes(nxt)
        groups.append(group)
    return groups


def _index_bytes(segment: LogSegment) -> int:
    return segment.offset_index.size_bytes


def _time_index_bytes(segment: LogSegment) -> int:
    return segment.time_index.size_bytes


# --- the offset map and the transaction state -------------------------------------------------


class OffsetMap:
    """Kafka's SkimpyOffsetMap: MD5 of each key -> the latest offset seen for it (keys no longer
    than a digest are used as they are, which only saves the hashing)."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @staticmethod
    def _slot(key: bytes) -> bytes:
        return key if len(key) <= _SHORT_KEY else hashlib.md5(key, usedforsecurity=False).digest()

    def put(self, key: bytes, offset: int) -> bool:
        """Map `key` to `offset`; False (nothing stored) once the map holds max_entries keys,
        even for a key already in it, as Kafka's check does."""
        if len(self._offsets) >= self.max_entries:
            return False
        self._offsets[self._slot(key)] = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1 when it is not in the map."""
        return self._offsets.get(self._slot(key), -1)


class TransactionTracker:
    """Kafka's CleanedTransactionMetadata: walking the log in order, which transactional
    batches belong to aborted transactions, and which markers no batch needs any more.
    `cleaned_index`, when set, receives the entry of each ABORT marker kept for its batches."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._aborted: list[tuple[int, AbortedTxn]] = []  # a heap by first offset
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [its AbortedTxn, a batch of it was seen]
        self.cleaned_index: TransactionIndex | None = None
        self.add_aborted(aborted)

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[1]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """Whether the marker may go (its transaction has no batch left); None: an emptied one."""
        self._consume_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        producer_id = header.producer_id
        if control_type == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is None or not ongoing[1]:
                return True
            if self.cleaned_index is not None:
                self.cleaned_index.append(ongoing[0])
            return False
        if control_type == CONTROL_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Whether the batch belongs to an aborted transaction (and so may go)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


def control_type(batch: memoryview | bytes, header: BatchHeader) -> int | None:
    """COMMIT/ABORT of a marker batch, or None for one a previous cleaning emptied."""
    if header.record_count == 0:
        return None
    _, records = decode_batch(batch)
    return parse_control_key(records[0].key)


# --- reading segments -------------------------------------------------------------------------


@dataclass
class _Source:
    """A segment as the cleaner reads it: a duplicated descriptor and the bytes to read."""

    fd: int
    size: int
    start_position: int
    last_modified_ms: int


def _read_exactly(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) != size:
        raise CorruptRecordError(f"segment ends inside the batch at position {position}")
    return data


def _batches(
    source: _Source, chunk: int, *, headers_only: bool = False
) -> Iterator[tuple[BatchHeader, memoryview | None]]:
    """Each batch of the source from its start position, with its bytes (only control batches'
    bytes when `headers_only`), read `chunk` bytes at a time."""
    fd, position, end = source.fd, source.start_position, source.size
    while position < end:
        view = memoryview(os.pread(fd, min(chunk, end - position), position))
        consumed = 0
        for at, header in iter_batches(view):
            wanted = not headers_only or header.is_control
            yield header, (view[at : at + header.size] if wanted else None)
            consumed = at + header.size
        if consumed:
            position += consumed
            continue
        header = read_batch_header(_read_exactly(fd, HEADER_SIZE, position))  # larger than a chunk
        if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
            raise CorruptRecordError(f"batch at position {position} runs past the end of its segment")
        wanted = not headers_only or header.is_control
        yield header, (memoryview(_read_exactly(fd, header.size, position)) if wanted else None)
        position += header.size


class _Throttler:
    """log.cleaner.io.max.bytes.per.second, checked every 300 ms as Kafka's Throttler does."""

    def __init__(self, bytes_per_second: float) -> None:
        self.bytes_per_second = bytes_per_second
        self._window_start = time.monotonic()
        self._window_bytes = 0

    def step(self, nbytes: int) -> None:
        if self.bytes_per_second >= sys.float_info.max:
            return
        now = time.monotonic()
        self._window_bytes += nbytes
        elapsed = now - self._window_start
        if elapsed >= 0.3:
            needed = self._window_bytes / self.bytes_per_second
            if needed > elapsed:
                time.sleep(needed - elapsed)
            self._window_start, self._window_bytes = time.monotonic(), 0


# --- cleaning one log -------------------------------------------------------------------------


@dataclass
class _Round:
    """What stays fixed while the groups of one cleaning round are recopied."""

    log: PartitionLog
    config: LogConfig
    producers: dict[int, LastRecord]
    transactions: TransactionTracker
    upper_bound: int
    truncations: int
    now_ms: int


class Cleaner:
    """Cleans one log at a time (Kafka's Cleaner); `check_done` raises CleaningAbortedError to stop."""

    def __init__(self, config: CleanerConfig, check_done: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.offset_map = OffsetMap(config.map_entries)
        self._check_done = check_done
        self._throttler = _Throttler(config.max_io_bytes_per_second)
        self.records_read = self.records_written = self.invalid_records = 0

    def clean(self, to_clean: LogToClean, now_ms: int | None = None) -> int:
        """Clean the log; returns the offset up to which it is now clean (the new checkpoint)."""
        now = _now_ms() if now_ms is None else now_ms
        log = to_clean.log
        with log.lock:
            if log.closed or to_clean.first_uncleanable_offset > log.active_segment.base_offset:
                raise CleaningAbortedError(f"{log.dir.name} changed before its cleaning started")
            segments, config, truncations = log.segments, log.config, log.truncation_count
            producers = log.last_records_of_active_producers()
        upper = to_clean.first_uncleanable_offset
        self._build_offset_map(log, segments, to_clean.first_dirty_offset, upper)
        end = self.offset_map.latest_offset + 1
        if end <= to_clean.first_dirty_offset:
            return to_clean.first_dirty_offset
        state = _Round(log, config, producers, TransactionTracker(), upper, truncations, now)
        for group in group_segments_by_size(
            log_segments(segments, 0, end), config.segment_bytes, config.max_index_size, upper
        ):
            self._clean_group(state, group)
        return end

    # --- sources -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _open(self, log: PartitionLog, segment: LogSegment, start_offset: int | None = None) -> Iterator[_Source]:
        with log.lock:  # a segment is closed only under the lock, so the dup cannot race it
            try:
                fd = segment.duplicate_fd()
            except (ValueError, OSError) as exc:
                raise CleaningAbortedError(f"{segment.log_path} went away: {exc}") from None
            size = segment.size
            position = segment.offset_index.lookup(start_offset).position if start_offset is not None else 0
        try:
            yield _Source(fd, size, position, os.fstat(fd).st_mtime_ns // 1_000_000)
        finally:
            os.close(fd)

    @staticmethod
    def _aborted_transactions(log: PartitionLog, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, end), from the `.txnindex` files (Kafka's
        collectAbortedTransactions)."""
        with log.lock:
            if log.closed:
                raise CleaningAbortedError(f"{log.dir.name} was closed during its cleaning")
            return log.collect_aborted_transactions(start, end)

    @classmethod
    def _segment_aborted_transactions(cls, log: PartitionLog, group: list[LogSegment], i: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping group[i] (up to the next segment of the group, or its own
        end), as Kafka's cleanSegments collects them."""
        segment = group[i]
        with log.lock:
            if i + 1 < len(group):
                upper = group[i + 1].base_offset
            else:
                try:
                    upper = segment.read_next_offset()
                except (ValueError, OSError) as exc:
                    raise CleaningAbortedError(f"{segment.log_path} went away: {exc}") from None
            return cls._aborted_transactions(log, segment.base_offset, upper)

    # --- the offset map ----------------------------------------------------------------------

    def _build_offset_map(self, log: PartitionLog, segments: Sequence[LogSegment], start: int, end: int) -> None:
        offset_map = self.offset_map
        offset_map.clear()
        dirty = log_segments(segments, start, end)
        transactions = TransactionTracker(self._aborted_transactions(log, start, end))
        for i, segment in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            with self._open(log, segment, start if segment.base_offset < start else None) as source:
                if self._map_segment(source, start, transactions):
                    return
            offset_map.latest_offset = next_start - 1  # offsets may have gaps: the segment is done

    def _map_segment(self, source: _Source, start: int, transactions: TransactionTracker) -> bool:
        """Put the segment's keys in the map; True when the map filled up before its end."""
        offset_map = self.offset_map
        for header, data in _batches(source, self.config.read_chunk):
            self._check_done()
            assert data is not None
            if header.is_control:
                transactions.on_control_batch(header, control_type(data, header))
            elif not transactions.on_data_batch(header):
                for offset, key, _ in record_keys(data, header):
                    if key is not None and offset >= start and not offset_map.put(key, offset):
                        return True
            if header.last_offset >= start:
                offset_map.latest_offset = header.last_offset
            self._throttler.step(header.size)
        return False

    # --- recopying ---------------------------------------------------------------------------

    def _clean_group(self, state: _Round, group: list[LogSegment]) -> None:
        """Recopy the group into one `.cleaned` segment and swap it in."""
        log, config = state.log, state.config
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (log.dir / f"{segment_name(base)}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        cleaned = LogSegment(
            log.dir,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.max_index_size,
            file_suffix=CLEANED_SUFFIX,
        )
        state.transactions.cleaned_index = cleaned.txn_index
        try:
            last_modified = 0
            for i, segment in enumerate(group):
                # the whole segment's range: its aborted transactions are rebuilt into the cleaned index
                state.transactions.add_aborted(self._segment_aborted_transactions(log, group, i))
                with self._open(log, segment) as source:
                    last_modified = source.last_modified_ms
                    for header, data in _batches(source, self.config.read_chunk):
                        self._check_done()
                        assert data is not None
                        retained = self._filter_batch(state, header, data)
                        if retained is not None:
                            kept = read_batch_header(retained)
                            cleaned.append(retained, kept.last_offset, kept.max_timestamp, kept.last_offset)
                        self._throttler.step(header.size)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified(last_modified)
        except BaseException:
            cleaned.delete()
            raise
        # An error inside the swap leaves the files alone: the loader completes it from `.swap`.
        if not log.replace_segments(cleaned, group, truncations=state.truncations, now_ms=state.now_ms):
            cleaned.delete()
            raise CleaningAbortedError(f"{log.dir.name} changed while it was being cleaned")

    def _filter_batch(self, state: _Round, header: BatchHeader, data: memoryview) -> bytes | memoryview | None:
        """What of one batch survives (Kafka's cleanInto filter + MemoryRecords.filterTo)."""
        validate_batch(data)
        marker = header.is_control
        if marker:
            can_discard = state.transactions.on_control_batch(header, control_type(data, header))
            horizon_passed = header.has_delete_horizon and header.base_timestamp <= state.now_ms
            discard_records = can_discard and horizon_passed
        else:
            can_discard = discard_records = state.transactions.on_data_batch(header)
        retain_empty = (header.producer_id >= 0 and self._is_last_of_producer(state, header)) or (
            header.next_offset == state.upper_bound
        )
        if discard_records and not retain_empty:
            return None
        keys = record_keys(data, header)
        self.records_read += len(keys)
        keep = [not discard_records and (marker or self._retain(state, header, r)) for r in keys]
        kept = sum(keep)
        self.records_written += kept
        if not kept:
            return _empty_batch(header) if retain_empty else None
        tombstones = any(k and not r.has_value for k, r in zip(keep, keys, strict=True))
        set_horizon = (tombstones or (can_discard and marker)) and not header.has_delete_horizon
        if kept == len(keys) and not set_horizon:
            return data
        horizon = header.base_timestamp if header.has_delete_horizon else None
        if set_horizon:
            horizon = state.now_ms + state.config.delete_retention_ms
        _, records = decode_batch(data)
        return _rebuilt_batch(header, [r for r, k in zip(records, keep, strict=True) if k], horizon)

    @staticmethod
    def _is_last_of_producer(state: _Round, header: BatchHeader) -> bool:
        last = state.producers.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def _retain(self, state: _Round, header: BatchHeader, record: RecordKey) -> bool:
        """Kafka's shouldRetainRecord: the latest of its key, and no tombstone past its horizon."""
        offset_map = self.offset_map
        if record.offset > offset_map.latest_offset:
            return True
        if record.key is None:
            self.invalid_records += 1
            return False
        if record.offset < offset_map.get(record.key):
            return False
        return record.has_value or not header.has_delete_horizon or state.now_ms < header.base_timestamp


def _rebuilt_batch(header: BatchHeader, records: list, delete_horizon_ms: int | None) -> bytes:
    """The surviving records in their original batch's frame (MemoryRecordsBuilder as the
    cleaner uses it: same offsets, producer fields, attributes and codec; new CRC)."""
    return build_batch_like(header, records, delete_horizon_ms=delete_horizon_ms)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: the batch's header with no records."""
    return build_batch_like(header, [], codec=0, base_timestamp=-1, max_timestamp=header.max_timestamp)


def clean_log(
    log: PartitionLog,
    config: CleanerConfig | None = None,
    *,
    first_dirty_offset: int | None = None,
    now_ms: int | None = None,
    tp: TopicPartition = ("", 0),
) -> int:
    """Clean one log once from `first_dirty_offset` (default: its start) up to its first
    uncleanable offset, whatever its dirty ratio; returns the new clean offset. For tools and tests."""
    now = _now_ms() if now_ms is None else now_ms
    with log.lock:
        first, uncleanable, _ = cleanable_offsets(log, first_dirty_offset, now)
        to_clean = log_to_clean(tp, log, first, uncleanable)
    return Cleaner(config or CleanerConfig()).clean(to_clean, now)


# --- the background thread --------------------------------------------------------------------


class LogCleaner:
    """The cleaner thread of a LogManager, its `cleaner-offset-checkpoint` files, and the
    bookkeeping of what is being cleaned (Kafka's LogCleaner + LogCleanerManager)."""

    def __init__(self, manager: LogManager, config: CleanerConfig | None = None) -> None:
        self.manager = manager
        self.config = config or CleanerConfig()
        self._lock = threading.Condition()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {
            d: self._read_checkpoint(d) for d in manager.log_dirs
        }
        self._in_progress: TopicPartition | None = None
        self._aborting: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, int] = {}  # tp -> id() of the log that failed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cleaner = Cleaner(self.config, self._check_done)
        self.cleanings = 0  # completed cleanings, for tests and monitoring

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None or self.config.threads < 1:
            return
        if sys.getswitchinterval() > _SWITCH_INTERVAL_S:
            sys.setswitchinterval(_SWITCH_INTERVAL_S)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kafka-log-cleaner-thread-0", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 30) -> None:
        """Stop the thread; a cleaning under way is abandoned at its next batch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def reconfigure(self, config: CleanerConfig) -> None:
        """New settings (Kafka's dynamic log.cleaner.*): stop the thread, take them, start again."""
        was_running = self._thread is not None
        self.shutdown()
        self.config = config
        self._cleaner = Cleaner(config, self._check_done)
        if was_running:
            self.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.run_once()
            except Exception:
                log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)

    def run_once(self, now_ms: int | None = None) -> bool:
        """One pass of the thread: clean the filthiest log if any qualifies, finish due file
        deletions of compacted logs. Returns whether a log was cleaned."""
        now = _now_ms() if now_ms is None else now_ms
        to_clean = self.grab_filthiest_log(now)
        if to_clean is not None:
            self._clean(to_clean, now)
        for _, plog in self.manager.items():
            if plog.config.compact and not plog.closed:
                with contextlib.suppress(ValueError, OSError):
                    plog.purge_deleted(now)
        return to_clean is not None

    # --- checkpoints -----------------------------------------------------------------------

    @staticmethod
    def _read_checkpoint(log_dir: Path) -> dict[TopicPartition, int]:
        try:
            return read_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
        except CheckpointError:
            log.warning("ignoring unreadable %s in %s", CLEANER_OFFSET_CHECKPOINT, log_dir)
            return {}

    def all_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: o for entries in self._checkpoints.values() for tp, o in entries.items()}

    def _log_dir(self, tp: TopicPartition) -> Path | None:
        try:
            return self.manager.log_dir_of(*tp)
        except KeyError:
            return None

    def _update_checkpoint(self, tp: TopicPartition, offset: int | None, log_dir: Path | None = None) -> None:
        """Set (None: remove) a partition's entry and rewrite its log dir's file; entries of
        partitions that no longer exist are dropped on the way, as Kafka does."""
        log_dir = log_dir or self._log_dir(tp)
        if log_dir is None or log_dir not in self.manager.live_log_dirs:
            return  # nothing more is written into a failed dir
        with self._lock:
            existing = {p: o for p, o in self._checkpoints.get(log_dir, {}).items() if p in self.manager}
            if offset is None:
                existing.pop(tp, None)
            else:
                existing[tp] = offset
            self._checkpoints[log_dir] = existing
            try:
                write_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, existing)
                return
            except OSError as error:
                disk_error = error
        self.manager.fail_dir(log_dir, disk_error, f"writing {CLEANER_OFFSET_CHECKPOINT}")

    def await_cleaned(self, tp: TopicPartition, offset: int, timeout: float) -> bool:
        """Wait until `tp` is clean up to `offset` (Kafka's awaitCleaned, for tests)."""
        deadline = time.monotonic() + timeout
        while self.all_checkpoints().get(tp, -1) < offset:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    # --- choosing --------------------------------------------------------------------------

    def grab_filthiest_log(self, now_ms: int | None = None) -> LogToClean | None:
        """The compacted log with the largest dirty ratio among those that qualify, or None."""
        now = _now_ms() if now_ms is None else now_ms
        checkpoints = self.all_checkpoints()
        candidates: list[LogToClean] = []
        for tp, plog in self.manager.items():
            if not plog.config.compact or self._uncleanable.get(tp) == id(plog):
                continue
            found = self._size_up(tp, plog, checkpoints.get(tp), now)
            if found is not None and found.total_bytes > 0:
                candidates.append(found)
        ready = [
            c for c in candidates
            if (c.need_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        return max(ready, key=lambda c: c.cleanable_ratio) if ready else None

    def _size_up(self, tp: TopicPartition, plog: PartitionLog, checkpoint: int | None, now: int) -> LogToClean | None:
        with plog.lock:
            if plog.closed:
                return None
            truncated_to = plog.take_cleaner_truncation_point()
            lowered = truncated_to is not None and checkpoint is not None and checkpoint > truncated_to
            if lowered:
                checkpoint = truncated_to  # Kafka's maybeTruncateCheckpoint
            first_dirty, uncleanable, force = cleanable_offsets(plog, checkpoint, now)
            need_now = max_compaction_delay(plog, first_dirty, now) > 0
            found = log_to_clean(tp, plog, first_dirty, uncleanable, need_now)
        if force or lowered:
            self._update_checkpoint(tp, first_dirty)
        return found

    # --- cleaning ----------------------------------------------------------------------------

    def _check_done(self) -> None:
        if self._stop.is_set():
            raise CleaningAbortedError("the log cleaner is shutting down")
        if self._in_progress in self._aborting:
            raise CleaningAbortedError(f"cleaning of {self._in_progress} was aborted")

    def _clean(self, to_clean: LogToClean, now_ms: int) -> None:
        tp, plog = to_clean.tp, to_clean.log
        log_dir = self._log_dir(tp)
        with self._lock:
            self._in_progress = tp
        started = time.monotonic()
        truncations = plog.truncation_count
        disk_error: OSError | None = None
        try:
            end = self._cleaner.clean(to_clean, now_ms)
        except CleaningAbortedError as aborted:
            log.info("cleaning of %s-%d stopped: %s", *tp, aborted)
            end = None
        except OSError as error:
            end = None
            if not plog.closed and plog.truncation_count == truncations:
                disk_error = error
        except Exception:
            if plog.closed or plog.truncation_count != truncations:
                end = None  # deleted, shut down or truncated under us: not the log's fault
            else:
                log.exception("cleaning of %s-%d failed; it is marked uncleanable", *tp)
                self._uncleanable[tp] = id(plog)
                end = None
        finally:
            with self._lock:
                self._in_progress = None
                self._lock.notify_all()
        if disk_error is not None:  # as Kafka's cleaner: the log dir goes offline, not just this log
            self.manager.fail_dir(log_dir, disk_error, f"cleaning {tp[0]}-{tp[1]}")
        if end is None:
            return
        if self.manager.get(*tp) is plog:
            self._update_checkpoint(tp, end, log_dir)
        self.cleanings += 1
        log.info(
            "cleaned %s-%d, dirty section [%d, %d), in %.3f s",
            *tp, to_clean.first_dirty_offset, end, time.monotonic() - started,
        )

    def abort_cleaning(self, tp: TopicPartition, timeout: float = 30) -> None:
        """Stop the cleaning of `tp` if one is under way and wait until it has stopped."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._in_progress != tp:
                return
            self._aborting.add(tp)
            try:
                while self._in_progress == tp and time.monotonic() < deadline:
                    self._lock.wait(0.05)
            finally:
                self._aborting.discard(tp)

    def forget(self, tp: TopicPartition, log_dir: Path) -> None:
        """A deleted partition: abort its cleaning and drop its checkpoint entry."""
        self.abort_cleaning(tp)
        self._uncleanable.pop(tp, None)
        self._update_checkpoint(tp, None, log_dir)
