"""Opening a partition directory: find segments, recover what may be torn, set the offsets.

Clean shutdown works as in Kafka: LogManager writes `.kafka_cleanshutdown` in the log dir
root after flushing and closing every log, and deletes it once the logs are open again. A
log opened with `had_clean_shutdown=True` trusts its files (no scan) and its recovery point
becomes the log end offset. Otherwise every segment holding offsets at or after the
recovery point (from `recovery-point-offset-checkpoint`, 0 when unknown) is re-validated
batch by batch; the first bad batch ends the log, later segments are deleted, indexes are
rebuilt. A segment whose index is missing or fails its sanity check is rebuilt either way.
The same directory scan lists the `.snapshot` producer-state files for the log to load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.producer_state import parse_snapshot_name
from kbroker.log.segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from wire.exceptions import DecodeError

__all__ = ["LoadedLog", "load_segments", "segment_file_names"]

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".cleaned")


@dataclass
class LoadedLog:
    """What a partition directory holds once opened and, if needed, recovered."""

    segments: list[LogSegment]
    log_end_offset: int
    recovery_point: int
    log_start_offset: int
    truncated_bytes: int
    snapshot_offsets: list[int]


def _scan_directory(directory: Path) -> tuple[list[int], list[int]]:
    """Base offsets of the `.log` files and offsets of the `.snapshot` files; removes leftovers
    of interrupted deletes and orphan indexes."""
    bases: set[int] = set()
    snapshots: list[int] = []
    orphans: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        if path.name.endswith(_LEFTOVER_SUFFIXES):
            path.unlink(missing_ok=True)
            continue
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


def _recover(
    segments: list[LogSegment], recovery_point: int, had_clean_shutdown: bool
) -> tuple[list[LogSegment], int]:
    """Recover the segments that need it; a truncated unflushed segment ends the log."""
    truncated_total = 0
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        unflushed = not had_clean_shutdown and (following is None or following.base_offset > recovery_point)
        if not (unflushed or segment.needs_recovery):
            continue
        truncated = segment.recover()
        truncated_total += truncated
        if truncated and unflushed and following is not None:
            for later in segments[i + 1 :]:
                truncated_total += later.size
                later.delete()
            return segments[: i + 1], truncated_total
    return segments, truncated_total


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
    segments, truncated = _recover(segments, recovery_point, had_clean_shutdown)
    active = segments[-1]
    active.resize_indexes(config.max_index_size)
    try:
        log_end_offset = active.read_next_offset()
    except DecodeError:  # a damaged header in a "clean" active segment: recover it after all
        truncated += active.recover()
        active.resize_indexes(config.max_index_size)
        log_end_offset = active.read_next_offset()
    if had_clean_shutdown and not truncated:
        recovery_point = log_end_offset
    else:
        recovery_point = min(recovery_point, log_end_offset)
    log_start_offset = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
    return LoadedLog(segments, log_end_offset, recovery_point, log_start_offset, truncated, snapshots)


def segment_file_names(base_offset: int) -> tuple[str, str, str]:
    """The `.log`, `.index` and `.timeindex` names of a segment."""
    stem = f"{base_offset:020d}"
    return stem + LOG_SUFFIX, stem + INDEX_SUFFIX, stem + TIME_INDEX_SUFFIX
