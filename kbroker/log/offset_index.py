"""`<base>.index`: sparse map from offset to `.log` file position, Kafka's byte layout.

Each 8-byte entry is (offset - base offset: int32 BE, position: int32 BE), ascending in
both. An entry points at the start of an appended chunk and names the chunk's largest
offset, so "greatest entry <= target, then scan forward" always starts at or before the
batch holding the target.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kbroker.log._index import FileIndex
from kbroker.log.errors import CorruptIndexError

__all__ = ["OffsetIndex", "OffsetPosition"]


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(FileIndex):
    """Offset -> position lookups in O(log n) (binary search over the entries)."""

    ENTRY = struct.Struct(">ii")
    SUFFIX = ".index"

    def _entry(self, slot: int) -> OffsetPosition:
        relative, position = self._read(slot)
        return OffsetPosition(self.base_offset + relative, position)

    def entry(self, n: int) -> OffsetPosition:
        if not 0 <= n < self._entries:
            raise IndexError(f"index entry {n} out of range [0, {self._entries})")
        return self._entry(n)

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or (base offset, 0) when empty: where a scan to the end starts."""
        return self._entry(self._entries - 1) if self._entries else OffsetPosition(self.base_offset, 0)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def lookup(self, offset: int) -> OffsetPosition:
        """Greatest entry with offset <= `offset`, or (base offset, 0)."""
        slot = self._floor_slot(offset - self.base_offset, 0)
        return self._entry(slot) if slot >= 0 else OffsetPosition(self.base_offset, 0)

    def floor_by_position(self, position: int) -> OffsetPosition:
        """Greatest entry with position <= `position`, or (base offset, 0): a batch boundary."""
        slot = self._floor_slot(position, 1)
        return self._entry(slot) if slot >= 0 else OffsetPosition(self.base_offset, 0)

    def fetch_upper_bound_offset(self, position: int) -> int | None:
        """Offset of the first entry at or after file position `position`, or None: where Kafka ends the
        range a READ_COMMITTED fetch collects aborted transactions for (OffsetIndex.fetchUpperBoundOffset)."""
        slot = self._floor_slot(position - 1, 1) + 1
        return self._entry(slot).offset if slot < self._entries else None

    def append(self, offset: int, position: int) -> None:
        relative = self.relative_offset(offset)
        if self.is_full:
            raise CorruptIndexError(f"{self.path}: index is full ({self._entries} entries)")
        if self._entries:
            last = self._entry(self._entries - 1)
            if offset <= last.offset or position <= last.position:
                raise CorruptIndexError(
                    f"{self.path}: entry ({offset}, {position}) is not after {tuple(last)}"
                )
        self._write(relative, position)

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        self._truncate_to_field(offset - self.base_offset, 0)

    def sanity_check(self, log_size: int) -> None:
        """Kafka's load-time check, plus: no entry may point past the end of the log."""
        if not self._entries:
            return
        first, last = self._entry(0), self._entry(self._entries - 1)
        if first.offset < self.base_offset or last.offset < first.offset:
            raise CorruptIndexError(f"{self.path}: entries {tuple(first)}..{tuple(last)} are out of order")
        if last.position > log_size or first.position < 0:
            raise CorruptIndexError(
                f"{self.path}: position {last.position} is beyond the log ({log_size} bytes)"
            )
