"""A log dir that fails goes offline, as Kafka's LogDirFailureChannel + LogManager.handleLogDirFailure:
its logs are closed without writing, its `.lock` released, nothing more is written into it,
new partitions go elsewhere, and a restart recovers it.

Failures are real where they can be: a checkpoint whose target is a directory (os.replace
fails), a partition directory moved away under a log that then rolls. A failing fsync cannot be
produced on demand, so that one case patches os.fsync/os.fdatasync to raise EIO for
descriptors of files under the failing dir only (said again in its test).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.log import LogConfig, LogManager
from kbroker.log.checkpoints import CLEAN_SHUTDOWN_FILE, LOCK_FILE, RECOVERY_POINT_CHECKPOINT
from kbroker.log.cleaner import CLEANER_OFFSET_CHECKPOINT, CleanerConfig
from kbroker.log.errors import LogDirOfflineError
from wire.records import Record, build_batch

from log_helpers import read_records

WAIT_S = 10.0
SMALL_SEGMENTS = LogConfig(segment_bytes=300)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "a", tmp_path / "b"


@pytest.fixture
def manager(dirs: tuple[Path, Path]) -> Iterator[LogManager]:
    logs = LogManager(list(dirs), SMALL_SEGMENTS)
    yield logs
    logs.close()


def _batch(value: bytes) -> bytes:
    return build_batch([Record(0, 1_000, None, value, [])])


def _fill(manager: LogManager, topic: str, partition: int, count: int) -> list[bytes]:
    log = manager.get(topic, partition)
    values = [f"{topic}-{partition}-{i}".encode() * 8 for i in range(count)]
    for value in values:
        log.append(_batch(value))
    return values


def _values(log) -> list[bytes]:
    return [record.value for record in read_records(log)]


def _break_checkpoint(log_dir: Path) -> None:
    """A directory (not empty) where the checkpoint must go: os.replace onto it fails with EISDIR."""
    target = log_dir / RECOVERY_POINT_CHECKPOINT
    target.unlink(missing_ok=True)
    (target / "in-the-way").mkdir(parents=True)


def _lockable(log_dir: Path) -> bool:
    fd = os.open(log_dir / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def test_a_checkpoint_write_that_fails_takes_its_dir_offline(manager, dirs):
    a, b = dirs
    manager.create("t", 0)  # in a
    manager.create("t", 1)  # in b
    _break_checkpoint(b)
    manager.checkpoint()
    assert (manager.offline_log_dirs, manager.live_log_dirs) == ([b], [a])
    assert manager.is_offline("t", 1) and manager.get("t", 1) is None
    assert not manager.is_offline("t", 0) and manager.get("t", 0) is not None


def test_the_other_dir_keeps_serving_after_one_fails(manager, dirs):
    manager.create("t", 0)
    manager.create("t", 1)
    _break_checkpoint(dirs[1])
    manager.checkpoint()
    values = _fill(manager, "t", 0, 20)  # rolls several times in the live dir
    assert _values(manager.get("t", 0)) == values


def test_a_failed_dir_releases_its_lock(manager, dirs):
    manager.create("t", 1)
    manager.create("t", 0)
    assert not _lockable(dirs[1])
    _break_checkpoint(dirs[1])
    manager.checkpoint()
    assert _lockable(dirs[1]) and not _lockable(dirs[0])


def test_new_partitions_go_to_live_dirs_only(manager, dirs):
    _break_checkpoint(dirs[1])
    manager.checkpoint()
    for partition in range(4):
        manager.create("new", partition)
    assert {manager.log_dir_of("new", p) for p in range(4)} == {dirs[0]}


def test_an_offline_partition_is_not_created_again_in_another_dir(manager, dirs):
    manager.create("t", 0)
    manager.create("t", 1)
    _break_checkpoint(dirs[1])
    manager.checkpoint()
    with pytest.raises(LogDirOfflineError):
        manager.create("t", 1)
    assert not (dirs[0] / "t-1").exists()


def test_a_partition_dir_moved_away_fails_its_log_dir_on_the_next_roll(manager, dirs):
    """A roll must create files in the partition's directory: with it gone, that is ENOENT."""
    manager.create("t", 0)
    log = manager.create("t", 1)
    moved = dirs[1] / "t-1.moved"
    os.rename(log.dir, moved)
    with pytest.raises(OSError) as failure:
        _fill(manager, "t", 1, 20)
    offline = manager.io_error(log, failure.value, "appending records to t-1")
    assert offline.error_code == 56  # KAFKA_STORAGE_ERROR
    assert manager.offline_log_dirs == [dirs[1]] and manager.is_offline("t", 1)


def test_close_leaves_a_failed_dir_without_clean_shutdown_marker_or_new_checkpoint(dirs):
    a, b = dirs
    manager = LogManager([a, b], SMALL_SEGMENTS)
    manager.create("t", 0)
    manager.create("t", 1)
    _fill(manager, "t", 1, 3)
    _break_checkpoint(b)
    manager.checkpoint()
    before = sorted(p.name for p in b.iterdir())
    manager.close()
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and not (b / CLEAN_SHUTDOWN_FILE).exists()
    assert sorted(p.name for p in b.iterdir()) == before


def test_a_restart_recovers_the_failed_dir_with_what_was_written_before(dirs):
    a, b = dirs
    manager = LogManager([a, b], SMALL_SEGMENTS)
    manager.create("t", 0)
    manager.create("t", 1)
    written = _fill(manager, "t", 1, 12)
    _break_checkpoint(b)
    manager.checkpoint()
    manager.close()
    (b / RECOVERY_POINT_CHECKPOINT / "in-the-way").rmdir()  # the repair
    (b / RECOVERY_POINT_CHECKPOINT).rmdir()
    with LogManager([a, b], SMALL_SEGMENTS) as reopened:
        assert reopened.live_log_dirs == [a, b]
        assert _values(reopened.get("t", 1)) == written


def test_the_last_live_dir_failing_tells_the_listener_none_is_left(manager, dirs):
    heard: list[tuple[Path, bool]] = []
    manager.on_dir_failure = lambda log_dir, all_failed: heard.append((log_dir, all_failed))
    _break_checkpoint(dirs[1])
    manager.checkpoint()
    _break_checkpoint(dirs[0])
    manager.checkpoint()
    assert heard == [(dirs[1], False), (dirs[0], True)]


def test_a_dir_fails_only_once(manager, dirs, caplog):
    heard: list[Path] = []
    manager.on_dir_failure = lambda log_dir, _all_failed: heard.append(log_dir)
    for _ in range(3):
        manager.fail_dir(dirs[1], OSError(errno.EIO, "Input/output error"), "writing something")
    assert heard == [dirs[1]]
    assert sum("Error while writing something in dir" in r.getMessage() for r in caplog.records) == 1


def test_a_failed_fsync_in_the_background_flush_takes_its_dir_offline(manager, dirs, monkeypatch):
    """Injected at the OS-call boundary: os.fsync/os.fdatasync raise EIO for descriptors of files
    under dir b (a real failing fsync cannot be produced on demand)."""
    failing = str(dirs[1])

    def wrap(real):
        def sync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(failing + os.sep):
                raise OSError(errno.EIO, "Input/output error")
            real(fd)
        return sync

    monkeypatch.setattr(os, "fsync", wrap(os.fsync))
    monkeypatch.setattr(os, "fdatasync", wrap(os.fdatasync))
    manager.create("t", 0)
    log = manager.create("t", 1)
    log.append(_batch(b"x" * 200))
    log.roll()  # schedules the background flush of the first segment
    assert manager.wait_for_flushes(WAIT_S)
    assert manager.offline_log_dirs == [dirs[1]] and manager.is_offline("t", 1)
    assert log.closed and log.recovery_point == 0


def _compacted_manager(dirs: tuple[Path, Path]) -> tuple[LogManager, object]:
    """A manager whose topic `c` is compacted, with partition 0 in dir b, dirty and ready to clean."""
    compacted = LogConfig(segment_bytes=10_000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    manager = LogManager(list(dirs), SMALL_SEGMENTS, topic_configs={"c": compacted})
    manager.create("t", 0)  # dir a
    log = manager.create("c", 0)
    assert log.dir.parent == dirs[1]
    for i in range(20):
        log.append(build_batch([Record(0, 1_000, b"key-%d" % (i % 3), b"v%d" % i, [])]), 1_000)
    log.update_high_watermark(log.log_end_offset)
    log.roll(1_000)
    return manager, log


def test_a_cleaning_that_meets_a_disk_error_takes_its_dir_offline(dirs):
    """A directory where the cleaner must write the cleaned segment: removing or opening it fails."""
    manager, log = _compacted_manager(dirs)
    try:
        cleaner = manager.start_cleaner(CleanerConfig(threads=0))  # no thread: the pass runs here
        (log.dir / f"{0:020d}.log.cleaned" / "in-the-way").mkdir(parents=True)
        cleaner.run_once(2_000)
        assert manager.offline_log_dirs == [dirs[1]] and manager.is_offline("c", 0)
        assert not manager.is_offline("t", 0)
    finally:
        manager.close()


def test_a_cleaner_checkpoint_that_cannot_be_written_takes_its_dir_offline(dirs):
    manager, _ = _compacted_manager(dirs)
    try:
        cleaner = manager.start_cleaner(CleanerConfig(threads=0))
        in_the_way = dirs[1] / CLEANER_OFFSET_CHECKPOINT
        in_the_way.unlink(missing_ok=True)
        (in_the_way / "in-the-way").mkdir(parents=True)  # os.replace onto a non-empty directory fails
        cleaner.run_once(2_000)
        assert manager.offline_log_dirs == [dirs[1]]
    finally:
        manager.close()
