"""A partition's leader epochs and the offset each began at: Kafka's LeaderEpochFileCache.

Why: a replica returning after a leader change asks the leader where its last epoch ended and
truncates there (OffsetForLeaderEpoch, KIP-101); consumers ask the same to detect a truncated
log after a leader change (KIP-320). Answering needs the first offset of every epoch still in
the log, kept in memory and in the partition dir's `leader-epoch-checkpoint` (format in
kbroker.log.checkpoints). The owning PartitionLog's lock guards every call.

Kafka's rules, kept here:

- assign(epoch, start): only when `epoch` is not the latest one (or starts before it); entries
  whose epoch or start offset is at or above the new one's are dropped first, so epochs and
  start offsets both grow along the list. Written at once, so the file never misses an entry.
- truncate_from_start(log start offset): entries starting at or below it go, and the last of
  them comes back starting at it (retention, DeleteRecords).
- truncate_from_end(end offset): entries starting at or after it go (log truncation).
- end_offset_for(epoch, log end): the latest epoch ends at the log end; an older one where the
  next known epoch starts, reported as the largest known epoch at or below it (or as itself when
  it predates them all); (-1, -1) for epoch -1, for one newer than any known, or with no epochs.

Opening repeats the truncations against the loaded log (Kafka's LogLoader does too, as its
truncations are flushed in the background) and writes their result only with the next change:
a stale file is always a superset that the next load trims the same way. A missing or unreadable
file is rebuilt from the batches' partitionLeaderEpoch, as Kafka's recovery does for the
segments it scans (kbroker data dirs written before this file existed have none).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from kbroker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from wire.exceptions import DecodeError
from wire.records import BatchHeader

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1  # Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition; see the module docstring."""

    def __init__(self, path: Path, entries: Iterable[tuple[int, int]] = ()) -> None:
        self.path = Path(path)
        self._entries: list[EpochEntry] = []
        # read on every append, so that only a change of epoch costs more than one comparison
        self.latest_epoch = UNDEFINED_EPOCH
        for epoch, start_offset in entries:
            self._assign(EpochEntry(epoch, start_offset))
        self._saved = list(self._entries)  # what the file holds

    @classmethod
    def load(
        cls,
        directory: Path,
        log_start_offset: int,
        log_end_offset: int,
        batch_headers: Callable[[], Iterable[BatchHeader]],
    ) -> LeaderEpochCache:
        """The partition's cache, trimmed to [log start, log end]; `batch_headers` (every batch of
        the log, in order) is read only when the file has to be rebuilt."""
        path = Path(directory) / LEADER_EPOCH_CHECKPOINT
        try:
            saved = read_leader_epoch_checkpoint(path)
            cache = None if saved is None else cls(path, saved)
        except (CheckpointError, ValueError):
            cache = None  # rebuild rather than trust a damaged file
        if cache is None:
            cache = cls(path)
            cache._rebuild(batch_headers())
        cache._truncate_from_end(log_end_offset)
        cache._truncate_from_start(log_start_offset)
        return cache

    def _rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Kafka's LogSegment.recover rule: a batch starts its epoch when that epoch is newer than
        the latest seen; unstamped batches (-1) start none. Creates the file, empty if need be."""
        try:
            for header in headers:
                epoch = header.partition_leader_epoch
                if epoch > self.latest_epoch:
                    self._assign(EpochEntry(epoch, header.base_offset))
        except DecodeError:
            pass  # a damaged batch the loader trusted: keep the epochs read before it
        if self._entries:
            self._write()
        else:
            self.path.touch()  # Kafka's CheckpointFile creates the file, empty, when it is missing
            self._saved = []

    # --- reading ------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, by the rules in the module docstring."""
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries and entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(entries, requested_epoch, key=lambda e: e.epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:  # older than every known epoch: its data is gone, start from the first kept
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    # --- changes ------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op if it is already the latest)."""
        if self._assign(EpochEntry(epoch, start_offset)):
            self._save()

    def assign_appended(self, leader_epoch: int | None, headers: Sequence[BatchHeader], first_offset: int) -> None:
        """The append path's update, for appends whose `leader_epoch` is not the latest epoch.

        Batches the leader stamped (`leader_epoch` given) all carry it from `first_offset`;
        batches kept as written (a coordinator's, later a follower's copy) each start their
        own epoch at their new base offset, except unstamped ones (-1), which start none.
        """
        if leader_epoch is not None:
            self.assign(leader_epoch, first_offset)
            return
        changed = False
        base_offset = first_offset
        for header in headers:
            if header.partition_leader_epoch >= 0:
                changed |= self._assign(EpochEntry(header.partition_leader_epoch, base_offset))
            base_offset += header.last_offset_delta + 1
        if changed:
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start offset moved up to `start_offset` (retention, DeleteRecords)."""
        if self._truncate_from_start(start_offset):
            self._save()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to end at `end_offset`."""
        if self._truncate_from_end(end_offset):
            self._save()

    def clear(self) -> None:
        """Drop every entry (the log was emptied and restarted elsewhere)."""
        self._entries = []
        self.latest_epoch = UNDEFINED_EPOCH
        self._save()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        entries = self._entries
        if entries and entry.epoch == entries[-1].epoch and entry.start_offset >= entries[-1].start_offset:
            return False
        while entries and (entries[-1].epoch >= entry.epoch or entries[-1].start_offset >= entry.start_offset):
            entries.pop()
        entries.append(entry)
        self.latest_epoch = entry.epoch
        return True

    def _truncate_from_start(self, start_offset: int) -> bool:
        entries = self._entries
        gone = 0
        while gone < len(entries) and entries[gone].start_offset <= start_offset:
            gone += 1
        if gone == 0:
            return False
        moved = EpochEntry(entries[gone - 1].epoch, start_offset)
        if gone == 1 and entries[0] == moved:
            return False
        self._entries = [moved, *entries[gone:]]
        return True

    def _truncate_from_end(self, end_offset: int) -> bool:
        entries = self._entries
        if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
            return False
        while entries and entries[-1].start_offset >= end_offset:
            entries.pop()
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH
        return True

    def _save(self) -> None:
        if self._entries != self._saved:
            self._write()

    def _write(self) -> None:
        write_leader_epoch_checkpoint(self.path, self._entries)
        self._saved = list(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({str(self.path)!r}, {self._entries})"
