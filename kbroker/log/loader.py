"""Opening a partition directory: find segments, recover what may be torn, set the offsets.

Clean shutdown works as in Kafka: LogManager writes `.kafka_cleanshutdown` in the log dir
root after flushing and closing every log, and deletes it once the logs are open again. A
log opened with `had_clean_shutdown=True` trusts its files (no scan) and its recovery point
becomes the log end offset. Otherwise every segment holding offsets at or after the
recovery point (from `recovery-point-offset-checkpoint`, 0 when unknown) is re-validated
batch by batch; the first bad batch ends the log, later segments are deleted, indexes are
rebuilt. A segment whose index is missing or fails its sanity check is rebuilt either way.
The same directory scan lists the `.snapshot` producer-state files for the log to load.

Recovering a segment also rebuilds its `.txnindex`, which needs the producers' open
transactions as of the segment's start, as Kafka's recoverSegment does: a producer state of
its own is loaded from the latest snapshot at or below the segment's base offset and caught
up by replaying the batches in between; it then follows the segment's batches (and those of
the segments recovered right after it), and a snapshot is taken at the end of each recovered
segment so that the log's own producer state replays nothing twice.

Leftovers of the log cleaner are settled first, as Kafka's LogLoader does: `*.deleted` files
go; `*.cleaned` files (a cleaning that never reached its swap) go, and so does any `*.swap`
at or above the lowest `.cleaned` base offset; each remaining `<base>.log.swap` is a cleaned
segment whose swap was interrupted, so the old segment files in [base, its next offset) are
deleted and the `.swap` files renamed into place.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbroker.log.checkpoints import fsync_dir
from kbroker.log.config import LogConfig
from kbroker.log.producer_state import ProducerStateManager, parse_snapshot_name
from kbroker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from kbroker.logs import partition_fields
from wire.exceptions import DecodeError
from wire.records import HEADER_SIZE, MIN_BATCH_LENGTH, read_batch_header

__all__ = ["LoadedLog", "load_segments", "replay_producer_state", "segment_file_names"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
_SEGMENT_FILE_ANY_STATE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.\w+)?$")


@dataclass
class LoadedLog:
    """What a partition directory holds once opened and, if needed, recovered."""

    segments: list[LogSegment]
    log_end_offset: int
    recovery_point: int
    log_start_offset: int
    truncated_bytes: int
    snapshot_offsets: list[int]


def _base_offset(name: str) -> int | None:
    match = _SEGMENT_FILE_ANY_STATE.match(name)
    return int(match.group(1)) if match else None


def _next_offset_of_log_file(path: Path, base_offset: int) -> int:
    """Offset after the last whole batch of a `.log` file, read header by header."""
    next_offset = base_offset
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            try:
                header = read_batch_header(os.pread(fd, HEADER_SIZE, position))
            except DecodeError:
                break
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                break
            next_offset = header.next_offset
            position += header.size
    finally:
        os.close(fd)
    return next_offset


def _settle_cleaner_leftovers(directory: Path) -> None:
    """Finish or undo interrupted cleaner swaps (see the module docstring), as Kafka's LogLoader."""
    swaps: list[Path] = []
    min_cleaned: int | None = None
    for path in list(directory.iterdir()):
        if path.name.endswith(DELETED_SUFFIX):
            path.unlink(missing_ok=True)
        elif path.name.endswith(CLEANED_SUFFIX):
            base = _base_offset(path.name[: -len(CLEANED_SUFFIX)])
            if base is not None:
                min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
            path.unlink(missing_ok=True)
        elif path.name.endswith(SWAP_SUFFIX):
            swaps.append(path)
    if min_cleaned is not None:
        for path in [p for p in swaps if (_base_offset(p.name[: -len(SWAP_SUFFIX)]) or 0) >= min_cleaned]:
            path.unlink(missing_ok=True)
            swaps.remove(path)
    if not swaps:
        return
    ranges = []
    for path in swaps:
        stem = path.name[: -len(SWAP_SUFFIX)]
        base = _base_offset(stem)
        if base is not None and stem.endswith(LOG_SUFFIX):
            ranges.append((base, _next_offset_of_log_file(path, base)))
    if ranges:
        low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
        for path in list(directory.iterdir()):
            base = _base_offset(path.name)
            if base is not None and low <= base < high and not path.name.endswith(SWAP_SUFFIX):
                path.unlink(missing_ok=True)  # replaced by the cleaned segment but not yet renamed away
    for path in swaps:
        os.rename(path, path.with_name(path.name[: -len(SWAP_SUFFIX)]))
    fsync_dir(directory)


def _scan_directory(directory: Path) -> tuple[list[int], list[int]]:
    """Base offsets of the `.log` files and offsets of the `.snapshot` files; settles cleaner
    leftovers and removes orphan indexes."""
    _settle_cleaner_leftovers(directory)
    bases: set[int] = set()
    snapshots: list[int] = []
    orphans: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match is None:
            snapshot = parse_snapshot_name(path.name)
            if snapshot is not None:
                snapshots.append(snapshot)
            continue
        base = int(match.group(1))
        if match.group(2) == LOG_SUFFIX:
            bases.add(base)
        else:
            orphans.append((base, path))
    for base, path in orphans:
        if base not in bases:
            path.unlink(missing_ok=True)
    return sorted(bases), sorted(snapshots)


def _open_segment(directory: Path, base: int, config: LogConfig, now_ms: int) -> LogSegment:
    return LogSegment(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.max_index_size,
        now_ms=now_ms,
    )


def replay_producer_state(state: ProducerStateManager, segments: Sequence[LogSegment], start: int,
                          end: int | None = None) -> None:
    """Feed `state` every batch ending at or after `start` (and starting below `end`), reading the marker
    of each control batch. A damaged header ends the replay: what was read is kept (the segments are
    trusted here; producers missing from the table are accepted at any sequence anyway)."""
    bases = [s.base_offset for s in segments]
    first = max(0, bisect.bisect_right(bases, start) - 1)
    try:
        for segment in segments[first:]:
            if end is not None and segment.base_offset >= end:
                return
            position = segment.position_of(start) if segment.base_offset < start else 0
            for batch_position, header in segment.batch_headers(position):
                if end is not None and header.base_offset >= end:
                    return
                if header.last_offset < start:
                    continue
                marker = None
                if header.is_control and header.producer_id >= 0:
                    marker = segment.end_txn_marker_at(batch_position, header)
                state.replay(header, marker)
    except DecodeError:
        pass


class _RecoveryProducers:
    """Producer states for recovering segments, one per run of consecutive recovered segments (see the
    module docstring)."""

    def __init__(self, directory: Path, config: LogConfig, snapshots: Sequence[int], log_start_offset: int,
                 now_ms: int) -> None:
        self.directory, self.config, self.now_ms = directory, config, now_ms
        self.snapshots, self.log_start_offset = list(snapshots), log_start_offset
        self.used = False
        self._state: ProducerStateManager | None = None
        self._next_index = -1  # the segment the current state has reached the start of

    def at(self, segments: Sequence[LogSegment], index: int) -> ProducerStateManager:
        """The producer state as of segments[index]'s base offset."""
        if self._state is not None and self._next_index == index:
            return self._state
        base = segments[index].base_offset
        state = ProducerStateManager(self.directory, [s for s in self.snapshots if s <= base],
                                     self.config.producer_id_expiration_ms)
        state.truncate_and_reload(self.log_start_offset, base, self.now_ms)
        start = max(state.map_end_offset, self.log_start_offset)
        if start < base:
            replay_producer_state(state, segments[:index], start, base)
        state.update_map_end_offset(base)
        self._state, self.used = state, True
        return state

    def recovered(self, index: int) -> None:
        """segments[index] was recovered with the current state: snapshot it (Kafka does, so no later
        step replays the segment again); the state goes on with the next segment."""
        assert self._state is not None
        if self._state.take_snapshot() is not None:
            self.snapshots.append(self._state.map_end_offset)
        self._next_index = index + 1


def _recover(
    segments: list[LogSegment], recovery_point: int, had_clean_shutdown: bool, producers: _RecoveryProducers
) -> tuple[list[LogSegment], int]:
    """Recover the segments that need it; a truncated unflushed segment ends the log."""
    truncated_total = 0
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        unflushed = not had_clean_shutdown and (following is None or following.base_offset > recovery_point)
        if not (unflushed or segment.needs_recovery):
            continue
        _log_recovery(segment, unflushed)
        truncated = segment.recover(producers.at(segments, i))
        if truncated:
            log.warning("[LogLoader %s] Truncated %d invalid bytes at the end of segment %d", _ident(segment),
                        truncated, segment.base_offset, extra=_fields(segment))
        producers.recovered(i)
        truncated_total += truncated
        if truncated and unflushed and following is not None:
            for later in segments[i + 1 :]:
                truncated_total += later.size
                later.delete()
            return segments[: i + 1], truncated_total
    return segments, truncated_total


def _log_recovery(segment: LogSegment, unflushed: bool) -> None:
    if unflushed:
        if segment.size == 0:
            return  # nothing to read (e.g. a log just created): not worth a line
        log.info("[LogLoader %s] Recovering unflushed segment %d", _ident(segment), segment.base_offset,
                 extra=_fields(segment))
    else:
        log.warning("[LogLoader %s] Found a corrupted index file corresponding to log file %s, recovering segment "
                    "and rebuilding index files...", _ident(segment), segment.log_path, extra=_fields(segment))


def _ident(segment: LogSegment) -> str:
    directory = segment.log_path.parent
    return f"partition={directory.name}, dir={directory.parent}"


def _fields(segment: LogSegment) -> dict[str, object]:
    return {**partition_fields(segment.log_path.parent), "offset": segment.base_offset}


def _snapshot_offsets(directory: Path) -> list[int]:
    return sorted(o for o in (parse_snapshot_name(p.name) for p in directory.iterdir()) if o is not None)


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    had_clean_shutdown: bool,
    now_ms: int,
) -> LoadedLog:
    """Open (creating if needed) a partition directory and bring it to a consistent state."""
    directory.mkdir(parents=True, exist_ok=True)
    bases, snapshots = _scan_directory(directory)
    segments = [_open_segment(directory, base, config, now_ms) for base in bases]
    if not segments:
        segments = [_open_segment(directory, max(log_start_offset, 0), config, now_ms)]
    producers = _RecoveryProducers(directory, config, snapshots, log_start_offset, now_ms)
    segments, truncated = _recover(segments, recovery_point, had_clean_shutdown, producers)
    active = segments[-1]
    active.resize_indexes(config.max_index_size)
    try:
        log_end_offset = active.read_next_offset()
    except DecodeError:  # a damaged header in a "clean" active segment: recover it after all
        truncated += active.recover(producers.at(segments, len(segments) - 1))
        producers.recovered(len(segments) - 1)
        active.resize_indexes(config.max_index_size)
        log_end_offset = active.read_next_offset()
    if producers.used:  # snapshots were taken (and corrupt ones deleted) on the way
        snapshots = _snapshot_offsets(directory)
    if had_clean_shutdown and not truncated:
        recovery_point = log_end_offset
    else:
        recovery_point = min(recovery_point, log_end_offset)
    log_start_offset = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
    return LoadedLog(segments, log_end_offset, recovery_point, log_start_offset, truncated, snapshots)


def segment_file_names(base_offset: int) -> tuple[str, str, str, str]:
    """The `.log`, `.index`, `.timeindex` and `.txnindex` names of a segment."""
    stem = f"{base_offset:020d}"
    return stem + LOG_SUFFIX, stem + INDEX_SUFFIX, stem + TIME_INDEX_SUFFIX, stem + TXN_INDEX_SUFFIX
