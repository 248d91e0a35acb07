"""What Kafka's two index files share: fixed-size big-endian entries, and where they live.

On disk nothing changed from Kafka: a new index is preallocated to `segment.index.bytes`
(rounded down to whole entries) so the active segment never grows it; when the segment
stops being active the file is trimmed to the entries in use. An existing file is taken as
written except for a trailing run of all-zero entries, which are preallocated slots left by
a crash (no valid entry is all zeros: the first offset-index entry always has position > 0).

What the process holds is what changed, so that a partition costs one descriptor (its
active `.log`) rather than three (CPython 3.11's mmap keeps a dup of the descriptor it maps):

- An index being appended to (preallocated: a new segment's, or one `resize`d up, as the
  loader does for the active segment) keeps its entries in a bytearray, the exact bytes of
  the file's used part. They reach the file, through a descriptor opened for the purpose,
  at `flush`, on trimming (roll, recovery, clean close) and on resizing. Until then a crash
  may leave fewer entries on disk than in memory; that is harmless because the loader
  rebuilds the last segment's indexes after any unclean shutdown, and every other segment
  was trimmed, hence written, before it stopped being the last.
- Any other index keeps no memory and no descriptor: lookups go through a read-only map
  of the file parked in the shared LRU of kbroker.log._handles, reopened when evicted. Its
  first and last entries, which loading and the segment's bookkeeping ask for, are read
  once when the file is opened.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from kbroker.log._handles import HANDLES
from kbroker.log.errors import CorruptIndexError, LogSegmentOffsetOverflowError

__all__ = ["INT32_MAX", "FileIndex"]

INT32_MAX = 2**31 - 1


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def _pread_exactly(fd: int, size: int, position: int) -> bytes:
    parts, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, position + done)
        if not chunk:
            raise CorruptIndexError(f"index file ends at {position + done}, {size - done} bytes short")
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


class FileIndex:
    """Base of OffsetIndex and TimeIndex: the file, the entries, binary search."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._length = 0  # bytes of the file
        self._entries = 0
        self._data: bytearray | None = None  # the entries, while the index is appended to
        self._synced = 0  # leading entries of _data that the file already holds
        self._on_disk = 0  # leading non-zero entries the file holds (stale ones get zeroed)
        self._edges: tuple[tuple[int, int], tuple[int, int]] | None = None  # first, last (no _data)
        self._needs_fsync = False
        self._closed = False
        self.newly_created = not self.path.exists()
        with self._opened(os.O_RDWR | os.O_CREAT) as fd:
            if self.newly_created:
                os.ftruncate(fd, self._round(max_index_size))
                self._needs_fsync = True
            self._length = os.fstat(fd).st_size
            if self._length % self.ENTRY.size:
                raise CorruptIndexError(f"{self.path}: size {self._length} is not a multiple of {self.ENTRY.size}")
            if self.newly_created:
                self._data = bytearray()
            else:
                self._entries = self._on_disk = self._count_used_entries(fd)
                self._edges = self._read_edges(fd)

    # --- the file -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _opened(self, flags: int = os.O_RDWR) -> Iterator[int]:
        """A descriptor for one operation; the index holds none between operations."""
        fd = os.open(self.path, flags, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    def _round(self, size: int) -> int:
        return max(0, size - size % self.ENTRY.size)

    def _slot_is_zero(self, fd: int, slot: int) -> bool:
        size = self.ENTRY.size
        return _pread_exactly(fd, size, slot * size) == bytes(size)

    def _count_used_entries(self, fd: int) -> int:
        """Entries before the trailing all-zero run (binary search: zeros form a suffix)."""
        lo, hi = 0, self._length // self.ENTRY.size
        if hi and not self._slot_is_zero(fd, hi - 1):
            return hi  # a trimmed file: every slot is an entry
        while lo < hi:
            mid = (lo + hi) // 2
            if self._slot_is_zero(fd, mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _read_edges(self, fd: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        if not self._entries:
            return None
        size = self.ENTRY.size
        first = self.ENTRY.unpack(_pread_exactly(fd, size, 0))
        last = self.ENTRY.unpack(_pread_exactly(fd, size, (self._entries - 1) * size))
        return first, last

    def _map(self) -> mmap.mmap:
        """A read-only map of the entries on disk, from (or into) the shared LRU."""
        return HANDLES.get(self, self._open_map)

    def _open_map(self) -> mmap.mmap:
        with self._opened(os.O_RDONLY) as fd:
            return mmap.mmap(fd, self._entries * self.ENTRY.size, access=mmap.ACCESS_READ)

    def _drop_map(self) -> None:
        """Unmap now: the file is about to change under it (a shrink under a map is SIGBUS)."""
        mapped = HANDLES.discard(self)
        if mapped is not None:
            with contextlib.suppress(BufferError):  # a view still alive: unmapped when it goes
                mapped.close()

    def _load(self, limit: int | None = None) -> None:
        """Take the (first `limit`) entries into memory before changing them."""
        if self._data is not None:
            return
        keep = self._entries if limit is None else min(limit, self._entries)
        size = self.ENTRY.size
        self._drop_map()
        if keep:
            with self._opened(os.O_RDONLY) as fd:
                self._data = bytearray(_pread_exactly(fd, keep * size, 0))
        else:
            self._data = bytearray()
        self._entries = self._synced = keep
        self._edges = None

    def _unload(self) -> None:
        """Back to reading from the file, which now holds every entry."""
        if self._data is None:
            return
        self._edges = (self._read(0), self._read(self._entries - 1)) if self._entries else None
        self._data = None

    def _sync(self, fd: int | None = None) -> None:
        """Write the entries the file lacks, and zeros over entries it holds that were dropped."""
        if not self._unwritten:
            return
        assert self._data is not None
        size = self.ENTRY.size
        start, end, stale = self._synced, self._entries, min(self._on_disk, self._length // size)
        payload = self._data[start * size : end * size] + bytes(max(0, stale - end) * size)
        if fd is None:
            with self._opened() as own_fd:
                _pwrite_all(own_fd, payload, start * size)
        else:
            _pwrite_all(fd, payload, start * size)
        self._synced = self._on_disk = end
        self._needs_fsync = True

    @property
    def _unwritten(self) -> bool:
        """Whether memory holds entries (or drops) that the file does not show yet."""
        return self._data is not None and (self._synced < self._entries or self._on_disk > self._entries)

    def resize(self, new_size: int) -> None:
        """Set the file's size: growing preallocates (the index is appended to from now on),
        shrinking loses the entries beyond the end."""
        rounded = self._round(new_size)
        if rounded == self._length:
            return
        if rounded > self._length:
            self._load()
        elif rounded < self._entries * self.ENTRY.size:
            self._truncate_entries(rounded // self.ENTRY.size)
        self._drop_map()
        with self._opened() as fd:
            os.ftruncate(fd, rounded)
            self._length = rounded
            self._on_disk = min(self._on_disk, rounded // self.ENTRY.size)
            self._sync(fd)
        self._needs_fsync = True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the entries in use, as Kafka leaves an inactive index; from now
        on lookups read the file."""
        self.resize(self._entries * self.ENTRY.size)
        self._sync()
        self._unload()

    def reset(self) -> None:
        """Forget every entry and preallocate again (used before rebuilding from the log)."""
        self._truncate_entries(0)
        self.resize(self.max_index_size)

    def flush(self) -> None:
        """Write what the file lacks and fdatasync it (Kafka forces the index's mapping: msync,
        which syncs data as fdatasync does)."""
        if self._closed or not (self._needs_fsync or self._unwritten):
            return
        with self._opened() as fd:
            self._sync(fd)
            if self._needs_fsync:
                os.fdatasync(fd)
                self._needs_fsync = False

    def close(self) -> None:
        """Trim, write and let go of the map; the file stays."""
        if self._closed:
            return
        self.trim_to_valid_size()
        self._release()

    def abandon(self) -> None:
        """Let go of the map without trimming or writing (its log dir failed: unwritten entries
        are lost, as in a crash, and rebuilt by recovery)."""
        self._release()

    def _release(self) -> None:
        self._closed = True
        self._drop_map()
        self._data = None

    def delete(self) -> None:
        self._release()
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: Path) -> None:
        """Move the file (a map stays valid; later writes go to the new name)."""
        if self.path.exists():
            os.rename(self.path, new_path)
        self.path = Path(new_path)

    # --- entries ------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY.size

    @property
    def size_bytes(self) -> int:
        """Bytes of the file in use (what trimming leaves)."""
        return self._entries * self.ENTRY.size

    def _read(self, slot: int) -> tuple[int, int]:
        if self._data is not None:
            return self.ENTRY.unpack_from(self._data, slot * self.ENTRY.size)
        if self._edges is not None and slot in (0, self._entries - 1):
            return self._edges[0] if slot == 0 else self._edges[1]
        return self.ENTRY.unpack_from(self._map(), slot * self.ENTRY.size)

    def _write(self, *values: int) -> None:
        if self._entries >= self.max_entries:
            self.resize((self._entries + 1) * self.ENTRY.size)
        self._load()
        assert self._data is not None
        self._data += self.ENTRY.pack(*values)
        self._entries += 1

    def _truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries; the file's copies of the rest are zeroed on the next
        write, so a reload cannot mistake them for data."""
        if count >= self._entries:
            return
        self._load(limit=count)
        assert self._data is not None
        del self._data[count * self.ENTRY.size :]
        self._entries = count
        self._synced = min(self._synced, count)

    def _floor_slot(self, target: int, field: int) -> int:
        """Slot of the last entry whose `field` is <= target, or -1 (fields ascend by slot)."""
        if self._entries == 0 or self._read(0)[field] > target:
            return -1
        if self._read(self._entries - 1)[field] <= target:
            return self._entries - 1
        view = self._data if self._data is not None else self._map()  # held for the whole search
        unpack, size = self.ENTRY.unpack_from, self.ENTRY.size
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if unpack(view, mid * size)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_to_field(self, target: int, field: int) -> None:
        """Drop entries whose `field` is >= target."""
        self._truncate_entries(self._floor_slot(target - 1, field) + 1)

    def relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} does not fit an index with base offset {self.base_offset}"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX
