"""Open files: one descriptor per partition (its active `.log`), none for indexes or idle old segments.

Counted in /proc/self/fd, the process's real table, so CPython's mmap dups count too.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.log import LogConfig, LogManager, OffsetIndex, OffsetPosition, PartitionLog
from kbroker.log._handles import HANDLES

from log_helpers import batch, index_entries, read_records

NOW = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 300

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc/self/fd")


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _open_under(root: Path) -> Counter[str]:
    """Descriptors open on files under `root`, by file suffix (".log", ".index", ...)."""
    counts: Counter[str] = Counter()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        if target.startswith(f"{root}/"):
            counts[Path(target.removesuffix(" (deleted)")).suffix] += 1
    return counts


@pytest.fixture
def small_cache() -> Iterator[int]:
    """A shared LRU of 4 handles, so evictions happen within a few segments."""
    before = HANDLES.capacity
    HANDLES.capacity = 4
    try:
        yield 4
    finally:
        HANDLES.capacity = before


def _fill_partitions(manager: LogManager, count: int) -> None:
    for partition in range(count):
        manager.create("wide", partition).append(batch(2, timestamp=NOW), NOW)


def test_a_written_partition_holds_one_descriptor(tmp_path: Path) -> None:
    before = _fd_count()
    with LogManager([tmp_path]) as manager:
        _fill_partitions(manager, PARTITIONS)
        grown = _fd_count() - before
        by_suffix = _open_under(tmp_path)
    assert PARTITIONS <= grown <= PARTITIONS + 5  # + the log dir's `.lock`
    assert by_suffix[".log"] == PARTITIONS
    assert by_suffix[".index"] == by_suffix[".timeindex"] == 0


def test_closing_the_manager_releases_every_descriptor(tmp_path: Path) -> None:
    before = _fd_count()
    with LogManager([tmp_path]) as manager:
        _fill_partitions(manager, 50)
    assert _open_under(tmp_path) == Counter()
    assert _fd_count() == before


def test_reopened_idle_partitions_hold_only_the_shared_cache(tmp_path: Path, small_cache: int) -> None:
    with LogManager([tmp_path]) as manager:
        _fill_partitions(manager, 60)
    with LogManager([tmp_path]) as manager:
        assert sum(_open_under(tmp_path).values()) <= small_cache + 1  # + `.lock`
        assert all(manager.get("wide", p).log_end_offset == 2 for p in range(60))
        assert [r.offset for r in read_records(manager.get("wide", 7))] == [0, 1]
        assert sum(_open_under(tmp_path).values()) <= small_cache + 1


def _many_segments(tmp_path: Path, segments: int = 30) -> PartitionLog:
    size = len(batch(1))
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=2 * size + 1), now_ms=NOW)
    for i in range(2 * segments):
        log.append(batch(1, timestamp=NOW + i), NOW)
    return log


def test_old_segments_hold_no_descriptor_while_idle(tmp_path: Path, small_cache: int) -> None:
    log = _many_segments(tmp_path)
    assert len(log.segments) == 30
    opened = _open_under(tmp_path)
    assert opened[".index"] == opened[".timeindex"] == 0
    assert opened[".log"] <= 1 + small_cache  # the active one, plus what the LRU keeps
    log.close()


def test_every_old_segment_is_still_readable_through_the_cache(tmp_path: Path, small_cache: int) -> None:
    log = _many_segments(tmp_path)
    assert [r.offset for r in read_records(log)] == list(range(60))
    assert log.offset_for_timestamp(NOW + 33).offset == 33
    assert sum(_open_under(tmp_path).values()) <= 1 + small_cache
    log.close()


def test_a_fetched_slice_outlives_its_file_leaving_the_cache(tmp_path: Path, small_cache: int) -> None:
    log = _many_segments(tmp_path)
    found = log.read(0, 1 << 20)
    expected = found.read_bytes()
    read_records(log, 10)  # reads every later segment: the first one's file is evicted
    assert found.read_bytes() == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the last holder closes it quietly
        del found
        gc.collect()
    assert _open_under(tmp_path)[".log"] <= 1 + small_cache
    log.close()


def test_duplicate_fd_of_an_idle_segment_survives_its_rename(tmp_path: Path, small_cache: int) -> None:
    log = _many_segments(tmp_path)
    first = log.segments[0]
    content = first.log_path.read_bytes()
    with log.lock:
        fd = first.duplicate_fd()
    try:
        first.mark_deleted()
        assert os.pread(fd, len(content) + 1, 0) == content
    finally:
        os.close(fd)
    log.close()


# --- indexes: in memory while appended to, written at flush, roll and close ------------------


def test_index_entries_reach_the_preallocated_file_at_flush(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 8 * 16)
    index.append(105, 4500)
    index.append(107, 9000)
    assert index_entries(index.path)[:2] == [(0, 0), (0, 0)]  # not written yet
    index.flush()
    assert index_entries(index.path)[:3] == [(5, 4500), (7, 9000), (0, 0)]
    assert index.path.stat().st_size == 8 * 16  # still preallocated


def test_truncated_entries_are_zeroed_in_the_file_at_the_next_flush(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 8 * 16)
    for i in range(1, 6):
        index.append(100 + i, 1000 * i)
    index.flush()
    index.truncate_to(103)
    index.flush()
    assert index_entries(index.path)[:4] == [(1, 1000), (2, 2000), (0, 0), (0, 0)]
    assert OffsetIndex(index.path, 100, 8 * 16).entries == 2


def test_a_trimmed_index_is_looked_up_from_its_file(tmp_path: Path, small_cache: int) -> None:
    indexes = []
    for base in (0, 1_000_000):
        index = OffsetIndex(tmp_path / f"{base:020d}.index", base, 8 * 2000)
        for i in range(1, 1001):
            index.append(base + 10 * i, 100 * i)
        index.trim_to_valid_size()
        indexes.append(index)
    for round_ in range(3):  # alternating between more indexes than the cache keeps maps of
        for index in indexes:
            base = index.base_offset
            assert index.lookup(base + 10 * 500 + round_) == OffsetPosition(base + 5_000, 50_000)
            assert index.lookup(base + 5) == OffsetPosition(base, 0)
            assert index.floor_by_position(75_050) == OffsetPosition(base + 7_500, 75_000)
    assert _open_under(tmp_path)[".index"] <= small_cache
    for index in indexes:
        index.close()
    assert _open_under(tmp_path)[".index"] == 0


_KILLED_AFTER_APPENDS = """
import os, sys
from pathlib import Path
from kbroker.log import LogManager
from wire.records import Record, build_batch
manager = LogManager([Path(sys.argv[1])])
log = manager.create("events", 0)
for i in range(200):
    log.append(build_batch([Record(0, 1000 + i, None, b"x" * 500, ())]), 1000 + i)
os._exit(0)  # no flush: the active index exists only in memory
"""


def test_an_index_lost_with_the_process_is_rebuilt_on_the_next_open(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_AFTER_APPENDS), str(tmp_path)],
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    index_path = tmp_path / "events-0" / "00000000000000000000.index"
    assert index_entries(index_path)[0] == (0, 0)  # preallocated zeros only
    with LogManager([tmp_path]) as manager:
        log = manager.get("events", 0)
        assert log.active_segment.offset_index.entries > 10
        assert log.log_end_offset == 200
        assert [r.offset for r in read_records(log, 150)] == list(range(150, 200))
        assert log.offset_for_timestamp(1_120).offset == 120
    assert len(index_entries(index_path)) > 10  # trimmed to the rebuilt entries on close
    assert (0, 0) not in index_entries(index_path)
