"""PartitionLog: produce (append), fetch (read), rolling, ListOffsets, retention, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import (
    CorruptRecordError,
    InvalidRecordError,
    LogConfig,
    OffsetAndTimestamp,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)
from kbroker.log import segment as segment_module
from wire.legacy import build_message_set
from wire.records import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    Record,
    build_batch,
    build_end_txn_batch,
    encode_records_section,
    read_batch_header,
)

from log_helpers import batch, batch_offsets, forged_batch, read_records, slice_offsets

NOW = 1_700_000_000_000


def _log(tmp_path: Path, **config: object) -> PartitionLog:
    return PartitionLog(tmp_path / "topic-0", LogConfig(**config), now_ms=NOW)


def _fill(log: PartitionLog, batches: int, records: int = 1, *, timestamp: int = NOW, step: int = 0) -> None:
    for i in range(batches):
        log.append(batch(records, timestamp=timestamp + i * step), NOW)
    log.update_high_watermark(log.log_end_offset)


# --- append -------------------------------------------------------------------------------


def test_appends_get_consecutive_offsets(tmp_path: Path) -> None:
    log = _log(tmp_path)
    first = log.append(batch(3), NOW)
    second = log.append(batch(2), NOW)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    assert [r.offset for r in read_records(log)] == [0, 1, 2, 3, 4]


def test_several_batches_in_one_append_are_numbered_in_order(tmp_path: Path) -> None:
    log = _log(tmp_path)
    info = log.append(batch(2) + batch(3) + batch(1), NOW)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert slice_offsets(log.read(0, 1 << 20)) == [(0, 1), (2, 4), (5, 5)]


def test_append_stamps_the_leader_epoch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(batch(1), NOW, leader_epoch=7)
    assert read_batch_header(log.read(0, 1000).read_bytes()).partition_leader_epoch == 7


def test_create_time_keeps_the_producer_timestamps(tmp_path: Path) -> None:
    log = _log(tmp_path)
    info = log.append(batch(2, timestamp=12_345), NOW)
    assert (info.log_append_time, info.max_timestamp) == (-1, 12_345)
    assert [r.timestamp for r in read_records(log)] == [12_345, 12_345]


def test_log_append_time_sets_broker_time_and_keeps_the_crc_valid(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(batch(2, timestamp=5), NOW)
    assert (info.log_append_time, info.max_timestamp) == (NOW, NOW)
    header = read_batch_header(log.read(0, 1000).read_bytes())
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == NOW
    assert [r.timestamp for r in read_records(log)] == [NOW, NOW]  # decode_batch checks nothing odd


def test_batch_over_max_message_bytes_is_rejected(tmp_path: Path) -> None:
    log = _log(tmp_path, max_message_bytes=500)
    with pytest.raises(RecordTooLargeError):
        log.append(batch(1, value_size=600), NOW)
    assert log.log_end_offset == 0


def test_records_larger_than_a_segment_are_rejected(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=1000)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(batch(1, value_size=600) * 2, NOW)


def test_corrupt_batch_is_rejected_and_nothing_is_written(tmp_path: Path) -> None:
    log = _log(tmp_path)
    bad = bytearray(batch(2))
    bad[-1] ^= 0x01
    with pytest.raises(CorruptRecordError):
        log.append(batch(1) + bytes(bad), NOW)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_truncated_batch_is_rejected_as_corrupt(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(CorruptRecordError):
        log.append(batch(2)[:-3], NOW)


def test_record_count_disagreeing_with_offsets_is_invalid(tmp_path: Path) -> None:
    log = _log(tmp_path)
    records = [Record(i, NOW, None, b"x", ()) for i in range(3)]
    with pytest.raises(InvalidRecordError):
        log.append(build_batch(records, last_offset_delta=5), NOW)


def _section(count: int) -> bytes:
    """The uncompressed records of `count` keyed records."""
    records = [Record(i, NOW, b"key-%d" % i, b"v" * 30, ()) for i in range(count)]
    return encode_records_section(records, 0, NOW)


# (records section, record count in the header): intact batches (CRC holds) whose records disagree with the header
LAYOUT_FAULTS = {
    "a-record-more-than-the-count": (_section(3), 2),
    "a-record-fewer-than-the-count": (_section(2), 3),
    "bytes-after-the-last-record": (_section(2) + b"\x00\x00", 2),
    "a-record-length-past-the-end": (b"\xc8\x01" + _section(1)[1:], 1),
    "an-over-long-length-varint": (b"\xff" * 5 + b"\x01" + _section(1), 1),
}


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("fault", LAYOUT_FAULTS)
def test_records_disagreeing_with_their_batch_header_are_invalid_and_nothing_is_written(
        tmp_path: Path, fault: str, codec: int) -> None:
    """Kafka's LogValidator walks every record of a produced batch (decompressed if need be): INVALID_RECORD."""
    log = _log(tmp_path)
    log.append(batch(1), NOW)
    section, count = LAYOUT_FAULTS[fault]
    with pytest.raises(InvalidRecordError):
        log.append(batch(1) + forged_batch(section, count, codec, NOW), NOW)
    assert log.log_end_offset == 1 and log.active_segment.size == len(batch(1))


@pytest.mark.parametrize("codec", [0, 3], ids=["none", "lz4"])
@pytest.mark.parametrize("config", [{"message_timestamp_type": "LogAppendTime"}, {"cleanup_policy": "compact"}],
                         ids=["log-append-time", "compacted"])
def test_records_layout_is_checked_whatever_the_topic_config(tmp_path: Path, config: dict, codec: int) -> None:
    """LogAppendTime topics need no record timestamps and compacted ones read keys: the records are walked anyway."""
    log = _log(tmp_path, **config)
    with pytest.raises(InvalidRecordError):
        log.append(forged_batch(_section(3), 2, codec, NOW), NOW)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_empty_batch_is_invalid(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append(build_batch([]), NOW)


def test_control_batch_from_a_client_is_invalid(tmp_path: Path) -> None:
    log = _log(tmp_path)
    marker = build_end_txn_batch(True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=NOW)
    with pytest.raises(InvalidRecordError):
        log.append(marker, NOW)
    assert log.append(marker, NOW, coordinator=True).record_count == 1


def test_legacy_message_format_is_unsupported(tmp_path: Path) -> None:
    log = _log(tmp_path)
    legacy = build_message_set([Record(0, NOW, b"k", b"v", ())], magic=1)
    with pytest.raises(UnsupportedMessageFormatError):
        log.append(legacy, NOW)


# --- read ---------------------------------------------------------------------------------


def test_read_returns_whole_batches_up_to_max_bytes(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 10, records=2)
    size = len(batch(2))
    found = log.read(4, max_bytes=3 * size + 10)
    assert slice_offsets(found) == [(4, 5), (6, 7), (8, 9)]
    assert len(found) == 3 * size


def test_read_from_inside_a_batch_starts_at_that_batch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 3, records=4)
    assert slice_offsets(log.read(6, 1 << 20))[0] == (4, 7)


def test_read_returns_a_first_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 3, records=5)
    assert slice_offsets(log.read(0, max_bytes=1)) == [(0, 4)]
    assert log.read(0, max_bytes=1, min_one_batch=False) is None


def test_read_without_min_one_batch_stops_at_a_batch_that_does_not_fit(tmp_path: Path) -> None:
    """A later fetch partition gets nothing rather than batches of the next segment, past its fetch offset."""
    log = _log(tmp_path)
    log.append(batch(1, value_size=2000), NOW)
    log.roll(NOW)
    log.append(batch(1), NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.read(0, max_bytes=1000, min_one_batch=False) is None


def test_read_stops_at_the_high_watermark(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 5)
    log.update_high_watermark(3)
    assert slice_offsets(log.read(0, 1 << 20, log.high_watermark)) == [(0, 0), (1, 1), (2, 2)]
    assert log.read(3, 1 << 20, log.high_watermark) is None


def test_read_excludes_a_batch_straddling_the_high_watermark(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 3, records=2)
    assert slice_offsets(log.read(0, 1 << 20, max_offset_exclusive=3)) == [(0, 1)]


def test_read_at_log_end_returns_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 2)
    assert log.read(2, 1000) is None


@pytest.mark.parametrize("offset", [-1, 3])
def test_read_outside_the_log_is_out_of_range(tmp_path: Path, offset: int) -> None:
    log = _log(tmp_path)
    _fill(log, 2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(offset, 1000)


def test_read_stops_at_the_end_of_a_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=3 * len(batch(1)))
    _fill(log, 6)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert slice_offsets(log.read(1, 1 << 20)) == [(1, 1), (2, 2)]
    assert slice_offsets(log.read(3, 1 << 20)) == [(3, 3), (4, 4), (5, 5)]


# --- rolling ------------------------------------------------------------------------------


def test_rolls_when_the_next_append_would_exceed_segment_bytes(tmp_path: Path) -> None:
    size = len(batch(1))
    log = _log(tmp_path, segment_bytes=2 * size + 1)
    _fill(log, 5)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert sorted(p.name for p in log.dir.glob("*.log")) == [
        "00000000000000000000.log",
        "00000000000000000002.log",
        "00000000000000000004.log",
    ]
    assert all(s.size <= 2 * size for s in log.segments)


def test_rolled_segment_indexes_are_trimmed_and_recovery_point_advances(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=2 * len(batch(1)) + 1)
    _fill(log, 3)
    first = log.segments[0]
    assert first.offset_index.path.stat().st_size == 0
    assert first.time_index.path.stat().st_size == 12  # the max-timestamp entry written on roll
    assert log.recovery_point == 2


def test_rolls_when_record_timestamps_span_segment_ms(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_ms=1_000)
    log.append(batch(1, timestamp=10_000), NOW)
    log.append(batch(1, timestamp=11_000), NOW)
    assert len(log.segments) == 1
    log.append(batch(1, timestamp=11_001), NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_rolls_by_wall_clock_when_records_have_no_timestamp(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_ms=1_000)
    log.append(batch(1, timestamp=-1), NOW)
    log.append(batch(1, timestamp=-1), NOW + 1_000)
    assert len(log.segments) == 1
    log.append(batch(1, timestamp=-1), NOW + 1_001)
    assert len(log.segments) == 2


def test_rolls_when_the_index_is_full(tmp_path: Path) -> None:
    log = _log(tmp_path, max_index_size=16, index_interval_bytes=0)
    _fill(log, 6)
    assert len(log.segments) > 1


# --- ListOffsets --------------------------------------------------------------------------


def test_offset_for_timestamp_finds_first_record_at_or_after_it(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=4 * len(batch(2)))
    for i in range(20):
        records = [Record(j, 1_000 + 10 * i + j, None, b"x" * 200, ()) for j in range(2)]
        log.append(build_batch(records), NOW)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(1_000) == OffsetAndTimestamp(0, 1_000)
    assert log.offset_for_timestamp(1_051) == OffsetAndTimestamp(11, 1_051)  # second record of batch 5
    assert log.offset_for_timestamp(1_052) == OffsetAndTimestamp(12, 1_060)
    assert log.offset_for_timestamp(5_000) is None


def test_offset_for_timestamp_answers_earliest_and_latest(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 3)
    assert log.offset_for_timestamp(-2) == OffsetAndTimestamp(0, -1)
    assert log.offset_for_timestamp(-1) == OffsetAndTimestamp(3, -1)


def test_max_timestamp_offset_is_the_first_record_with_the_largest_timestamp(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(build_batch([Record(0, 50, None, b"a", ()), Record(1, 90, None, b"b", ())]), NOW)
    log.append(build_batch([Record(0, 70, None, b"c", ()), Record(1, 90, None, b"d", ())]), NOW)
    assert log.max_timestamp_offset() == OffsetAndTimestamp(1, 90)
    assert log.offset_for_timestamp(-3) == OffsetAndTimestamp(1, 90)


# --- DeleteRecords, retention, truncation --------------------------------------------------


def _segmented(tmp_path: Path, **config: object) -> PartitionLog:
    """10 one-record batches, 2 per segment, timestamps 0, 1000, ..., 9000."""
    log = _log(tmp_path, segment_bytes=2 * len(batch(1)) + 1, file_delete_delay_ms=0, **config)
    _fill(log, 10, timestamp=0, step=1_000)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    return log


def test_delete_records_before_moves_log_start_and_deletes_covered_segments(tmp_path: Path) -> None:
    log = _segmented(tmp_path)
    assert log.delete_records_before(5) == 5
    assert log.log_start_offset == 5
    assert [s.base_offset for s in log.segments] == [4, 6, 8]
    assert not (log.dir / "00000000000000000002.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert slice_offsets(log.read(5, 10))[0] == (5, 5)


def test_delete_records_beyond_the_high_watermark_is_out_of_range(tmp_path: Path) -> None:
    log = _segmented(tmp_path)
    log.update_high_watermark(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(5)
    assert log.delete_records_before(-1) == 4  # -1 means "up to the high watermark"


def test_time_retention_deletes_old_segments_and_advances_log_start(tmp_path: Path) -> None:
    log = _segmented(tmp_path, retention_ms=4_000)
    assert log.apply_retention(now_ms=9_500) == 3  # newest record older than 9500 - 4000
    assert log.log_start_offset == 6
    assert sorted(p.name for p in log.dir.glob("*.log")) == [
        "00000000000000000006.log",
        "00000000000000000008.log",
    ]


def test_size_retention_deletes_oldest_segments_until_under_the_limit(tmp_path: Path) -> None:
    log = _segmented(tmp_path, retention_bytes=3 * len(batch(1)), retention_ms=-1)
    assert log.apply_retention(NOW) == 3
    assert [s.base_offset for s in log.segments] == [6, 8]
    assert log.log_start_offset == 6


def test_retention_of_every_segment_rolls_a_new_empty_active_one(tmp_path: Path) -> None:
    log = _segmented(tmp_path, retention_ms=10)
    assert log.apply_retention(now_ms=100_000) == 5
    assert [s.base_offset for s in log.segments] == [10]
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)


def test_retention_never_deletes_above_the_high_watermark(tmp_path: Path) -> None:
    log = _segmented(tmp_path, retention_ms=10)
    log.update_high_watermark(3)
    assert log.apply_retention(now_ms=100_000) == 1
    assert log.log_start_offset == 2


def test_compacted_topics_are_not_deleted_by_retention(tmp_path: Path) -> None:
    log = _segmented(tmp_path, retention_ms=10, cleanup_policy="compact")
    assert log.apply_retention(now_ms=100_000) == 0


def test_deleted_segment_files_linger_for_file_delete_delay_ms(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=2 * len(batch(1)) + 1, retention_ms=1_000, file_delete_delay_ms=60_000)
    _fill(log, 4, timestamp=0, step=1_000)
    kept = log.read(0, 1000)  # a fetch still being sent
    assert log.apply_retention(now_ms=2_500) == 1
    assert (log.dir / "00000000000000000000.log.deleted").exists()
    assert slice_offsets(kept) == [(0, 0), (1, 1)]
    assert log.purge_deleted(now_ms=62_500) == 1
    assert not list(log.dir.glob("*.deleted"))


def test_truncate_to_cuts_the_log_back_to_an_offset(tmp_path: Path) -> None:
    log = _segmented(tmp_path)
    assert log.truncate_to(5)
    assert log.log_end_offset == 5
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.high_watermark == 5
    assert log.append(batch(1), NOW).first_offset == 5


def test_truncate_below_the_first_segment_starts_over_at_that_offset(tmp_path: Path) -> None:
    log = _segmented(tmp_path)
    log.delete_records_before(4)
    log.truncate_to(2)
    assert [s.base_offset for s in log.segments] == [2]
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)


# --- flushing -----------------------------------------------------------------------------


def test_flush_interval_messages_fsyncs_and_moves_the_recovery_point(tmp_path: Path) -> None:
    log = _log(tmp_path, flush_interval_messages=3)
    log.append(batch(2), NOW)
    assert log.recovery_point == 0
    log.append(batch(1), NOW)
    assert log.recovery_point == 3


def test_flush_ms_flushes_once_the_interval_has_passed(tmp_path: Path) -> None:
    log = _log(tmp_path, flush_interval_ms=1_000)
    log.append(batch(1), NOW + 10)
    assert log.recovery_point == 0
    assert log.maybe_flush(NOW + 1_000)
    assert log.recovery_point == 1


def test_high_watermark_is_clamped_to_the_log(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 2)
    assert log.update_high_watermark(99) == 2
    assert log.update_high_watermark(-5) == 0


def test_batch_payload_is_stored_byte_for_byte_apart_from_the_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(batch(1), NOW)
    produced = batch(3, timestamp=77)
    log.append(produced, NOW)
    stored = log.read(1, 1 << 20).read_bytes()
    assert batch_offsets(stored) == [(1, 3)]
    assert stored[8:] == produced[8:]


def test_read_path_reads_only_batch_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(tmp_path)
    _fill(log, 200, records=3)
    sizes: list[int] = []
    real_pread = segment_module.os.pread

    def spy(fd: int, size: int, position: int) -> bytes:
        sizes.append(size)
        return real_pread(fd, size, position)

    monkeypatch.setattr(segment_module.os, "pread", spy)
    found = log.read(301, max_bytes=20 * len(batch(3)), max_offset_exclusive=550)
    monkeypatch.undo()
    assert slice_offsets(found)[0] == (300, 302) and len(slice_offsets(found)) == 20
    assert sizes and set(sizes) == {HEADER_SIZE}
    assert len(sizes) < 30  # index lookups keep the header scans short


def test_append_takes_max_timestamp_from_the_records_not_the_header(tmp_path: Path) -> None:
    log = _log(tmp_path)
    records = [Record(0, NOW - 60_000, b"old", b"v", ()), Record(1, NOW, b"now", b"v", ())]
    understated = build_batch(records, max_timestamp=NOW - 60_000)  # what kafkajs writes for mixed timestamps
    info = log.append(understated, NOW)
    assert info.max_timestamp == NOW
    stored = log.read(0, 1 << 20).read_bytes()
    assert read_batch_header(stored, 0).max_timestamp == NOW
    assert log.offset_for_timestamp(NOW - 1).offset == 1
