"""Kafka's per-record produce rules on a partition log: which records are refused, and the record
errors (KIP-467) the refusal carries, with Kafka's own messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import LogConfig, PartitionLog, RecordError, RecordValidationError
from kbroker.log.config import LONG_MAX
from kbroker.log.record_validation import java_long
from wire.errors import ErrorCode
from wire.records import LOG_APPEND_TIME, Record, build_batch

NOW = 1_700_000_000_000
SECOND = 1000
NO_KEY = "Compacted topic cannot accept message without key in topic partition topic-0"


def _log(tmp_path: Path, **config: object) -> PartitionLog:
    return PartitionLog(tmp_path / "topic-0", LogConfig(**config), now_ms=NOW)


def _refusal(log: PartitionLog, *records: Record, **batch: object) -> RecordValidationError:
    """What appending one batch of `records` raises; the log must be left as it was."""
    end = log.log_end_offset
    with pytest.raises(RecordValidationError) as refused:
        log.append(build_batch(records, **batch), NOW)
    assert log.log_end_offset == end
    return refused.value


def _out_of_range(timestamp: int, offset: int, low: int, high: int) -> str:
    return (f"Timestamp {timestamp} of message with offset {offset} is out of range. "
            f"The timestamp should be within [{low}, {high}]")


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_every_keyless_record_on_a_compacted_topic_is_named(tmp_path: Path, codec: int) -> None:
    log = _log(tmp_path, cleanup_policy="compact")
    records = [Record(i, NOW, None if i in (1, 3) else b"k", b"v") for i in range(4)]
    refused = _refusal(log, *records, codec=codec)
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert refused.record_errors == (RecordError(1, NO_KEY), RecordError(3, NO_KEY))
    assert str(refused) == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{NO_KEY}'), "
        f"RecordError(batchIndex=3, message='{NO_KEY}')]")


def test_the_summary_lists_the_first_three_record_errors_only(tmp_path: Path) -> None:
    refused = _refusal(_log(tmp_path, cleanup_policy="compact"), *[Record(i, NOW, None, b"v") for i in range(4)])
    assert len(refused.record_errors) == 4
    assert "4 record errors in total" in str(refused) and "batchIndex=3" not in str(refused)


def test_records_outside_the_timestamp_bounds_are_refused_with_invalid_timestamp(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_before_max_ms=SECOND, message_timestamp_after_max_ms=2 * SECOND)
    refused = _refusal(log, Record(0, NOW - SECOND, b"k", b"v"), Record(1, NOW - SECOND - 1, b"k", b"v"),
                       Record(2, NOW + 2 * SECOND, b"k", b"v"), Record(3, NOW + 2 * SECOND + 1, b"k", b"v"))
    bounds = (NOW - SECOND, NOW + 2 * SECOND)
    assert refused.error_code == ErrorCode.INVALID_TIMESTAMP
    assert str(refused) == "One or more records have been rejected due to invalid timestamp"
    assert refused.record_errors == (RecordError(1, _out_of_range(NOW - SECOND - 1, 1, *bounds)),
                                     RecordError(3, _out_of_range(NOW + 2 * SECOND + 1, 3, *bounds)))


def test_a_record_without_a_timestamp_is_never_out_of_bounds(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=0)
    assert log.append(build_batch([Record(0, -1, b"k", b"v")]), NOW).first_offset == 0


def test_the_offset_named_is_the_one_the_producer_gave(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_after_max_ms=0)
    log.append(build_batch([Record(0, NOW, b"k", b"v")]), NOW)
    refused = _refusal(log, Record(7, NOW, b"k", b"v"), Record(8, NOW + 1, b"k", b"v"), base_offset=7)
    assert refused.record_errors == (RecordError(1, _out_of_range(NOW + 1, 8, NOW - LONG_MAX, NOW)),)


def test_bounds_at_long_max_are_printed_as_java_wraps_them(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_before_max_ms=0)
    refused = _refusal(log, Record(0, NOW - 1, b"k", b"v"))
    assert refused.record_errors == (RecordError(0, _out_of_range(NOW - 1, 0, NOW, java_long(NOW + LONG_MAX))),)
    assert java_long(NOW + LONG_MAX) < 0


def test_difference_max_ms_stands_in_for_a_bound_left_at_long_max(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_difference_max_ms=SECOND, message_timestamp_after_max_ms=5 * SECOND)
    refused = _refusal(log, Record(0, NOW - 2 * SECOND, b"k", b"v"), Record(1, NOW + 3 * SECOND, b"k", b"v"))
    assert [e.batch_index for e in refused.record_errors] == [0]
    assert refused.record_errors[0].message.endswith(f"[{NOW - SECOND}, {NOW + 5 * SECOND}]")


def test_a_record_missing_its_key_is_named_for_the_key_even_when_its_timestamp_is_bad(tmp_path: Path) -> None:
    log = _log(tmp_path, cleanup_policy="compact", message_timestamp_before_max_ms=SECOND)
    refused = _refusal(log, Record(0, NOW - 2 * SECOND, None, b"v"), Record(1, NOW - 2 * SECOND, b"k", b"v"))
    assert refused.error_code == ErrorCode.INVALID_TIMESTAMP  # one timestamp error decides the code
    assert refused.record_errors[0] == RecordError(0, NO_KEY)
    assert refused.record_errors[1].message.startswith(f"Timestamp {NOW - 2 * SECOND} of message with offset 1")


def test_a_log_append_time_topic_refuses_batches_marked_log_append_time(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_type="LogAppendTime")
    refused = _refusal(log, Record(0, NOW, b"key", None), timestamp_type=LOG_APPEND_TIME)
    assert refused.record_errors == (RecordError(0, (
        f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={NOW}, key=3 bytes, value=0 bytes). "
        "Producer should not set timestamp type to LogAppendTime.")),)


def test_a_log_append_time_topic_ignores_the_timestamp_bounds(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=0)
    assert log.append(build_batch([Record(0, 0, b"k", b"v")]), NOW).first_offset == 0


def test_a_create_time_topic_takes_a_batch_marked_log_append_time_within_its_bounds(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_after_max_ms=0)
    assert log.append(build_batch([Record(0, NOW, b"k", b"v")], timestamp_type=LOG_APPEND_TIME), NOW).first_offset == 0


def test_the_coordinators_own_batches_skip_the_record_rules(tmp_path: Path) -> None:
    log = _log(tmp_path, cleanup_policy="compact", message_timestamp_after_max_ms=0)
    batch = build_batch([Record(0, NOW + SECOND, None, b"v")])
    assert log.append(batch, NOW, coordinator=True).first_offset == 0


def test_new_bounds_apply_to_the_next_append(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(build_batch([Record(0, NOW + SECOND, b"k", b"v")]), NOW)
    log.update_config(LogConfig(message_timestamp_after_max_ms=0))
    assert _refusal(log, Record(0, NOW + SECOND, b"k", b"v")).error_code == ErrorCode.INVALID_TIMESTAMP
