"""Log compaction (kbroker.log.cleaner): what survives a cleaning, tombstones, producer state,
transactions, crash recovery of the swap, the checkpoint file, and the background thread."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from kbroker.log import CleanerConfig, LogConfig, LogManager, PartitionLog, RecordError, RecordValidationError
from kbroker.log.checkpoints import CLEANER_OFFSET_CHECKPOINT
from kbroker.log.cleaner import clean_log
from kbroker.log.errors import OutOfOrderSequenceError
from kbroker.log.producer_state import SNAPSHOT_SUFFIX
from wire.errors import ErrorCode
from wire.records import (
    BatchHeader,
    Record,
    build_batch,
    build_end_txn_batch,
    decode_batch,
    iter_batches,
    validate_batch,
)

from log_helpers import read_records

NOW = 1_700_000_000_000
TOPIC = "compacted"


def _config(**overrides: object) -> LogConfig:
    return LogConfig(**{"cleanup_policy": "compact", **overrides})


def _log(tmp_path: Path, **overrides: object) -> PartitionLog:
    return PartitionLog(tmp_path / f"{TOPIC}-0", _config(**overrides), now_ms=NOW)


def _record(key: bytes | None, value: bytes | None, timestamp: int = NOW) -> bytes:
    return build_batch([Record(0, timestamp, key, value, ())])


def _put(log: PartitionLog, *pairs: tuple[bytes | None, bytes | None], timestamp: int = NOW) -> None:
    for key, value in pairs:
        log.append(_record(key, value, timestamp), NOW)
    log.update_high_watermark(log.log_end_offset)


def _contents(log: PartitionLog, offset: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in read_records(log, offset)]


def _headers(log: PartitionLog) -> list[BatchHeader]:
    headers = []
    for segment in log.segments:
        headers += [h for _, h in segment.batch_headers()]
    return headers


def _rounds(log: PartitionLog, keys: int, rounds: int) -> dict[int, tuple[bytes, bytes]]:
    """`rounds` passes over `keys` keys, one segment per pass; returns offset -> (key, value)."""
    written = {}
    for r in range(rounds):
        for k in range(keys):
            offset = log.log_end_offset
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, r)
            _put(log, (key, value))
            written[offset] = (key, value)
        log.roll(NOW)
    return written


def _latest_per_key(written: dict[int, tuple[bytes, bytes]], below: int) -> list[tuple[int, bytes, bytes]]:
    latest: dict[bytes, int] = {}
    for offset, (key, _) in sorted(written.items()):
        if offset < below:
            latest[key] = offset
    return sorted((o, *written[o]) for o in latest.values())


# --- what survives ------------------------------------------------------------------------------


def test_cleaning_keeps_only_the_latest_record_of_each_key(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    written = _rounds(log, keys=4, rounds=3)
    _put(log, (b"key-0", b"in the active segment"))
    assert clean_log(log, now_ms=NOW) == 12
    assert _contents(log) == [*_latest_per_key(written, 12), (12, b"key-0", b"in the active segment")]


def test_surviving_records_keep_their_offsets_and_order(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _put(log, (b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"), (b"c", b"2"), (b"d", b"1"))
    log.roll(NOW)
    _put(log, (b"e", b"1"))
    clean_log(log, now_ms=NOW)
    assert _contents(log) == [(2, b"a", b"2"), (4, b"b", b"2"), (5, b"c", b"2"), (6, b"d", b"1"), (7, b"e", b"1")]
    assert (log.log_start_offset, log.log_end_offset) == (0, 8)
    assert [s.base_offset for s in log.segments] == [0, 7]  # the cleaned segment keeps its base offset


def test_records_past_the_first_uncleanable_offset_are_untouched(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _put(log, (b"a", b"1"), (b"a", b"2"))
    log.roll(NOW)
    _put(log, (b"a", b"3"), (b"a", b"4"))  # the active segment
    active = log.active_segment.log_path.read_bytes()
    clean_log(log, now_ms=NOW)
    assert log.active_segment.log_path.read_bytes() == active
    assert _contents(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4")]


def test_a_second_cleaning_uses_the_new_dirty_section_to_clean_the_old_one(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _put(log, (b"a", b"1"), (b"b", b"1"))
    log.roll(NOW)
    first_end = clean_log(log, now_ms=NOW)
    _put(log, (b"a", b"2"))
    log.roll(NOW)
    clean_log(log, first_dirty_offset=first_end, now_ms=NOW)
    assert _contents(log) == [(1, b"b", b"1"), (2, b"a", b"2")]


# --- tombstones ---------------------------------------------------------------------------------


def test_tombstones_stay_for_delete_retention_ms_after_the_cleaning_that_first_keeps_them(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000, delete_retention_ms=60_000)
    _put(log, (b"gone", b"value"), (b"gone", None), (b"kept", b"value"))
    log.roll(NOW)
    _put(log, (b"active", b"x"))
    first_cleaning = NOW + 5_000
    clean_log(log, now_ms=first_cleaning)
    assert _contents(log) == [(1, b"gone", None), (2, b"kept", b"value"), (3, b"active", b"x")]
    horizon = next(h for h in _headers(log) if h.base_offset == 1)
    assert horizon.has_delete_horizon and horizon.base_timestamp == first_cleaning + 60_000
    clean_log(log, now_ms=first_cleaning + 59_999)
    assert (1, b"gone", None) in _contents(log)
    clean_log(log, now_ms=first_cleaning + 60_000)
    assert _contents(log) == [(2, b"kept", b"value"), (3, b"active", b"x")]


def test_a_tombstone_hides_older_values_of_its_key_at_once(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _put(log, (b"k", b"1"), (b"k", b"2"))
    log.roll(NOW)
    _put(log, (b"k", None), (b"other", b"v"))
    log.roll(NOW)
    clean_log(log, now_ms=NOW)
    assert _contents(log) == [(2, b"k", None), (3, b"other", b"v")]


def test_a_tombstone_timestamp_survives_the_delete_horizon_rewrite(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    log.append(build_batch([Record(0, NOW - 5, b"k", None, ()), Record(1, NOW - 3, b"j", b"v", ())]), NOW)
    log.update_high_watermark(log.log_end_offset)
    log.roll(NOW)
    clean_log(log, now_ms=NOW)
    assert [(r.offset, r.timestamp) for r in read_records(log)] == [(0, NOW - 5), (1, NOW - 3)]


def test_records_without_a_key_from_before_the_topic_was_compacted_are_dropped(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / f"{TOPIC}-0", LogConfig(segment_bytes=10_000), now_ms=NOW)
    _put(log, (None, b"no key"), (b"k", b"v"))
    log.roll(NOW)
    log.update_config(_config(segment_bytes=10_000))
    clean_log(log, now_ms=NOW)
    assert _contents(log) == [(1, b"k", b"v")]


def test_segment_ms_rolls_an_idle_segment_so_it_can_be_cleaned(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_ms=1_000)
    _put(log, (b"k", b"1"), (b"k", b"2"), timestamp=NOW)
    assert clean_log(log, now_ms=NOW) == 0  # all in the active segment
    _put(log, (b"other", b"v"), timestamp=NOW + 1_001)  # older than segment.ms: the segment rolls
    assert clean_log(log, now_ms=NOW + 1_001) == 2
    assert _contents(log) == [(1, b"k", b"2"), (2, b"other", b"v")]


def test_compact_and_delete_both_apply(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=200, cleanup_policy="compact,delete", retention_ms=60_000)  # no merging
    _put(log, (b"a", b"1"), (b"a", b"2"), timestamp=NOW)
    log.roll(NOW)
    _put(log, (b"b", b"1"), (b"b", b"2"), timestamp=NOW + 120_000)
    log.roll(NOW)
    clean_log(log, now_ms=NOW)
    assert _contents(log) == [(1, b"a", b"2"), (3, b"b", b"2")]
    assert log.apply_retention(now_ms=NOW + 90_000) == 1  # the segment of "a" is past retention.ms
    assert _contents(log, log.log_start_offset) == [(3, b"b", b"2")]


# --- batches keep their frame ------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_a_rewritten_batch_keeps_its_codec_offsets_and_attributes(tmp_path: Path, codec: int) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    records = [Record(i, NOW + i, key, b"value-%d" % i, (("h", b"1"),)) for i, key in enumerate([b"a", b"b", b"a"])]
    log.append(build_batch(records, codec=codec, partition_leader_epoch=4), NOW, leader_epoch=4)
    log.append(build_batch([Record(0, NOW, b"z", b"v", ())]), NOW)
    log.update_high_watermark(log.log_end_offset)
    log.roll(NOW)
    clean_log(log, now_ms=NOW)
    data = log.segments[0].log_path.read_bytes()
    header = validate_batch(data)  # the CRC was recomputed
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (0, 2, 2)
    assert (header.codec, header.partition_leader_epoch, header.attributes) == (codec, 4, codec)
    assert [(r.offset, r.key, r.timestamp, list(r.headers)) for r in decode_batch(data)[1]] == [
        (1, b"b", NOW + 1, [("h", b"1")]),
        (2, b"a", NOW + 2, [("h", b"1")]),
    ]


def test_a_batch_that_loses_nothing_is_copied_byte_for_byte(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    original = build_batch([Record(0, NOW, b"a", b"1", ()), Record(1, NOW, b"b", b"1", ())], codec=1)
    log.append(original, NOW)
    log.update_high_watermark(log.log_end_offset)
    log.roll(NOW)
    clean_log(log, now_ms=NOW)
    assert log.segments[0].log_path.read_bytes() == original


# --- producer state and transactions -------------------------------------------------------------


def _idempotent(key: bytes, value: bytes, sequence: int, producer_id: int = 7) -> bytes:
    return build_batch([Record(0, NOW, key, value, ())], producer_id=producer_id, producer_epoch=0,
                       base_sequence=sequence)


def test_the_last_batch_of_an_active_producer_stays_as_an_empty_header(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    log.append(_idempotent(b"a", b"1", 0), NOW)
    log.append(_idempotent(b"b", b"1", 1), NOW)
    _put(log, (b"b", b"2"))  # not idempotent: supersedes the producer's last record
    log.roll(NOW)
    _put(log, (b"c", b"1"))
    clean_log(log, now_ms=NOW)
    assert _contents(log) == [(0, b"a", b"1"), (2, b"b", b"2"), (3, b"c", b"1")]
    empty = _headers(log)[1]
    assert (empty.base_offset, empty.record_count, empty.producer_id, empty.base_sequence) == (1, 0, 7, 1)
    assert (empty.last_offset_delta, empty.codec, empty.base_timestamp, empty.max_timestamp) == (0, 0, -1, NOW)


def test_producer_sequences_survive_compaction_and_a_restart(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    log.append(_idempotent(b"a", b"1", 0), NOW)
    log.append(_idempotent(b"a", b"2", 1), NOW)
    _put(log, (b"a", b"3"))
    log.roll(NOW)
    _put(log, (b"z", b"1"))
    clean_log(log, now_ms=NOW)
    log.close()
    for snapshot in log.dir.glob("*" + SNAPSHOT_SUFFIX):
        snapshot.unlink()  # state must come back from the batch headers the cleaner kept
    reopened = _log(tmp_path, segment_bytes=10_000)
    assert reopened.producer_state.producers[7].last_seq == 1
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(_idempotent(b"a", b"x", 5), NOW)
    assert reopened.append(_idempotent(b"a", b"4", 2), NOW).first_offset == 4


def _aborted_transaction(log: PartitionLog) -> None:
    """Offset 0: a transactional record of producer 9; 1: its ABORT marker; 2: a plain record."""
    log.append(build_batch([Record(0, NOW, b"t", b"aborted", ())], producer_id=9, producer_epoch=0,
                           base_sequence=0, is_transactional=True), NOW)
    log.append(build_end_txn_batch(False, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=NOW),
               NOW, coordinator=True)
    _put(log, (b"plain", b"v"))
    log.roll(NOW)
    _put(log, (b"active", b"v"))


def test_aborted_records_go_while_their_marker_stays(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _aborted_transaction(log)
    clean_log(log, now_ms=NOW)
    headers = _headers(log)
    assert [(h.base_offset, h.record_count, h.is_control) for h in headers[:2]] == [(0, 0, False), (1, 1, True)]
    assert not headers[1].has_delete_horizon  # the transaction still has a batch in the log


def test_a_marker_goes_delete_retention_ms_after_its_transaction_is_empty(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000, delete_retention_ms=1_000)
    _aborted_transaction(log)
    later = NOW + 2 * 86_400_000
    log.apply_retention(later)  # producer.id.expiration.ms: producer 9 is no longer active
    clean_log(log, now_ms=later)  # the aborted batch goes; the marker stays this time
    assert [h.base_offset for h in _headers(log)] == [1, 2, 3]
    clean_log(log, now_ms=later)  # empty transaction: the marker gets its delete horizon
    marker = _headers(log)[0]
    assert marker.is_control and marker.has_delete_horizon and marker.base_timestamp == later + 1_000
    clean_log(log, now_ms=later + 999)
    assert [h.base_offset for h in _headers(log)] == [1, 2, 3]
    clean_log(log, now_ms=later + 1_000)
    assert [h.base_offset for h in _headers(log)] == [2, 3]


def test_an_open_transaction_is_not_cleaned(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    _put(log, (b"a", b"1"), (b"a", b"2"))
    log.roll(NOW)
    log.append(build_batch([Record(0, NOW, b"a", b"open", ())], producer_id=9, producer_epoch=0,
                           base_sequence=0, is_transactional=True), NOW)
    _put(log, (b"a", b"3"))
    log.roll(NOW)
    _put(log, (b"b", b"1"))
    assert clean_log(log, now_ms=NOW) == 2  # the last stable offset is the open transaction's start
    assert [o for o, _, _ in _contents(log)] == [1, 2, 3, 4]


# --- what the produce path refuses ---------------------------------------------------------------


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(RecordValidationError) as refused:
        log.append(build_batch([Record(0, NOW, b"k", b"v", ()), Record(1, NOW, None, b"v", ())], codec=1), NOW)
    missing_key = f"Compacted topic cannot accept message without key in topic partition {TOPIC}-0"
    assert refused.value.error_code == ErrorCode.INVALID_RECORD
    assert refused.value.record_errors == (RecordError(1, missing_key),)
    assert log.log_end_offset == 0
    plain = PartitionLog(tmp_path / "plain-0", LogConfig(), now_ms=NOW)
    assert plain.append(_record(None, b"v"), NOW).first_offset == 0


# --- choosing, lags and the checkpoint ---------------------------------------------------------


def _manager(tmp_path: Path, **overrides: object) -> tuple[LogManager, PartitionLog]:
    manager = LogManager([tmp_path / "logs"], topic_configs={TOPIC: _config(segment_bytes=10_000, **overrides)})
    return manager, manager.create(TOPIC, 0)


def test_only_logs_dirtier_than_min_cleanable_dirty_ratio_are_cleaned(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path, min_cleanable_dirty_ratio=0.5)
    cleaner = manager.start_cleaner(CleanerConfig(threads=0))  # no thread: passes run here
    _put(log, *[(b"key-%d" % i, b"v") for i in range(10)])
    log.roll(NOW)
    _put(log, (b"active", b"v"))
    assert cleaner.run_once(NOW)  # never cleaned: all of it is dirty
    assert cleaner.all_checkpoints() == {(TOPIC, 0): 10}
    _put(log, *[(b"key-%d" % i, b"w") for i in range(4)])
    log.roll(NOW)  # 5 dirty batches against 10 clean ones
    assert cleaner.grab_filthiest_log(NOW) is None
    _put(log, *[(b"key-%d" % i, b"x") for i in range(4, 10)])
    log.roll(NOW)  # 11 dirty against 10
    assert cleaner.run_once(NOW)
    assert _contents(log) == [
        (10, b"active", b"v"),
        *[(11 + i, b"key-%d" % i, b"w") for i in range(4)],
        *[(11 + i, b"key-%d" % i, b"x") for i in range(4, 10)],
    ]
    manager.close()


def test_max_compaction_lag_cleans_a_log_below_the_dirty_ratio(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path, max_compaction_lag_ms=60_000)
    cleaner = manager.start_cleaner(CleanerConfig(threads=0))
    _put(log, *[(b"key-%d" % i, b"v") for i in range(10)])
    log.roll(NOW)
    cleaner.run_once(NOW)
    _put(log, (b"key-0", b"w"), timestamp=NOW)
    log.roll(NOW)
    assert cleaner.grab_filthiest_log(NOW + 60_000) is None
    chosen = cleaner.grab_filthiest_log(NOW + 60_001)
    assert chosen is not None and chosen.need_compaction_now and chosen.cleanable_ratio < 0.5
    manager.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000, min_compaction_lag_ms=3_600_000)
    _put(log, (b"a", b"1"), (b"a", b"2"), timestamp=NOW)
    log.roll(NOW)
    _put(log, (b"b", b"1"))
    assert clean_log(log, now_ms=NOW + 60_000) == 0
    assert len(_contents(log)) == 3
    assert clean_log(log, now_ms=NOW + 3_600_001) == 2
    assert _contents(log) == [(1, b"a", b"2"), (2, b"b", b"1")]


def test_the_checkpoint_is_kafkas_text_file_and_is_read_back_on_restart(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path)
    cleaner = manager.start_cleaner(CleanerConfig(threads=0))
    _put(log, (b"a", b"1"), (b"a", b"2"))
    log.roll(NOW)
    cleaner.run_once(NOW)
    manager.close()
    assert (tmp_path / "logs" / CLEANER_OFFSET_CHECKPOINT).read_text() == f"0\n1\n{TOPIC} 0 2\n"
    reopened = LogManager([tmp_path / "logs"], topic_configs={TOPIC: _config()})
    assert reopened.start_cleaner(CleanerConfig(threads=0)).all_checkpoints() == {(TOPIC, 0): 2}
    reopened.close()


def test_deleting_a_partition_drops_its_checkpoint_entry(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path)
    cleaner = manager.start_cleaner(CleanerConfig(threads=0))
    _put(log, (b"a", b"1"))
    log.roll(NOW)
    cleaner.run_once(NOW)
    manager.delete(TOPIC, 0)
    assert cleaner.all_checkpoints() == {}
    assert (tmp_path / "logs" / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
    manager.close()


def test_a_truncation_below_the_checkpoint_lowers_it(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path, min_cleanable_dirty_ratio=0.1)
    cleaner = manager.start_cleaner(CleanerConfig(threads=0))
    _put(log, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    log.roll(NOW)
    cleaner.run_once(NOW)
    log.truncate_to(1)
    _put(log, (b"a", b"2"), (b"d", b"1"))
    log.roll(NOW)
    chosen = cleaner.grab_filthiest_log(NOW)
    assert chosen is not None and chosen.first_dirty_offset == 1
    assert cleaner.all_checkpoints() == {(TOPIC, 0): 1}
    manager.close()


def test_a_full_offset_map_ends_the_round_early_and_loses_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000)
    written = _rounds(log, keys=30, rounds=2)
    _put(log, (b"active", b"v"))
    small = CleanerConfig(dedupe_buffer_size=128 * 20, io_buffer_load_factor=1.0)  # 20 keys a round
    end = clean_log(log, small, now_ms=NOW)
    assert 0 < end < 60
    while end < 60:
        end = clean_log(log, small, first_dirty_offset=end, now_ms=NOW)
    assert _contents(log)[:-1] == _latest_per_key(written, 60)


# --- crash recovery of the swap ---------------------------------------------------------------------


def _three_small_segments(directory: Path) -> PartitionLog:
    log = PartitionLog(directory, _config(segment_bytes=10_000), now_ms=NOW)
    for _ in range(3):
        _put(log, (b"a", b"%d" % log.log_end_offset), (b"b", b"%d" % log.log_end_offset))
        log.roll(NOW)
    _put(log, (b"c", b"active"))
    return log


def _cleaned_copy(tmp_path: Path, source: Path) -> Path:
    """The same log after a cleaning that merged segments 0, 2 and 4 into one segment 0."""
    copy = tmp_path / "copy" / source.name
    shutil.copytree(source, copy)
    log = PartitionLog(copy, _config(segment_bytes=10_000), had_clean_shutdown=True, now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    clean_log(log, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()
    return copy


def test_leftover_cleaned_files_are_discarded_on_restart(tmp_path: Path) -> None:
    log = _three_small_segments(tmp_path / "data" / f"{TOPIC}-0")
    before = _contents(log)
    log.close()
    cleaned = _cleaned_copy(tmp_path, log.dir)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(cleaned / f"{0:020d}{suffix}", log.dir / f"{0:020d}{suffix}.cleaned")
    reopened = PartitionLog(log.dir, _config(segment_bytes=10_000), now_ms=NOW)
    assert not list(log.dir.glob("*.cleaned"))
    assert [s.base_offset for s in reopened.segments] == [0, 2, 4, 6]
    assert _contents(reopened) == before


@pytest.mark.parametrize("stage", ["swap written", "old segments renamed", "index swap missing"])
def test_an_interrupted_swap_is_completed_on_restart(tmp_path: Path, stage: str) -> None:
    log = _three_small_segments(tmp_path / "data" / f"{TOPIC}-0")
    log.close()
    cleaned = _cleaned_copy(tmp_path, log.dir)
    suffixes = (".log",) if stage == "index swap missing" else (".log", ".index", ".timeindex")
    if stage == "old segments renamed":
        for base in (0, 2, 4):
            for suffix in (".log", ".index", ".timeindex"):
                path = log.dir / f"{base:020d}{suffix}"
                path.rename(path.with_name(path.name + ".deleted"))
    for suffix in suffixes:
        shutil.copy(cleaned / f"{0:020d}{suffix}", log.dir / f"{0:020d}{suffix}.swap")
    reopened = PartitionLog(log.dir, _config(segment_bytes=10_000), now_ms=NOW)
    assert [s.base_offset for s in reopened.segments] == [0, 6]
    assert not [p for p in log.dir.iterdir() if p.suffix in (".swap", ".deleted", ".cleaned")]
    assert _contents(reopened) == [(4, b"a", b"4"), (5, b"b", b"4"), (6, b"c", b"active")]
    assert reopened.read(5, 1 << 20) is not None  # the index answers lookups


def test_a_swap_at_or_above_a_leftover_cleaned_file_is_discarded(tmp_path: Path) -> None:
    log = _three_small_segments(tmp_path / "data" / f"{TOPIC}-0")
    before = _contents(log)
    log.close()
    cleaned = _cleaned_copy(tmp_path, log.dir)
    shutil.copy(cleaned / f"{0:020d}.log", log.dir / f"{0:020d}.log.swap")
    shutil.copy(cleaned / f"{0:020d}.index", log.dir / f"{0:020d}.index.cleaned")
    reopened = PartitionLog(log.dir, _config(segment_bytes=10_000), now_ms=NOW)
    assert [s.base_offset for s in reopened.segments] == [0, 2, 4, 6]
    assert _contents(reopened) == before


# --- concurrency ---------------------------------------------------------------------------------


def test_a_fetch_holding_an_old_segment_still_reads_it_after_the_swap(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=10_000, file_delete_delay_ms=60_000)
    _put(log, (b"a", b"1"), (b"a", b"2"), (b"a", b"3"))
    log.roll(NOW)
    _put(log, (b"b", b"1"))
    in_flight = log.read(0, 1 << 20)  # a fetch response not yet sent
    clean_log(log, now_ms=NOW)
    assert (log.dir / f"{0:020d}.log.deleted").exists()
    data = in_flight.read_bytes()
    assert [decode_batch(data, p)[1][0].value for p, _ in iter_batches(data)] == [b"1", b"2", b"3"]
    assert _contents(log) == [(2, b"a", b"3"), (3, b"b", b"1")]
    assert log.purge_deleted(NOW + 60_001) == 1
    assert not list(log.dir.glob("*.deleted"))


def test_appends_while_the_cleaner_thread_works_lose_nothing(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path, min_cleanable_dirty_ratio=0.01)
    log.update_config(_config(segment_bytes=1_500, min_cleanable_dirty_ratio=0.01))
    cleaner = manager.start_cleaner(CleanerConfig(backoff_ms=1))
    written: dict[int, tuple[bytes, bytes]] = {}
    cleanings_while_appending = 0
    for i in range(TOTAL := 800):
        key, value = b"key-%d" % (i % 20), b"value-%d" % i
        written[log.log_end_offset] = (key, value)
        _put(log, (key, value))
        if i % 50 == 0:
            time.sleep(0.005)  # let the cleaner through, as a quiet moment between requests would
            cleanings_while_appending = cleaner.cleanings
    active_base = log.active_segment.base_offset
    assert cleaner.await_cleaned((TOPIC, 0), active_base, timeout=30)
    manager.stop_cleaner()
    assert cleanings_while_appending > 0
    contents = _contents(log)
    assert [o for o, _, _ in contents] == sorted({o for o, _, _ in contents})
    assert all(written[o] == (k, v) for o, k, v in contents)
    assert [(o, k, v) for o, k, v in contents if o < active_base] == _latest_per_key(written, active_base)
    assert [o for o, _, _ in contents if o >= active_base] == list(range(active_base, TOTAL))
    manager.close()


def test_the_manager_runs_the_cleaner_thread_until_it_closes(tmp_path: Path) -> None:
    manager, log = _manager(tmp_path)
    _put(log, *[(b"k", b"%d" % i) for i in range(5)])
    log.roll(NOW)
    cleaner = manager.start_cleaner(CleanerConfig(backoff_ms=10))
    assert cleaner.await_cleaned((TOPIC, 0), 5, timeout=10)
    assert _contents(log) == [(4, b"k", b"4")]
    manager.close()
    assert not cleaner.running
    assert not any(t.name.startswith("kafka-log-cleaner") for t in threading.enumerate())
