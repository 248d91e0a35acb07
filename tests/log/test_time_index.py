"""TimeIndex: Kafka's `.timeindex` file, 12-byte (timestamp, relative offset) entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import CorruptIndexError, TimeIndex, TimestampOffset

from log_helpers import time_index_entries


def _index(tmp_path: Path, base: int = 50, size: int = 12 * 100) -> TimeIndex:
    return TimeIndex(tmp_path / f"{base:020d}.timeindex", base, size)


def test_entries_are_int64_timestamp_and_int32_relative_offset(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.maybe_append(1_700_000_000_000, 57)
    index.close()
    assert index.path.read_bytes() == (1_700_000_000_000).to_bytes(8, "big") + (7).to_bytes(4, "big")


def test_maybe_append_keeps_timestamps_strictly_increasing(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.maybe_append(1000, 51)
    index.maybe_append(1000, 52)  # same timestamp: skipped
    index.maybe_append(900, 53)  # older: skipped
    index.maybe_append(2000, 54)
    index.close()
    assert time_index_entries(index.path) == [(1000, 1), (2000, 4)]


def test_lookup_returns_greatest_entry_at_or_below_timestamp(tmp_path: Path) -> None:
    index = _index(tmp_path)
    for i in range(1, 20):
        index.maybe_append(i * 100, 50 + i)
    assert index.lookup(50) == TimestampOffset(-1, 50)
    assert index.lookup(100) == TimestampOffset(100, 51)
    assert index.lookup(1050) == TimestampOffset(1000, 60)
    assert index.lookup(10**12) == TimestampOffset(1900, 69)


def test_last_slot_is_reserved_for_the_roll_entry(tmp_path: Path) -> None:
    index = _index(tmp_path, size=12 * 3)
    index.maybe_append(1, 51)
    index.maybe_append(2, 52)
    assert index.is_full
    with pytest.raises(CorruptIndexError):
        index.maybe_append(3, 53)
    index.maybe_append(3, 53, skip_full_check=True)
    assert index.entries == 3


def test_maybe_append_rejects_offsets_going_backwards(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.maybe_append(100, 60)
    with pytest.raises(CorruptIndexError):
        index.maybe_append(200, 59)


def test_truncate_to_drops_entries_at_or_after_offset(tmp_path: Path) -> None:
    index = _index(tmp_path)
    for i in range(1, 6):
        index.maybe_append(i * 100, 50 + 10 * i)
    index.truncate_to(80)
    assert index.last_entry == TimestampOffset(200, 70)
