"""`<base>.timeindex`: sparse map from timestamp to offset, Kafka's byte layout.

Each 12-byte entry is (timestamp: int64 BE, offset - base offset: int32 BE), strictly
ascending in timestamp. An entry (t, o) says: the largest timestamp in the segment up to
offset o is t. ListOffsets-by-timestamp and time-based retention read it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kbroker.log._index import FileIndex
from kbroker.log.errors import CorruptIndexError

__all__ = ["TimeIndex", "TimestampOffset"]

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(FileIndex):
    """Timestamp -> offset lookups; the last slot is reserved for the entry written on roll."""

    ENTRY = struct.Struct(">qi")
    SUFFIX = ".timeindex"

    def _entry(self, slot: int) -> TimestampOffset:
        timestamp, relative = self._read(slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def entry(self, n: int) -> TimestampOffset:
        if not 0 <= n < self._entries:
            raise IndexError(f"time index entry {n} out of range [0, {self._entries})")
        return self._entry(n)

    @property
    def is_full(self) -> bool:
        # Kafka keeps one slot free so rolling can always record the segment's max timestamp.
        return self._entries >= self.max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) when empty."""
        return (
            self._entry(self._entries - 1)
            if self._entries
            else TimestampOffset(NO_TIMESTAMP, self.base_offset)
        )

    def lookup(self, timestamp: int) -> TimestampOffset:
        """Greatest entry with timestamp <= `timestamp`, or (-1, base offset)."""
        slot = self._floor_slot(timestamp, 0)
        return self._entry(slot) if slot >= 0 else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if not skip_full_check and self.is_full:
            raise CorruptIndexError(f"{self.path}: time index is full ({self._entries} entries)")
        last = self.last_entry
        if self._entries and offset < last.offset:
            raise CorruptIndexError(f"{self.path}: offset {offset} is before the last entry's {last.offset}")
        if timestamp > last.timestamp:
            self._write(timestamp, self.relative_offset(offset))

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        self._truncate_to_field(offset - self.base_offset, 1)

    def sanity_check(self) -> None:
        if not self._entries:
            return
        first, last = self._entry(0), self._entry(self._entries - 1)
        if first.offset < self.base_offset or last.offset < first.offset or last.timestamp < first.timestamp:
            raise CorruptIndexError(f"{self.path}: entries {tuple(first)}..{tuple(last)} are out of order")
