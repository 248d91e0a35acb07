"""Rolling hands the fsync of the old segments to the LogManager's background flusher, as Kafka's
roll schedules "flush-log": the produce request does not wait for it, the partition's lock is
not held during it, and the recovery point only moves up once the fsync is done.

The flusher is held up with real means: a task queued in front of the flush (the flusher runs
tasks in order), or a gate around os.fsync that delays the real fsync on the flusher's thread
only (before the first one, or after the directory's, i.e. between the sync and the recovery
point update).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbroker.log import LogConfig, LogManager, PartitionLog
from kbroker.log.checkpoints import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, read_offsets_checkpoint
from kbroker.log.cleaner import clean_log
from kbroker.log.flusher import FLUSHER_THREAD_NAME
from wire.records import Record, build_batch

from log_helpers import batch, read_records

WAIT_S = 10.0
TOPIC = "t"


class FsyncGate:
    """Delays the real fsync/fdatasync calls made on the flusher's thread until `release`."""

    def __init__(self, after_directory: bool) -> None:
        self.after_directory = after_directory  # pause once the directory is synced, not before the first sync
        self.reached = threading.Event()
        self._released = threading.Event()

    def wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def gated(fd: int) -> None:
            on_flusher = threading.current_thread().name == FLUSHER_THREAD_NAME
            if on_flusher and not self.after_directory:
                self._pause()
            real(fd)
            if on_flusher and self.after_directory and stat.S_ISDIR(os.fstat(fd).st_mode):
                self._pause()

        return gated

    def _pause(self) -> None:
        self.reached.set()
        self._released.wait(WAIT_S)

    def release(self) -> None:
        self._released.set()


def _install(monkeypatch: pytest.MonkeyPatch, after_directory: bool) -> Iterator[FsyncGate]:
    gate = FsyncGate(after_directory)
    monkeypatch.setattr(os, "fsync", gate.wrap(os.fsync))
    monkeypatch.setattr(os, "fdatasync", gate.wrap(os.fdatasync))
    yield gate
    gate.release()


@pytest.fixture
def gate_before_sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncGate]:
    yield from _install(monkeypatch, after_directory=False)


@pytest.fixture
def gate_after_sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncGate]:
    yield from _install(monkeypatch, after_directory=True)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"], LogConfig(file_delete_delay_ms=0))
    yield manager
    manager.close()


def _hold_flusher(manager: LogManager) -> threading.Event:
    """Queue a task that keeps the flusher busy until the returned event is set."""
    go = threading.Event()
    manager.flusher.schedule(lambda: go.wait(WAIT_S))
    return go


def _fill(log: PartitionLog, records: int) -> None:
    for _ in range(records):
        log.append(batch(1))
    log.update_high_watermark(log.log_end_offset)


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def _flusher_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("kbroker.log")]


# --- roll no longer waits for the fsync -----------------------------------------------------------


def test_a_roll_in_the_produce_path_returns_before_the_old_segment_is_fsynced(manager: LogManager) -> None:
    log = manager.create(TOPIC, 0, LogConfig(segment_bytes=2 * len(batch(1)) + 1))
    go = _hold_flusher(manager)
    _fill(log, 3)  # the third append rolls at offset 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.recovery_point == 0
    assert manager.flusher.pending == 2  # the holder and the flush of [0, 2)
    go.set()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 2


def test_a_roll_fsyncs_nothing_on_the_producing_thread_not_even_the_producer_snapshot(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 3)
    go = _hold_flusher(manager)
    synced_here: list[int] = []

    def recording(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if threading.current_thread() is threading.main_thread():
                synced_here.append(fd)
            real(fd)

        return sync

    monkeypatch.setattr(os, "fsync", recording(os.fsync))
    monkeypatch.setattr(os, "fdatasync", recording(os.fdatasync))
    log.roll()
    assert synced_here == []
    assert (log.dir / f"{3:020d}.snapshot").exists()  # written at roll, fsynced by the flush task
    go.set()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 3


def test_the_recovery_point_reaches_the_checkpoint_once_the_background_flush_ran(
    manager: LogManager, tmp_path: Path
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 3)
    log.roll()
    assert manager.wait_for_flushes(WAIT_S)
    manager.checkpoint()
    assert read_offsets_checkpoint(tmp_path / "logs" / RECOVERY_POINT_CHECKPOINT) == {(TOPIC, 0): 3}


def test_produce_to_the_partition_goes_on_while_its_segments_are_fsynced(
    manager: LogManager, gate_before_sync: FsyncGate
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 3)
    log.roll()
    assert gate_before_sync.reached.wait(WAIT_S)
    appended = threading.Event()
    producer = threading.Thread(target=lambda: (log.append(batch(1)), appended.set()), daemon=True)
    producer.start()
    assert appended.wait(WAIT_S), "an append waited for the background fsync"
    assert log.recovery_point == 0  # the fsync is still under way
    gate_before_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert (log.recovery_point, log.log_end_offset) == (3, 4)


def test_successive_rolls_move_the_recovery_point_to_the_last_rolled_base(manager: LogManager) -> None:
    log = manager.create(TOPIC, 0)
    go = _hold_flusher(manager)
    for _ in range(3):
        _fill(log, 2)
        log.roll()
    assert log.recovery_point == 0
    go.set()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 6


# --- never past what was really fsynced ----------------------------------------------------------


def test_a_truncation_between_the_fsync_and_its_completion_keeps_the_recovery_point(
    manager: LogManager, gate_after_sync: FsyncGate
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 4)
    log.roll()
    assert gate_after_sync.reached.wait(WAIT_S)  # [0, 4) synced, recovery point not yet moved
    log.truncate_to(2)
    _fill(log, 3)  # offsets 2-4 rewritten after the fsync: not durable
    gate_after_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 0


def test_explicit_flush_during_a_background_flush_still_fsyncs_synchronously(
    manager: LogManager, gate_before_sync: FsyncGate
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 3)
    log.roll()
    assert gate_before_sync.reached.wait(WAIT_S)
    _fill(log, 2)
    log.flush()  # on this thread: not gated, and does not wait for the flusher
    assert log.recovery_point == log.log_end_offset == 5
    gate_before_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 5  # the background flush to 3 never moves it back


def test_flush_messages_policy_flushes_in_the_append_path_even_with_the_flusher_busy(manager: LogManager) -> None:
    log = manager.create(TOPIC, 0, LogConfig(flush_interval_messages=1, segment_bytes=2 * len(batch(1)) + 1))
    go = _hold_flusher(manager)
    _fill(log, 5)
    assert len(log.segments) == 3
    assert log.recovery_point == 5
    go.set()


# --- closing and deleting while a flush is queued or under way -------------------------------------


def test_closing_a_log_during_its_background_flush_leaves_its_recovery_point_as_close_set_it(
    manager: LogManager, gate_after_sync: FsyncGate
) -> None:
    log = manager.create(TOPIC, 0)
    _fill(log, 4)
    log.roll()
    assert gate_after_sync.reached.wait(WAIT_S)
    log.close(flush=False)
    gate_after_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 0


def test_manager_close_during_a_background_flush_reopens_clean_without_recovery(
    tmp_path: Path, gate_before_sync: FsyncGate, caplog: pytest.LogCaptureFixture
) -> None:
    logs_dir = tmp_path / "logs"
    manager = LogManager([logs_dir])
    log = manager.create(TOPIC, 0)
    _fill(log, 4)
    log.roll()
    _fill(log, 2)
    assert gate_before_sync.reached.wait(WAIT_S)
    closer = threading.Thread(target=manager.close, daemon=True)
    closer.start()
    _wait_until(lambda: log.closed)  # closing the logs does not wait for the fsync under way
    gate_before_sync.release()
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert not manager.flusher.running
    assert (logs_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets_checkpoint(logs_dir / RECOVERY_POINT_CHECKPOINT) == {(TOPIC, 0): 6}
    with LogManager([logs_dir]) as reopened:
        again = reopened.get(TOPIC, 0)
        assert (again.recovery_point, again.log_end_offset, again.truncated_on_load) == (6, 6, 0)
        assert [r.offset for r in read_records(again)] == list(range(6))
    assert _flusher_errors(caplog) == []


def test_deleting_a_topic_while_its_flush_is_queued_leaves_the_flusher_working(
    manager: LogManager, caplog: pytest.LogCaptureFixture
) -> None:
    doomed, other = manager.create(TOPIC, 0), manager.create(TOPIC, 1)
    go = _hold_flusher(manager)
    _fill(doomed, 3)
    doomed.roll()
    assert manager.delete(TOPIC, 0)
    go.set()
    assert manager.wait_for_flushes(WAIT_S)
    assert doomed.recovery_point == 0
    _fill(other, 2)
    other.roll()
    assert manager.wait_for_flushes(WAIT_S)
    assert manager.flusher.running
    assert other.recovery_point == 2
    assert _flusher_errors(caplog) == []


def test_deleting_a_topic_during_its_fsync_does_not_break_the_flusher(
    manager: LogManager, gate_before_sync: FsyncGate, caplog: pytest.LogCaptureFixture
) -> None:
    doomed, other = manager.create(TOPIC, 0), manager.create(TOPIC, 1)
    _fill(doomed, 3)
    doomed.roll()
    assert gate_before_sync.reached.wait(WAIT_S)
    directory = doomed.dir
    assert manager.delete(TOPIC, 0)
    assert not directory.exists()
    gate_before_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert doomed.recovery_point == 0
    _fill(other, 2)
    other.roll()
    assert manager.wait_for_flushes(WAIT_S)
    assert other.recovery_point == 2
    assert _flusher_errors(caplog) == []


def test_retention_deleting_segments_with_a_flush_queued_moves_the_recovery_point_to_the_log_start(
    manager: LogManager, caplog: pytest.LogCaptureFixture
) -> None:
    log = manager.create(TOPIC, 0, LogConfig(retention_bytes=1, file_delete_delay_ms=0))
    go = _hold_flusher(manager)
    for _ in range(3):
        _fill(log, 2)
        log.roll()
    assert log.apply_retention() == 3
    assert [s.base_offset for s in log.segments] == [6]
    assert not (log.dir / "00000000000000000000.log").exists()
    go.set()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == log.log_start_offset == 6
    assert _flusher_errors(caplog) == []


def test_compaction_swapping_segments_during_the_fsync_keeps_the_log_consistent(
    manager: LogManager, gate_before_sync: FsyncGate, caplog: pytest.LogCaptureFixture
) -> None:
    log = manager.create(TOPIC, 0, LogConfig(cleanup_policy="compact"))
    for value in (b"1", b"2", b"3"):
        log.append(build_batch([Record(0, 1_000, b"key", value, ())]))
        log.update_high_watermark(log.log_end_offset)
        log.roll()
    assert gate_before_sync.reached.wait(WAIT_S)  # syncing [0, 1) while the next flushes queue
    assert clean_log(log) == 3
    gate_before_sync.release()
    assert manager.wait_for_flushes(WAIT_S)
    assert log.recovery_point == 3
    assert [(r.offset, r.value) for r in read_records(log)] == [(2, b"3")]
    assert _flusher_errors(caplog) == []
