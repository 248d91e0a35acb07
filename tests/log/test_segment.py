"""LogSegment: the `.log` + `.index` + `.timeindex` trio of one base offset."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from kbroker.log import FileSlice, LogSegment
from wire.records import iter_batches, patch_base_offset, read_batch_header

from log_helpers import batch, batch_offsets, flip_byte, index_entries, time_index_entries

MIB10 = 10 * 1024 * 1024


def _append(segment: LogSegment, data: bytes, base_offset: int) -> int:
    """Append one batch at `base_offset`; returns the next offset."""
    buf = bytearray(data)
    patch_base_offset(buf, 0, base_offset)
    header = read_batch_header(buf)
    segment.append(buf, header.last_offset, header.max_timestamp, header.last_offset)
    return header.next_offset


def _filled(tmp_path: Path, batches: int = 40, base: int = 0, records: int = 2) -> LogSegment:
    segment = LogSegment(tmp_path, base)
    offset = base
    for i in range(batches):
        offset = _append(segment, batch(records, timestamp=1_000 + i, value_size=400), offset)
    return segment


def test_files_are_named_by_base_offset_zero_padded_to_20_digits(tmp_path: Path) -> None:
    LogSegment(tmp_path, 1234).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000001234.index",
        "00000000000000001234.log",
        "00000000000000001234.timeindex",
    ]


def test_active_indexes_are_preallocated_and_trimmed_on_close(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    assert segment.offset_index.path.stat().st_size == MIB10
    assert segment.time_index.path.stat().st_size == MIB10 - MIB10 % 12
    segment.close()
    assert segment.offset_index.path.stat().st_size == 8 * segment.offset_index.entries
    assert segment.time_index.path.stat().st_size == 12 * segment.time_index.entries


def test_log_file_holds_the_appended_batches_verbatim(tmp_path: Path) -> None:
    segment = LogSegment(tmp_path, 0)
    data = bytearray(batch(3))
    patch_base_offset(data, 0, 0)
    segment.append(data, 2, 1000, 2)
    segment.close()
    assert (tmp_path / "00000000000000000000.log").read_bytes() == bytes(data)


def test_index_has_an_entry_after_every_4096_bytes_of_log(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    segment.close()
    log_bytes = segment.log_path.read_bytes()
    expected, since = [], 0
    for position, header in iter_batches(log_bytes):
        if since > 4096:
            expected.append((header.last_offset, position))
            since = 0
        since += header.size
    assert len(expected) >= 5
    assert index_entries(segment.offset_index.path) == expected


def test_time_index_records_max_timestamp_at_each_index_entry_plus_one_on_close(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    segment.close()
    offsets = [relative for relative, _ in index_entries(segment.offset_index.path)]
    entries = time_index_entries(segment.time_index.path)
    # Batch i holds offsets 2i..2i+1 and timestamp 1000+i, so an entry at offset o has ts 1000+o//2.
    assert entries[:-1] == [(1_000 + o // 2, o) for o in offsets]
    assert entries[-1] == (1_039, 79)  # the segment's max timestamp, written when it closes


def test_read_returns_whole_batches_within_max_bytes(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    size = read_batch_header(os.pread(segment.file.fileno(), 61, 0)).size
    found = segment.read(7, max_bytes=3 * size + size // 2)
    assert batch_offsets(found.read_bytes()) == [(6, 7), (8, 9), (10, 11)]
    assert len(found) == 3 * size


def test_read_returns_one_whole_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    found = segment.read(0, max_bytes=10)
    assert batch_offsets(found.read_bytes()) == [(0, 1)]


def test_read_stops_at_max_position(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    cap = segment.position_of(20)  # start of the batch holding offset 20
    found = segment.read(0, max_bytes=1 << 20, max_position=cap)
    assert batch_offsets(found.read_bytes())[-1] == (18, 19)
    assert segment.read(20, max_bytes=1 << 20, max_position=cap) is None


def test_read_past_the_end_returns_none(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=3)
    assert segment.read(6, 1000) is None


def test_file_slice_can_be_sent_with_sendfile(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=5)
    found = segment.read(4, 1 << 20)
    assert isinstance(found, FileSlice)
    left, right = socket.socketpair()
    with left, right:
        sent = os.sendfile(left.fileno(), found.fileno(), found.position, len(found))
        received = b""
        while len(received) < sent:
            received += right.recv(1 << 16)
    assert sent == len(found) and received == found.read_bytes()


def test_read_next_offset_scans_from_the_last_index_entry(tmp_path: Path) -> None:
    segment = _filled(tmp_path, base=500)
    assert segment.read_next_offset() == 580


def test_read_next_offset_of_an_empty_segment_is_its_base_offset(tmp_path: Path) -> None:
    assert LogSegment(tmp_path, 42).read_next_offset() == 42


def test_recover_rebuilds_indexes_identical_to_the_appended_ones(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    built = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
    assert segment.recover() == 0
    assert [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)] == built


def test_recover_truncates_a_half_written_batch(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=5)
    good = segment.size
    segment.close()
    with open(segment.log_path, "ab") as f:
        f.write(batch(3)[:50])
    segment = LogSegment(tmp_path, 0)
    assert segment.recover() == 50
    assert segment.size == good == segment.log_path.stat().st_size


def test_recover_truncates_from_the_first_batch_failing_its_crc(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=5)
    third = [p for p, _ in iter_batches(segment.log_path.read_bytes())][2]
    segment.close()
    flip_byte(segment.log_path, third + 70)
    segment = LogSegment(tmp_path, 0)
    segment.recover()
    assert segment.read_next_offset() == 4
    assert segment.size == third


def test_truncate_to_removes_the_batch_holding_the_offset_and_after(tmp_path: Path) -> None:
    segment = _filled(tmp_path)
    removed = segment.truncate_to(31)
    assert removed > 0
    assert segment.read_next_offset() == 30
    assert segment.offset_index.last_offset < 30
    assert segment.max_timestamp_so_far == 1_014


def _roll_due(
    segment: LogSegment,
    *,
    segment_bytes: int = 10**9,
    segment_ms: int = 10**9,
    messages_size: int = 1,
    max_timestamp: int = 1_000,
) -> bool:
    return segment.should_roll(
        segment_bytes=segment_bytes,
        segment_ms=segment_ms,
        messages_size=messages_size,
        max_timestamp_in_messages=max_timestamp,
        max_offset_in_messages=5,
        now_ms=0,
    )


def test_roll_is_due_when_the_append_would_pass_segment_bytes(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=1)
    assert not _roll_due(segment, segment_bytes=segment.size + 100, messages_size=100)
    assert _roll_due(segment, segment_bytes=segment.size + 100, messages_size=101)


def test_roll_is_due_when_record_time_passes_segment_ms_since_the_first_batch(tmp_path: Path) -> None:
    segment = _filled(tmp_path, batches=1)  # first batch's timestamp is 1000
    assert not _roll_due(segment, segment_ms=500, max_timestamp=1_500)
    assert _roll_due(segment, segment_ms=500, max_timestamp=1_501)
