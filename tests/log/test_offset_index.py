"""OffsetIndex: Kafka's `.index` file, 8-byte (relative offset, position) entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import CorruptIndexError, LogSegmentOffsetOverflowError, OffsetIndex, OffsetPosition

from log_helpers import index_entries

MAX = 8 * 1024


def _index(tmp_path: Path, base: int = 100, size: int = MAX) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{base:020d}.index", base, size)


def test_new_index_is_preallocated_to_max_index_size(tmp_path: Path) -> None:
    index = _index(tmp_path, size=MAX + 5)
    assert index.path.stat().st_size == MAX  # rounded down to whole entries
    assert index.max_entries == MAX // 8


def test_entries_are_relative_offset_and_position_big_endian(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(110, 4200)
    index.append(125, 8400)
    index.close()
    assert index.path.read_bytes() == bytes.fromhex("0000000a 00001068 00000019 000020d0".replace(" ", ""))


def test_close_trims_file_to_used_entries(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(101, 5000)
    index.close()
    assert index_entries(index.path) == [(1, 5000)]


def test_lookup_returns_greatest_entry_at_or_below_offset(tmp_path: Path) -> None:
    index = _index(tmp_path)
    for i in range(1, 50):
        index.append(100 + 10 * i, 1000 * i)
    assert index.lookup(100) == OffsetPosition(100, 0)  # before the first entry: segment start
    assert index.lookup(110) == OffsetPosition(110, 1000)
    assert index.lookup(119) == OffsetPosition(110, 1000)
    assert index.lookup(10_000) == OffsetPosition(590, 49_000)


def test_floor_by_position_returns_greatest_entry_at_or_below_position(tmp_path: Path) -> None:
    index = _index(tmp_path)
    for i in range(1, 10):
        index.append(100 + 10 * i, 1000 * i)
    assert index.floor_by_position(999) == OffsetPosition(100, 0)
    assert index.floor_by_position(3500) == OffsetPosition(130, 3000)


def test_append_rejects_entries_not_after_the_last(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(110, 1000)
    with pytest.raises(CorruptIndexError):
        index.append(110, 2000)
    with pytest.raises(CorruptIndexError):
        index.append(120, 1000)


def test_append_rejects_offsets_that_overflow_int32_relative(tmp_path: Path) -> None:
    index = _index(tmp_path)
    with pytest.raises(LogSegmentOffsetOverflowError):
        index.append(100 + 2**31, 1000)


def test_is_full_when_every_preallocated_slot_is_used(tmp_path: Path) -> None:
    index = _index(tmp_path, size=16)
    index.append(101, 10)
    assert not index.is_full
    index.append(102, 20)
    assert index.is_full
    with pytest.raises(CorruptIndexError):
        index.append(103, 30)


def test_truncate_to_drops_entries_at_or_after_offset(tmp_path: Path) -> None:
    index = _index(tmp_path)
    for i in range(1, 6):
        index.append(100 + 10 * i, 1000 * i)
    index.truncate_to(130)
    assert index.entries == 2
    assert index.last_entry == OffsetPosition(120, 2000)


def test_reopen_reads_trimmed_file_as_written(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(105, 4500)
    index.close()
    again = _index(tmp_path)
    assert not again.newly_created
    assert again.entries == 1 and again.lookup(200) == OffsetPosition(105, 4500)


def test_reopen_ignores_zeroed_preallocated_tail_left_by_a_crash(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(105, 4500)
    index.append(107, 9000)
    index.flush()  # no close: the file keeps its preallocated size, as after kill -9
    again = _index(tmp_path)
    assert again.entries == 2
    assert again.last_entry == OffsetPosition(107, 9000)


def test_sanity_check_rejects_position_beyond_the_log(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(105, 4500)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size=4000)
