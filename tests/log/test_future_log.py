"""Moving a partition's log to another log dir (AlterReplicaLogDirs): the future log, its copy, the swap."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbroker.log import LogConfig, LogManager, PartitionLog
from kbroker.log.errors import LogDirOfflineError
from kbroker.log.future_log import copy_step
from wire.records import Record, build_batch, build_end_txn_batch

from log_helpers import batch, read_records

NOW = 1_700_000_000_000
CHUNK = 4096
SMALL_SEGMENTS = LogConfig(segment_bytes=2048)
PID = 4242


def _manager(tmp_path: Path, config: LogConfig = SMALL_SEGMENTS) -> LogManager:
    return LogManager([tmp_path / "a", tmp_path / "b"], config)


def _fill(log: PartitionLog, batches: int, epoch: int = 0) -> None:
    for _ in range(batches):
        log.append(batch(3), NOW, leader_epoch=epoch)


def _copy_until_caught_up(manager: LogManager, chunk: int = CHUNK) -> None:
    current, future = manager.get("t", 0), manager.future("t", 0)
    for _ in range(10_000):
        if copy_step(current, future, chunk):
            return
    raise AssertionError("the copy never caught up")


def _move(manager: LogManager, log_dir: Path) -> PartitionLog:
    assert manager.create_future("t", 0, log_dir)
    _copy_until_caught_up(manager)
    return manager.replace_current_with_future("t", 0)


def _everything(log: PartitionLog) -> bytes:
    return b"".join(log.read(s.base_offset, 1 << 30).read_bytes() for s in log.segments if s.size)


def test_a_moved_log_holds_the_same_bytes_at_the_same_offsets_in_the_new_dir(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        _fill(current, 30, epoch=0)
        _fill(current, 30, epoch=1)
        before = _everything(current)
        moved = _move(manager, tmp_path / "b")
        assert manager.get("t", 0) is moved and manager.log_dir_of("t", 0) == tmp_path / "b"
        assert moved.dir == tmp_path / "b" / "t-0"
        assert len(moved.segments) > 1 and _everything(moved) == before
        assert moved.log_end_offset == 180
        assert not (tmp_path / "a" / "t-0").exists()


def test_a_moved_log_keeps_its_leader_epochs_high_watermark_and_log_start(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        _fill(current, 10, epoch=2)
        _fill(current, 10, epoch=5)
        current.maybe_assign_epoch_start_offset(7, current.log_end_offset)  # a leader that wrote nothing yet
        current.update_high_watermark(45)
        current.delete_records_before(12)
        epochs = current.leader_epoch_cache.entries
        moved = _move(manager, tmp_path / "b")
        assert moved.leader_epoch_cache.entries == epochs
        assert (moved.log_start_offset, moved.high_watermark) == (12, 45)


def test_a_moved_log_keeps_its_producers_and_aborted_transactions(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000  # producers idle for producer.id.expiration.ms are not reloaded
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        current.append(build_batch([Record(0, now, None, b"in txn", ())], producer_id=PID, producer_epoch=0,
                                   base_sequence=0, is_transactional=True), now)
        current.append(build_end_txn_batch(False, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                                           timestamp=now), now, coordinator=True)
        current.update_high_watermark(current.log_end_offset)
        aborted = current.collect_aborted_transactions(0, current.log_end_offset)
        moved = _move(manager, tmp_path / "b")
        assert aborted and moved.collect_aborted_transactions(0, moved.log_end_offset) == aborted
        assert moved.producer_state.producers[PID].producer_epoch == 0


def test_records_appended_while_the_copy_runs_are_in_the_moved_log(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        _fill(current, 20)
        manager.create_future("t", 0, tmp_path / "b")
        for _ in range(5):
            copy_step(current, manager.future("t", 0), CHUNK)
            _fill(current, 2)
        _copy_until_caught_up(manager)
        moved = manager.replace_current_with_future("t", 0)
        assert [r.offset for r in read_records(moved)] == list(range(current.log_end_offset))


def test_a_truncation_of_the_current_log_during_the_copy_cuts_the_copy_where_they_agree(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        _fill(current, 10, epoch=0)
        manager.create_future("t", 0, tmp_path / "b")
        _copy_until_caught_up(manager)
        current.truncate_to(15)  # a follower meeting a new leader drops its tail, then takes the leader's
        # ... and grows past where the copy had got to (30)
        current.append_as_follower(build_batch([Record(15 + i, NOW, None, b"new leader", ()) for i in range(20)],
                                               base_offset=15, partition_leader_epoch=1), NOW)
        _copy_until_caught_up(manager)
        moved = manager.replace_current_with_future("t", 0)
        assert [r.value for r in read_records(moved, 15)] == [b"new leader"] * 20
        assert moved.log_end_offset == 35
        assert moved.leader_epoch_cache.entries == current.leader_epoch_cache.entries


def test_records_deleted_past_the_copy_restart_it_at_the_new_log_start(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        current = manager.create("t", 0)
        _fill(current, 40)
        manager.create_future("t", 0, tmp_path / "b")
        copy_step(current, manager.future("t", 0), 200)
        current.update_high_watermark(current.log_end_offset)
        current.delete_records_before(100)
        _copy_until_caught_up(manager)
        moved = manager.replace_current_with_future("t", 0)
        assert moved.log_start_offset == 100
        assert read_records(moved, 100)[0].offset == 100


def test_the_replaced_log_stays_readable_until_the_file_delete_delay_has_passed(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2048, file_delete_delay_ms=60_000)
    with _manager(tmp_path, config) as manager:
        current = manager.create("t", 0)
        _fill(current, 5)
        in_flight = current.read(0, 1 << 20)  # a fetch answer not sent yet
        _move(manager, tmp_path / "b")
        doomed = [d for d in (tmp_path / "a").iterdir() if d.name.endswith("-delete")]
        assert len(doomed) == 1 and in_flight.read_bytes()
        assert manager.purge_retired() == 0
        assert manager.purge_retired(NOW * 2) == 1
        assert not doomed[0].exists()


def test_moving_a_log_to_the_dir_it_is_in_starts_nothing_and_gives_up_a_move_elsewhere(tmp_path: Path) -> None:
    with LogManager([tmp_path / "a", tmp_path / "b", tmp_path / "c"]) as manager:
        manager.create("t", 0)
        home = manager.log_dir_of("t", 0)
        elsewhere = next(d for d in manager.log_dirs if d != home)
        assert manager.create_future("t", 0, elsewhere)
        assert not manager.create_future("t", 0, elsewhere)  # asked again while it moves
        assert not manager.create_future("t", 0, home)
        assert manager.future("t", 0) is None
        assert not [d for d in elsewhere.iterdir() if d.name.endswith("-future")]


def test_a_move_cut_short_by_a_restart_resumes_from_its_future_log(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        _fill(manager.create("t", 0), 30)
        manager.create_future("t", 0, tmp_path / "b")
        copy_step(manager.get("t", 0), manager.future("t", 0), CHUNK)
        copied = manager.future("t", 0).log.log_end_offset
    with _manager(tmp_path) as manager:
        future = manager.future("t", 0)
        assert future is not None and future.log_dir == tmp_path / "b"
        assert 0 < future.log.log_end_offset == copied < 90
        _copy_until_caught_up(manager)
        moved = manager.replace_current_with_future("t", 0)
        assert [r.offset for r in read_records(moved)] == list(range(90))


def test_a_future_log_found_without_its_current_log_is_the_partitions_log(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        _fill(manager.create("t", 0), 30)
        manager.create_future("t", 0, tmp_path / "b")
        _copy_until_caught_up(manager)
    # a crash between the swap's two renames: the current log was renamed for deletion, the future log not yet
    (tmp_path / "a" / "t-0").rename(tmp_path / "a" / f"t-0.{'0' * 32}-delete")
    with _manager(tmp_path) as manager:
        assert manager.log_dir_of("t", 0) == tmp_path / "b" and manager.future("t", 0) is None
        assert [r.offset for r in read_records(manager.get("t", 0))] == list(range(90))
        assert sorted(p.name for p in (tmp_path / "b").iterdir() if p.is_dir()) == ["t-0"]


def test_deleting_a_partition_deletes_its_future_log(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        _fill(manager.create("t", 0), 3)
        manager.create_future("t", 0, tmp_path / "b")
        manager.delete("t", 0)
        assert manager.future("t", 0) is None
        assert not [d for d in (tmp_path / "b").iterdir() if d.is_dir()]


def test_a_partition_asked_to_move_before_it_is_hosted_is_created_in_that_dir(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        manager.create("other", 0)  # in a; a new partition would go to the emptier b
        manager.prefer_log_dir("t", 0, tmp_path / "a")
        manager.create("t", 0)
        assert manager.log_dir_of("t", 0) == tmp_path / "a"


def test_no_future_log_is_created_while_a_log_dir_is_offline(tmp_path: Path) -> None:
    with LogManager([tmp_path / "a", tmp_path / "b", tmp_path / "c"]) as manager:
        manager.create("t", 0)
        home = manager.log_dir_of("t", 0)
        failed, target = [d for d in manager.log_dirs if d != home]
        manager.fail_dir(failed, OSError("disk gone"), "testing")
        with pytest.raises(LogDirOfflineError):
            manager.create_future("t", 0, target)


def test_a_log_dir_failing_under_a_move_stops_it(tmp_path: Path) -> None:
    with _manager(tmp_path) as manager:
        _fill(manager.create("t", 0), 3)
        manager.create_future("t", 0, tmp_path / "b")
        manager.fail_dir(tmp_path / "b", OSError("disk gone"), "testing")
        assert manager.future("t", 0) is None and manager.log_dir_of("t", 0) == tmp_path / "a"
