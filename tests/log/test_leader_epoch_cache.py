"""The leader epoch cache and its `leader-epoch-checkpoint` file, by Kafka's LeaderEpochFileCache
rules: where each epoch starts, how retention and truncation trim it, and how it is reloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import LogConfig, PartitionLog
from kbroker.log.checkpoints import CheckpointError, parse_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from kbroker.log.leader_epoch_cache import LeaderEpochCache

from log_helpers import batch

NOW = 1_700_000_000_000
CHECKPOINT = "leader-epoch-checkpoint"


def _log(directory: Path, **config: object) -> PartitionLog:
    return PartitionLog(directory, LogConfig(**config), now_ms=NOW)


def _append(log: PartitionLog, records: int = 1, *, epoch: int | None = 0, **batch_fields: object) -> None:
    log.append(batch(records, timestamp=NOW, **batch_fields), NOW, leader_epoch=epoch)


def _entries(log: PartitionLog) -> list[tuple[int, int]]:
    return [tuple(entry) for entry in log.leader_epoch_cache.entries]


def _cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / CHECKPOINT, entries)


# --- the file ------------------------------------------------------------------------------


def test_checkpoint_file_is_kafkas_format_byte_for_byte(tmp_path: Path) -> None:
    write_leader_epoch_checkpoint(tmp_path / CHECKPOINT, [(0, 0), (3, 120), (7, 9_000_000_000)])
    assert (tmp_path / CHECKPOINT).read_bytes() == b"0\n3\n0 0\n3 120\n7 9000000000\n"


def test_checkpoint_parser_reads_kafkas_whitespace_separated_lines() -> None:
    assert parse_leader_epoch_checkpoint("0\n2\n0  1\n1\t2\n") == [(0, 1), (1, 2)]


@pytest.mark.parametrize("text", ["1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\n0 0 0\n", "0\n1\nzero 0\n"])
def test_checkpoint_parser_refuses_malformed_files(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_leader_epoch_checkpoint(text)


def test_new_partition_gets_an_empty_checkpoint_file(tmp_path: Path) -> None:
    _log(tmp_path / "t-0")
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b""


def test_first_batch_of_an_epoch_writes_its_start_offset(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    _append(log, 3)
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n1\n0 0\n"


def test_appends_in_the_same_epoch_leave_the_file_alone(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    _append(log)
    written = (tmp_path / "t-0" / CHECKPOINT).stat().st_ino  # every write replaces the file
    for _ in range(5):
        _append(log)
    assert (tmp_path / "t-0" / CHECKPOINT).stat().st_ino == written


def test_a_new_epoch_starts_at_the_first_offset_of_its_first_append(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    _append(log, 4)
    _append(log, 2, epoch=3)
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n2\n0 0\n3 4\n"


def test_batches_kept_as_written_start_their_own_epochs(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(batch(2, partition_leader_epoch=1) + batch(3, partition_leader_epoch=2), NOW)
    assert _entries(log) == [(1, 0), (2, 2)]


def test_unstamped_batches_start_no_epoch(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.append(batch(2), NOW, coordinator=True)  # build_batch leaves partitionLeaderEpoch at -1
    assert _entries(log) == []


def test_leader_taking_over_marks_its_epoch_at_the_log_end(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    _append(log, 5, epoch=None)
    log.maybe_assign_epoch_start_offset(0, log.log_end_offset)
    assert _entries(log) == [(0, 5)]


# --- assign ---------------------------------------------------------------------------------


def test_assigning_the_latest_epoch_again_changes_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(0, 0), (2, 10)])
    cache.assign(2, 15)
    assert cache.entries == ((0, 0), (2, 10))


def test_assigning_an_older_epoch_drops_the_entries_it_conflicts_with(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(0, 0), (2, 10), (4, 20)])
    cache.assign(3, 15)
    assert cache.entries == ((0, 0), (2, 10), (3, 15))


def test_assigning_an_earlier_start_to_the_latest_epoch_moves_it(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(0, 0), (2, 10)])
    cache.assign(2, 5)
    assert cache.entries == ((0, 0), (2, 5))


def test_negative_epochs_and_offsets_are_refused(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [])
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


# --- end offsets ----------------------------------------------------------------------------


def test_latest_epoch_ends_at_the_log_end(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(0, 0), (2, 10)]).end_offset_for(2, 42) == (2, 42)


def test_older_epoch_ends_where_the_next_known_epoch_starts(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(0, 0), (2, 10), (5, 30)]).end_offset_for(2, 42) == (2, 30)


def test_unknown_epoch_between_known_ones_answers_with_the_one_below(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(0, 0), (2, 10), (5, 30)]).end_offset_for(3, 42) == (2, 30)


def test_epoch_older_than_every_known_one_ends_at_the_first_start(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(3, 100), (5, 130)]).end_offset_for(1, 142) == (1, 100)


def test_epoch_newer_than_every_known_one_is_undefined(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(0, 0)]).end_offset_for(1, 42) == (-1, -1)


def test_undefined_epoch_is_undefined(tmp_path: Path) -> None:
    assert _cache(tmp_path, [(0, 0)]).end_offset_for(-1, 42) == (-1, -1)


def test_empty_cache_knows_no_epoch(tmp_path: Path) -> None:
    assert _cache(tmp_path, []).end_offset_for(0, 42) == (-1, -1)


# --- trimming -------------------------------------------------------------------------------


def _three_epochs(directory: Path, **config: object) -> PartitionLog:
    """Epoch 0 at offsets 0-4, epoch 1 at 5-9, epoch 2 at 10-14, all acknowledged."""
    log = _log(directory, **config)
    for epoch in range(3):
        for _ in range(5):
            _append(log, epoch=epoch)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_delete_records_drops_epochs_below_the_new_start_and_moves_the_earliest_up(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.delete_records_before(7, NOW)
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n2\n1 7\n2 10\n"


def test_log_start_on_an_epoch_boundary_keeps_that_epoch_as_is(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.delete_records_before(10, NOW)
    assert _entries(log) == [(2, 10)]


def test_retention_trims_the_epochs_with_the_segments_it_deletes(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0", retention_ms=60_000)
    for offset in range(15):  # epoch 0 at 0-4, epoch 1 at 5-9, epoch 2 at 10-14
        if offset == 7:
            log.roll(NOW)  # offsets 0-6 (the first segment) are past retention, 7-14 are not
        stamp = NOW - 3_600_000 if offset < 7 else NOW
        log.append(batch(1, timestamp=stamp), NOW, leader_epoch=offset // 5)
    log.update_high_watermark(log.log_end_offset)
    assert log.apply_retention(NOW) == 1
    assert _entries(log) == [(1, 7), (2, 10)]


def test_truncation_drops_the_epochs_that_started_in_the_removed_tail(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.truncate_to(8)
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n2\n0 0\n1 5\n"


def test_truncation_at_an_epoch_start_drops_that_epoch(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.truncate_to(10)
    assert _entries(log) == [(0, 0), (1, 5)]


def test_truncating_fully_clears_the_epochs(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.truncate_fully_and_start_at(100)
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n0\n"


# --- reopening ------------------------------------------------------------------------------


def test_epochs_survive_a_restart(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.close()
    assert _entries(_log(tmp_path / "t-0")) == [(0, 0), (1, 5), (2, 10)]


def test_missing_file_is_rebuilt_from_the_batches_leader_epochs(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0", segment_bytes=400)
    log.close()
    (tmp_path / "t-0" / CHECKPOINT).unlink()
    assert _entries(_log(tmp_path / "t-0")) == [(0, 0), (1, 5), (2, 10)]
    assert (tmp_path / "t-0" / CHECKPOINT).read_bytes() == b"0\n3\n0 0\n1 5\n2 10\n"


def test_damaged_file_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.close()
    (tmp_path / "t-0" / CHECKPOINT).write_bytes(b"0\n5\n0 0\n")
    assert _entries(_log(tmp_path / "t-0")) == [(0, 0), (1, 5), (2, 10)]


def test_reload_drops_epochs_starting_at_or_past_the_log_end(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.close()
    write_leader_epoch_checkpoint(tmp_path / "t-0" / CHECKPOINT, [(0, 0), (1, 5), (2, 10), (3, 15), (4, 20)])
    assert _entries(_log(tmp_path / "t-0")) == [(0, 0), (1, 5), (2, 10)]


def test_reload_trims_epochs_to_the_log_start_offset(tmp_path: Path) -> None:
    log = _three_epochs(tmp_path / "t-0")
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", LogConfig(), log_start_offset=6, now_ms=NOW)
    assert _entries(reopened) == [(1, 6), (2, 10)]


def test_leading_an_unchanged_partition_again_after_a_restart_rewrites_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path / "t-0")
    log.maybe_assign_epoch_start_offset(0, 0)  # an empty partition: its epoch starts at the log end
    log.close()
    written = (tmp_path / "t-0" / CHECKPOINT).stat().st_ino
    reopened = _log(tmp_path / "t-0")  # the load drops (0, 0), as it is not below the log end...
    reopened.maybe_assign_epoch_start_offset(0, 0)  # ...and leading the partition again restores it
    assert _entries(reopened) == [(0, 0)]
    assert (tmp_path / "t-0" / CHECKPOINT).stat().st_ino == written
