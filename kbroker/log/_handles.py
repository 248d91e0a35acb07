"""Open files and index maps of segments nobody writes to, shared and bounded by one LRU.

Only the active segment of a partition keeps its `.log` open for good (it is written to);
every other segment, and every index that is not being appended to, opens on demand and
parks what it opened here. The cache holds at most `capacity` of them for the whole
process, so a broker with 10,000 partitions needs about one descriptor per partition plus
this many, instead of three per segment.

Evicting only drops the cache's reference: a FileSlice still being sent, or a lookup still
running, keeps its file or map open, which then closes when that last holder lets go (a
`SegmentFile` closes quietly, an mmap unmaps). An owner that closes or deletes its files
takes its handle back with `discard` and closes it at once.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["HANDLES", "HandleCache", "SegmentFile", "open_segment_file"]

DEFAULT_CAPACITY = 256

T = TypeVar("T")


class SegmentFile(io.FileIO):
    """A `.log` file object that may outlive its segment's interest in it (see the module
    docstring); it closes when the last reference goes, without a ResourceWarning."""

    def __del__(self) -> None:
        self.close()


def _open_existing(path: str, flags: int) -> int:
    return os.open(path, flags & ~os.O_CREAT, 0o666)


def open_segment_file(path: os.PathLike[str] | str) -> SegmentFile:
    """Open an existing `.log` for reading and appending (O_APPEND: a seek by sendfile's
    fallback can never move where writes land)."""
    return SegmentFile(path, "a+", opener=_open_existing)


class HandleCache:
    """A thread-safe LRU from an owner object (compared by identity) to its open handle.

    Threads: the event loop and the log cleaner use different logs' segments at once, so
    every operation takes the cache's own lock; opening happens under it too (one syscall).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._handles: OrderedDict[int, tuple[object, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._handles)

    def get(self, owner: object, opener: Callable[[], T]) -> T:
        """The owner's handle, opened with `opener` when it has none; marks it recently used."""
        key = id(owner)
        with self._lock:
            entry = self._handles.get(key)
            if entry is not None:
                self._handles.move_to_end(key)
                return entry[1]
            handle = opener()
            self._handles[key] = (owner, handle)
            while len(self._handles) > max(self.capacity, 1):
                self._handles.popitem(last=False)  # the last holder closes it (module docstring)
            return handle

    def peek(self, owner: object) -> Any | None:
        """The owner's handle if one is open, without opening or reordering."""
        entry = self._handles.get(id(owner))
        return entry[1] if entry is not None and entry[0] is owner else None

    def put(self, owner: object, handle: object) -> None:
        """Park a handle the owner opened itself (a segment that stopped being written)."""
        with self._lock:
            self._handles[id(owner)] = (owner, handle)
            self._handles.move_to_end(id(owner))
            while len(self._handles) > max(self.capacity, 1):
                self._handles.popitem(last=False)

    def discard(self, owner: object) -> Any | None:
        """Remove and return the owner's handle (None if it has none); the caller closes or keeps it."""
        with self._lock:
            entry = self._handles.pop(id(owner), None)
        return entry[1] if entry is not None else None


HANDLES = HandleCache()
