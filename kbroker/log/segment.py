"""One segment: `<base>.log` plus its `.index`, `.timeindex` and `.txnindex`, as Kafka lays them out.

The `.log` holds magic-2 batches exactly as produced, offsets patched in. The read path
touches only 61-byte batch headers (`os.pread`) to find byte ranges; the bytes themselves
leave through a FileSlice and `os.sendfile`. Only recovery reads whole batches (to check
CRCs), through a read-only mmap.

Descriptors: a segment that is written to (the active one, or one the cleaner is writing)
keeps its `.log` open until it stops being written (`on_become_inactive`) or closes. Any
other segment opens its `.log` when read and parks the file in the shared, bounded LRU of
kbroker.log._handles, so an idle old segment holds no descriptor. The indexes hold none
either (kbroker.log._index), so a partition with one segment costs at most one descriptor. The
`.txnindex` (kbroker.log.transaction_index) exists only once a transaction was aborted here.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log._handles import HANDLES, SegmentFile, open_segment_file
from kbroker.log.errors import CorruptIndexError, LogSegmentOffsetOverflowError
from kbroker.log.file_slice import FileSlice
from kbroker.log.offset_index import OffsetIndex
from kbroker.log.producer_state import EndTxnMarker, read_end_txn_marker
from kbroker.log.time_index import TimeIndex
from kbroker.log.transaction_index import TransactionIndex, TxnIndexSearchResult
from wire.exceptions import CorruptRecordError, DecodeError
from wire.records import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    Record,
    iter_batches,
    iter_records,
    read_batch_header,
    validate_batch,
)

if TYPE_CHECKING:
    from kbroker.log.producer_state import ProducerStateManager

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "LogSegment",
    "segment_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = OffsetIndex.SUFFIX
TIME_INDEX_SUFFIX = TimeIndex.SUFFIX
TXN_INDEX_SUFFIX = TransactionIndex.SUFFIX
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment the log cleaner is still writing
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in (see kbroker.log.loader for crash recovery)
_UNKNOWN = (-1, -1)  # (max timestamp, its offset) before any batch is seen
_IOV_MAX = 1024  # buffers one writev takes (Linux UIO_MAXIOV)


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _replace_suffix(path: Path, old: str, new: str) -> Path:
    if not path.name.endswith(old):
        raise ValueError(f"{path} does not end with {old!r}")
    return path.with_name(path.name[: len(path.name) - len(old)] + new)


class LogSegment:
    """A `.log` file and its indexes; appends, reads by offset, recovers, rolls."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        now_ms: int | None = None,
        file_suffix: str = "",
    ) -> None:
        """`file_suffix` is appended to every file name (".cleaned" while the cleaner writes one)."""
        stem = Path(directory) / segment_name(base_offset)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.log_path = stem.with_name(stem.name + LOG_SUFFIX + file_suffix)
        self._file: SegmentFile | None = None  # held while the segment is written to
        self._closed = False
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            self._size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        self.offset_index = OffsetIndex(
            stem.with_name(stem.name + INDEX_SUFFIX + file_suffix), base_offset, max_index_size
        )
        self.time_index = TimeIndex(
            stem.with_name(stem.name + TIME_INDEX_SUFFIX + file_suffix), base_offset, max_index_size
        )
        self.txn_index = TransactionIndex(stem.with_name(stem.name + TXN_INDEX_SUFFIX + file_suffix), base_offset)
        self.created_ms = _now_ms() if now_ms is None else now_ms
        self._rolling_based_timestamp: int | None = None
        self._bytes_since_last_index_entry = 0
        self.needs_recovery = self._check_indexes()
        self._max_timestamp, self._offset_of_max_timestamp = (
            _UNKNOWN if self.needs_recovery else tuple(self.time_index.last_entry)
        )

    def _check_indexes(self) -> bool:
        """Whether the indexes must be rebuilt: missing (with data in the log) or corrupt."""
        if self._size and (self.offset_index.newly_created or self.time_index.newly_created):
            return True
        try:
            self.offset_index.sanity_check(self._size)
            self.time_index.sanity_check()
            self.txn_index.sanity_check()
        except CorruptIndexError:
            return True
        return False

    # --- the open file ------------------------------------------------------------------

    def _reader(self) -> SegmentFile:
        """The open `.log`: the held one, or one from (or opened into) the shared LRU. Callers
        keep the object, not just its number, for as long as they use the descriptor."""
        if self._file is not None:
            return self._file
        if self._closed:
            raise ValueError(f"{self.log_path} is closed")
        return HANDLES.get(self, self._open_file)

    def _open_file(self) -> SegmentFile:
        return open_segment_file(self.log_path)

    def _writer(self) -> SegmentFile:
        """The `.log`, held open from now on: this segment is being written to."""
        if self._file is None:
            if self._closed:
                raise ValueError(f"{self.log_path} is closed")
            parked = HANDLES.discard(self)
            self._file = parked if parked is not None else self._open_file()
        return self._file

    def _stop_holding_file(self) -> None:
        """Hand the held `.log` to the shared LRU: nothing writes to this segment any more."""
        if self._file is not None:
            HANDLES.put(self, self._file)
            self._file = None

    def _close_file(self) -> None:
        for file in (self._file, HANDLES.discard(self)):
            if file is not None:
                file.close()
        self._file = None
        self._closed = True

    # --- properties ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the `.log` file."""
        return self._size

    @property
    def file(self) -> io.FileIO:
        """The open `.log` file that FileSlices reference."""
        return self._reader()

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the first batch that reached the max timestamp (Kafka's "shallow" offset)."""
        return self._offset_of_max_timestamp

    @property
    def last_modified_ms(self) -> int:
        if self._file is not None:
            return os.fstat(self._file.fileno()).st_mtime_ns // 1_000_000
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when no batch carries one (Kafka's rule)."""
        return self._max_timestamp if self._max_timestamp >= 0 else self.last_modified_ms

    def set_last_modified(self, ms: int) -> None:
        """Set the mtime of the `.log` and its two offset/time indexes (not the `.txnindex`, as Kafka),
        as the cleaner does to keep a cleaned segment's age."""
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            with contextlib.suppress(FileNotFoundError):
                os.utime(path, ns=(time.time_ns(), ms * 1_000_000))

    @property
    def first_batch_timestamp(self) -> int | None:
        """maxTimestamp of the first batch (what segment.ms and max.compaction.lag.ms age by)."""
        return self._first_batch_timestamp()

    def duplicate_fd(self) -> int:
        """A new descriptor of the open `.log`, for a reader in another thread (the cleaner) that
        must outlive a rename or deletion of the segment; the caller closes it. Opened by name
        when the segment has no open file, so the reader does not churn the shared LRU (the
        caller holds the log's lock, under which the name cannot change)."""
        if self._closed:
            raise ValueError(f"{self.log_path} is closed")
        file = self._file if self._file is not None else HANDLES.peek(self)
        if file is not None:
            return os.dup(file.fileno())
        return os.open(self.log_path, os.O_RDONLY)

    # --- writing ------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview],
        largest_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
    ) -> None:
        """Write offset-patched batches (one buffer, or pieces to write in order with one
        `writev`), adding index entries every interval."""
        pieces = records if isinstance(records, list) else [records]
        size = sum(map(len, pieces))
        if not size:
            return
        position = self._size
        if position == 0:
            self._rolling_based_timestamp = max_timestamp
        if not self.offset_index.can_append_offset(largest_offset):
            raise LogSegmentOffsetOverflowError(
                f"offset {largest_offset} overflows segment {self.base_offset}"
            )
        self._write(pieces, size)
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def _write(self, pieces: list[bytes | bytearray | memoryview], size: int) -> None:
        """Append the pieces (`size` bytes in all); on failure cut the file back so no partial
        batch stays."""
        fd = self._writer().fileno()
        try:
            done = os.writev(fd, pieces) if len(pieces) <= _IOV_MAX else 0
            if done < size:  # a short writev, or more pieces than one writev takes
                rest = memoryview(b"".join(pieces))[done:]
                while rest:
                    rest = rest[os.write(fd, rest):]
        except OSError:
            os.ftruncate(fd, self._size)
            raise
        self._size += size

    # --- reading ------------------------------------------------------------------------

    def _header_at(self, fd: int, position: int) -> BatchHeader:
        header = read_batch_header(os.pread(fd, HEADER_SIZE, position))
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"{self.log_path}: batch length {header.batch_length} at {position}")
        return header

    def _scan(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch starting in [start, end), headers only."""
        if start >= end:
            return
        file = self._reader()  # kept referenced while its descriptor is used
        fd = file.fileno()
        position = start
        while position < end:
            header = self._header_at(fd, position)
            if position + header.size > self._size:
                raise CorruptRecordError(
                    f"{self.log_path}: batch at {position} runs past the end of the file"
                )
            yield position, header
            position += header.size

    def _translate_offset(self, offset: int, end: int) -> tuple[int, BatchHeader] | None:
        """The first batch before `end` whose last offset is >= `offset`."""
        start = self.offset_index.lookup(offset).position
        for position, header in self._scan(start, end):
            if header.last_offset >= offset:
                return position, header
        return None

    def _last_boundary(self, start: int, limit: int) -> int:
        """The greatest batch boundary <= limit, from `start` (a boundary); the index skips ahead."""
        position = max(start, self.offset_index.floor_by_position(limit).position)
        for batch_start, header in self._scan(position, limit):
            if batch_start + header.size > limit:
                return batch_start
            position = batch_start + header.size
        return position

    def read(
        self, start_offset: int, max_bytes: int, max_position: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` of them.

        The first batch is returned whole even when larger than `max_bytes` (KIP-74) if
        `min_one_batch`; otherwise such a batch gives an empty slice, so that the caller stops
        here instead of reading on in the next segment. `max_position` (a batch boundary) caps
        the range, e.g. at the high watermark. None when no batch at or after `start_offset`
        lies before the cap.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
        end = self._size if max_position is None else min(max_position, self._size)
        found = self._translate_offset(start_offset, end)
        if found is None:
            return None
        position, header = found
        file = self._reader()
        first = header.size
        if first > max_bytes:
            return FileSlice(file, position, first if min_one_batch else 0)
        limit = position + max_bytes
        if limit >= end:
            return FileSlice(file, position, end - position)
        return FileSlice(file, position, self._last_boundary(position + first, limit) - position)

    def position_of(self, offset: int) -> int:
        """Start of the first batch whose last offset is >= `offset`, or the segment size."""
        found = self._translate_offset(offset, self._size)
        return found[0] if found else self._size

    def read_next_offset(self) -> int:
        """Offset after the last batch (base offset when empty): a scan from the last index entry."""
        last: BatchHeader | None = None
        for _, header in self._scan(self.offset_index.last_entry.position, self._size):
            last = header
        return last.next_offset if last else self.base_offset

    def batch_headers(self, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from `start`: for tools (dump-log) and tests."""
        return self._scan(start, self._size)

    def end_txn_marker_at(self, position: int, header: BatchHeader) -> EndTxnMarker | None:
        """The COMMIT/ABORT marker of the control batch at `position` (None: an emptied one)."""
        file = self._reader()
        return read_end_txn_marker(os.pread(file.fileno(), header.size, position))

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions of this segment's `.txnindex` overlapping [fetch_offset, upper_bound_offset)."""
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        """Kafka's bound of the aborted transactions a fetch of `fetch_size` bytes from `start_position`
        reports: the offset of the first index entry at or past its end, None past the last entry."""
        return self.offset_index.fetch_upper_bound_offset(start_position + fetch_size)

    def _records(self, position: int, header: BatchHeader) -> Iterator[Record]:
        file = self._reader()
        return iter_records(os.pread(file.fileno(), header.size, position))

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record >= `starting_offset` with timestamp >= `timestamp`.

        The time index narrows the scan; only the one matching batch is decoded.
        """
        entry = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for position, header in self._scan(start, self._size):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for record in self._records(position, header):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.timestamp, record.offset
        return None

    def find_max_timestamp_record(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record carrying the segment's max timestamp."""
        max_timestamp = self._max_timestamp
        start = self.offset_index.lookup(self._offset_of_max_timestamp).position
        for position, header in self._scan(start, self._size):
            if header.max_timestamp == max_timestamp:
                for record in self._records(position, header):
                    if record.timestamp == max_timestamp:
                        return max_timestamp, record.offset
                return None
        return None

    # --- rolling ------------------------------------------------------------------------

    def _first_batch_timestamp(self) -> int | None:
        if self._rolling_based_timestamp is None and self._size:
            file = self._reader()
            self._rolling_based_timestamp = self._header_at(file.fileno(), 0).max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Age of the segment: by record timestamps when the first batch has one, else by clock."""
        first = self._first_batch_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rule: size, age, a full index, or an offset the index cannot hold."""
        return (
            self._size > segment_bytes - messages_size
            or (self._size > 0 and self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > segment_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.offset_index.can_append_offset(max_offset_in_messages)
        )

    def on_become_inactive(self) -> None:
        """On roll: record the max timestamp in the time index, trim (and so write) both
        indexes, and stop holding the `.log` open."""
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._stop_holding_file()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # --- recovery and truncation --------------------------------------------------------

    def recover(self, producers: ProducerStateManager | None = None) -> int:
        """Re-check every batch (CRC, structure, ascending offsets), cut the tail at the first
        bad one, rebuild the indexes. Returns the bytes truncated.

        `producers`, the partition's producer state as of this segment's base offset, is fed every
        valid batch and ends at the segment's end; the `.txnindex` is rebuilt from the aborts it
        reports (Kafka's recover). Without it the `.txnindex` is left as it is."""
        self.offset_index.reset()
        self.time_index.reset()
        if producers is not None:
            self.txn_index.reset()
        file = self._reader()
        if self._size:
            data = mmap.mmap(file.fileno(), self._size, access=mmap.ACCESS_READ)
            try:
                valid, last_entry, self._max_timestamp, self._offset_of_max_timestamp = self._index_batches(
                    data, producers
                )
            finally:
                with contextlib.suppress(BufferError):  # a view still alive: GC unmaps it later
                    data.close()
        else:
            valid, last_entry, (self._max_timestamp, self._offset_of_max_timestamp) = 0, 0, _UNKNOWN
        truncated = self._size - valid
        if truncated:
            os.ftruncate(file.fileno(), valid)
            self._size = valid
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._bytes_since_last_index_entry = valid - last_entry
        self._rolling_based_timestamp = None
        self.needs_recovery = False
        return truncated

    def _index_batches(self, data: mmap.mmap, producers: ProducerStateManager | None) -> tuple[int, int, int, int]:
        """Validate batches from the start; index them, and replay them into `producers`.
        (valid bytes, last entry, max ts, its offset)."""
        valid = last_entry = 0
        max_timestamp, offset_of_max = _UNKNOWN
        expected = self.base_offset
        try:
            for position, header in iter_batches(data):
                validate_batch(data, position)
                if header.base_offset < expected or not self.offset_index.can_append_offset(
                    header.last_offset
                ):
                    break
                if producers is not None and header.producer_id >= 0:
                    marker = read_end_txn_marker(data, position) if header.is_control else None
                    aborted = producers.replay(header, marker)
                    if aborted is not None:
                        self.txn_index.append(aborted)
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                if valid - last_entry > self.index_interval_bytes and not self.offset_index.is_full:
                    self.offset_index.append(header.last_offset, valid)
                    self.time_index.maybe_append(max_timestamp, offset_of_max, skip_full_check=True)
                    last_entry = valid
                valid = position + header.size
                expected = header.next_offset
        except DecodeError:
            pass  # CorruptRecordError included: everything from `valid` on is dropped
        if producers is not None:
            producers.update_map_end_offset(expected)
        return valid, last_entry, max_timestamp, offset_of_max

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Drop the batch holding `offset` and everything after; returns bytes removed.

        The segment becomes the active one, so its indexes are preallocated again.
        """
        found = self._translate_offset(offset, self._size)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes(self.max_index_size)
        if found is None:
            return 0
        position = found[0]
        truncated = self._size - position
        os.ftruncate(self._reader().fileno(), position)
        self._size = position
        if position == 0:
            self.created_ms = _now_ms() if now_ms is None else now_ms
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._recompute_max_timestamp()
        return truncated

    def _recompute_max_timestamp(self) -> None:
        """Max timestamp after truncation: the time index's last entry, then headers after it."""
        last = self.time_index.last_entry
        best = (last.timestamp, last.offset) if self.time_index.entries else _UNKNOWN
        start = self.offset_index.lookup(last.offset).position if self.time_index.entries else 0
        for _, header in self._scan(start, self._size):
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.last_offset)
        self._max_timestamp, self._offset_of_max_timestamp = best

    # --- lifecycle ----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the `.log` and write and fsync the indexes."""
        file = self._reader()
        os.fsync(file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Record the max timestamp, trim the indexes and close everything (no fsync)."""
        if self._closed:
            return
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._close_file()

    def abandon(self) -> None:
        """Close the file and index maps without the trim and writes of `close` (its log dir
        failed: nothing more may be written there)."""
        self.offset_index.abandon()
        self.time_index.abandon()
        with contextlib.suppress(OSError):
            self._close_file()

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the files from `<name><old>` to `<name><new>`; open files and slices keep working."""
        new_log = _replace_suffix(self.log_path, old, new)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(_replace_suffix(index.path, old, new))

    def mark_deleted(self) -> None:
        """Rename the files to `*.deleted`; open slices keep working until `delete()`."""
        self.change_file_suffixes("", DELETED_SUFFIX)

    def delete(self) -> None:
        """Close and remove the files (under whichever names they have now)."""
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self._close_file()
        self.log_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, path={str(self.log_path)!r})"
