"""What Kafka's two index files share: fixed-size big-endian entries in a memory-mapped file.

A new index is preallocated to `segment.index.bytes` (rounded down to whole entries) so the
active segment never grows it; when the segment stops being active the file is trimmed to
the entries in use, which is what Kafka leaves on disk. An existing file is taken as
written except for a trailing run of all-zero entries, which are preallocated slots left by
a crash (no valid entry is all zeros: the first offset-index entry always has position > 0).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar

from kbroker.log.errors import CorruptIndexError, LogSegmentOffsetOverflowError

__all__ = ["INT32_MAX", "MmapIndex"]

INT32_MAX = 2**31 - 1


class MmapIndex:
    """Base of OffsetIndex and TimeIndex: file, mapping, entry count, binary search."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mm: mmap.mmap | None = None
        self._length = 0
        self._closed = False
        self.newly_created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if self.newly_created:
                os.ftruncate(fd, self._round(max_index_size))
            self._length = os.fstat(fd).st_size
            if self._length % self.ENTRY.size:
                raise CorruptIndexError(
                    f"{self.path}: size {self._length} is not a multiple of {self.ENTRY.size}"
                )
            self._map(fd)
        finally:
            os.close(fd)
        self._entries = 0 if self.newly_created else self._count_used_entries()

    # --- file and mapping ---------------------------------------------------------------

    def _round(self, size: int) -> int:
        return max(0, size - size % self.ENTRY.size)

    def _map(self, fd: int) -> None:
        self._mm = mmap.mmap(fd, self._length) if self._length else None

    def _count_used_entries(self) -> int:
        """Entries before the trailing all-zero run (binary search: zeros form a suffix)."""
        size = self.ENTRY.size
        zero = bytes(size)
        lo, hi = 0, self._length // size
        while lo < hi:
            mid = (lo + hi) // 2
            if self._mm is not None and self._mm[mid * size : (mid + 1) * size] == zero:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def resize(self, new_size: int) -> None:
        """Grow (preallocate) or shrink the file and remap it; entries beyond the end are lost."""
        rounded = self._round(new_size)
        if rounded == self._length:
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, rounded)
            self._length = rounded
            self._map(fd)
        finally:
            os.close(fd)
        self._entries = min(self._entries, self.max_entries)

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the entries in use, as Kafka leaves an inactive index."""
        self.resize(self._entries * self.ENTRY.size)

    def reset(self) -> None:
        """Forget every entry and preallocate again (used before rebuilding from the log)."""
        self._truncate_entries(0)
        self.resize(self.max_index_size)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        """Trim and unmap; the file stays."""
        if self._closed:
            return
        self.trim_to_valid_size()
        self._unmap()

    def _unmap(self) -> None:
        self._closed = True
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def delete(self) -> None:
        self._unmap()
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: Path) -> None:
        """Move the file (the mapping stays valid), e.g. to its `.deleted` name."""
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
        assert self._mm is not None
        return self.ENTRY.unpack_from(self._mm, slot * self.ENTRY.size)

    def _write(self, *values: int) -> None:
        if self._entries >= self.max_entries:
            self.resize((self._entries + 1) * self.ENTRY.size)
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self._entries * self.ENTRY.size, *values)
        self._entries += 1

    def _truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries; zero the rest so a reload cannot mistake them for data."""
        if count < self._entries and self._mm is not None:
            size = self.ENTRY.size
            self._mm[count * size : self._entries * size] = bytes((self._entries - count) * size)
        self._entries = min(self._entries, count)

    def _floor_slot(self, target: int, field: int) -> int:
        """Slot of the last entry whose `field` is <= target, or -1 (fields ascend by slot)."""
        if self._entries == 0 or self._read(0)[field] > target:
            return -1
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._read(mid)[field] <= target:
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
