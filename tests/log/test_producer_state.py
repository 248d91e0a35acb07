"""Idempotent producers on a partition log: duplicates, sequence and epoch checks, snapshots."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from kbroker.log import LogConfig, PartitionLog
from kbroker.log import segment as segment_module
from kbroker.log.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from kbroker.log.producer_state import (
    PRODUCER_ID_EXPIRATION_MS,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
    increment_sequence,
)
from wire.records import Record, build_batch

NOW = 1_700_000_000_000
PID = 4242
INT32_MAX = 2**31 - 1
SEGMENT_FOR_TWO_BATCHES = 200  # each test batch is ~75 bytes: a segment rolls every two


def _log(tmp_path: Path, *, clean: bool = False, **config: object) -> PartitionLog:
    return PartitionLog(tmp_path / "topic-0", LogConfig(**config), had_clean_shutdown=clean, now_ms=NOW)


def _batch(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, timestamp: int = NOW,
           transactional: bool = False) -> bytes:
    records = [Record(i, timestamp, None, b"value-%d" % i, ()) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=transactional)


def _snapshots(log: PartitionLog) -> list[str]:
    return sorted(p.name for p in log.dir.glob("*.snapshot"))


# --- duplicates ------------------------------------------------------------------------------


@pytest.mark.parametrize("age", range(5))
def test_retry_of_any_of_the_last_five_batches_is_a_duplicate(tmp_path: Path, age: int) -> None:
    log = _log(tmp_path)
    infos = [log.append(_batch(seq * 2, 2), NOW) for seq in range(5)]
    original = infos[4 - age]
    retry = log.append(_batch((4 - age) * 2, 2), NOW)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (original.first_offset, original.last_offset)


def test_duplicate_writes_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    size = log.size
    log.append(_batch(0), NOW)
    assert (log.log_end_offset, log.size) == (1, size)


def test_duplicate_reports_the_batch_timestamp_as_log_append_time(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, timestamp=NOW - 5), NOW)
    assert log.append(_batch(0, timestamp=NOW - 5), NOW).log_append_time == NOW - 5


def test_retry_older_than_the_last_five_batches_is_out_of_order(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for seq in range(6):
        log.append(_batch(seq), NOW)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_batch(0), NOW)


def test_same_sequences_under_a_new_epoch_are_not_a_duplicate(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    info = log.append(_batch(0, epoch=1), NOW)
    assert not info.duplicate and info.first_offset == 1


# --- sequences and epochs ----------------------------------------------------------------------


def test_unknown_producer_is_accepted_at_any_sequence(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert log.append(_batch(17), NOW).first_offset == 0
    assert log.producer_state.producers[PID].last_seq == 17


def test_next_sequence_is_accepted(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, 3), NOW)
    assert log.append(_batch(3), NOW).first_offset == 3


def test_sequence_gap_is_out_of_order(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, 3), NOW)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_batch(4), NOW)
    assert log.log_end_offset == 3


def test_lower_epoch_is_fenced_with_invalid_producer_epoch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, epoch=3), NOW)
    with pytest.raises(InvalidProducerEpochError) as caught:
        log.append(_batch(1, epoch=2), NOW)
    assert caught.value.error_code == 47


def test_new_epoch_must_start_at_sequence_zero(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    with pytest.raises(OutOfOrderSequenceError) as caught:
        log.append(_batch(1, epoch=1), NOW)
    assert caught.value.error_code == 45


def test_new_epoch_at_sequence_zero_replaces_the_old_epoch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    log.append(_batch(0, epoch=1), NOW)
    with pytest.raises(InvalidProducerEpochError):
        log.append(_batch(1, epoch=0), NOW)


def test_sequence_wraps_from_int32_max_to_zero(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(INT32_MAX), NOW)
    assert log.append(_batch(0), NOW).first_offset == 1


def test_sequence_arithmetic_wraps_like_kafkas_batches() -> None:
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert increment_sequence(5, 3) == 8


def test_batch_spanning_the_wrap_ends_at_the_wrapped_sequence(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(INT32_MAX - 1, 4), NOW)  # sequences MAX-1, MAX, 0, 1
    assert log.producer_state.producers[PID].last_seq == 1
    assert log.append(_batch(INT32_MAX - 1, 4), NOW).duplicate
    assert log.append(_batch(2), NOW).first_offset == 4


def test_rejected_request_changes_no_producer_state(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_batch(0, epoch=1) + _batch(5, epoch=2), NOW)  # epoch 2 must start at 0
    assert PID not in log.producer_state.producers
    assert log.log_end_offset == 0


def test_batches_of_one_request_are_checked_in_order(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    info = log.append(_batch(1) + _batch(2), NOW)
    assert (info.first_offset, info.last_offset) == (1, 2)
    assert log.producer_state.producers[PID].last_seq == 2


def test_coordinator_appends_skip_sequence_checks(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    assert log.append(_batch(9), NOW, coordinator=True).first_offset == 1


def test_plain_batch_inside_an_open_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, transactional=True), NOW)
    assert log.producer_state.producers[PID].current_txn_first_offset == 0
    with pytest.raises(InvalidTxnStateError):
        log.append(_batch(1), NOW)


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, timestamp=NOW), NOW)
    log.apply_retention(NOW + PRODUCER_ID_EXPIRATION_MS)
    assert PID not in log.producer_state.producers


def test_producer_id_expiration_ms_sets_how_long_an_idle_producer_is_kept(tmp_path: Path) -> None:
    log = _log(tmp_path, producer_id_expiration_ms=1_000)
    log.append(_batch(0, timestamp=NOW), NOW)
    log.apply_retention(NOW + 999)
    assert PID in log.producer_state.producers
    log.apply_retention(NOW + 1_000)
    assert PID not in log.producer_state.producers


# --- snapshot files ----------------------------------------------------------------------------


def _entry() -> ProducerStateEntry:
    entry = ProducerStateEntry(PID, producer_epoch=3, coordinator_epoch=-1)
    entry.add_batch(3, last_seq=9, last_offset=120, offset_delta=4, timestamp=NOW)
    return entry


def test_snapshot_bytes_follow_kafkas_layout(tmp_path: Path) -> None:
    data = encode_snapshot([_entry()])
    entries = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", PID, 3, 9, 120, 4, NOW, -1, -1)
    assert data[:2] == b"\x00\x01"
    assert data[6:] == entries
    assert struct.unpack(">I", data[2:6])[0] == crc32c.crc32c(entries)


def test_snapshot_round_trips_the_last_batch(tmp_path: Path) -> None:
    (entry,) = decode_snapshot(encode_snapshot([_entry()]))
    assert (entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (PID, 3, 9, 120)
    assert (entry.batches[-1].first_seq, entry.batches[-1].first_offset, entry.last_timestamp) == (5, 116, NOW)


def test_snapshot_with_a_flipped_byte_fails_its_crc(tmp_path: Path) -> None:
    data = bytearray(encode_snapshot([_entry()]))
    data[20] ^= 0xFF
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(bytes(data))


def test_snapshot_of_another_version_is_corrupt(tmp_path: Path) -> None:
    data = bytearray(encode_snapshot([]))
    data[1] = 2
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode_snapshot(bytes(data))


def test_roll_writes_a_snapshot_at_the_new_segment_base(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    log.roll(NOW)
    assert _snapshots(log) == ["00000000000000000001.snapshot"]
    (entry,) = decode_snapshot((log.dir / "00000000000000000001.snapshot").read_bytes())
    assert (entry.producer_id, entry.last_seq, entry.last_data_offset) == (PID, 0, 0)


def test_clean_close_writes_a_snapshot_at_the_log_end(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, 3), NOW)
    log.close()
    assert _snapshots(log) == ["00000000000000000003.snapshot"]


# --- rebuilding after a restart ------------------------------------------------------------------


def test_state_survives_a_clean_reopen_without_reading_the_log(tmp_path: Path, monkeypatch) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, 2), NOW)
    log.close()
    monkeypatch.setattr(segment_module.LogSegment, "batch_headers", _no_scan)
    reopened = _log(tmp_path, clean=True)
    assert reopened.append(_batch(0, 2), NOW).duplicate


def _no_scan(*_args: object) -> None:
    raise AssertionError("the log was scanned although a snapshot at its end exists")


def test_state_is_rebuilt_from_the_log_when_there_is_no_snapshot(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_batch(0, 2), NOW)
    log.append(_batch(2, 2), NOW)
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    reopened = _log(tmp_path)
    assert reopened.append(_batch(2, 2), NOW).duplicate
    assert reopened.producer_state.producers[PID].last_seq == 3


def test_reopen_without_an_end_snapshot_replays_only_what_follows_the_latest_snapshot(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.flush()
    log.close(flush=False)  # no snapshot at the log end
    assert _snapshots(log) == ["00000000000000000002.snapshot", "00000000000000000004.snapshot"]
    scanned: list[int] = []
    original = segment_module.LogSegment.batch_headers

    def spy(segment, start: int = 0):
        scanned.append(segment.base_offset)
        return original(segment, start)

    monkeypatch.setattr(segment_module.LogSegment, "batch_headers", spy)
    reopened = _log(tmp_path, clean=True, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    assert scanned == [4]
    assert reopened.producer_state.producers[PID].last_seq == 4
    assert reopened.append(_batch(4), NOW).duplicate


def test_recovery_snapshots_each_recovered_segment_so_nothing_is_replayed_twice(tmp_path: Path,
                                                                                monkeypatch) -> None:
    """Kafka's recoverSegment: the producer state follows the recovered batches and is snapshotted at the end
    of each recovered segment, so the log's own rebuild replays nothing."""
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.close(flush=False)  # as after a crash
    scanned: list[int] = []
    original = segment_module.LogSegment.batch_headers

    def spy(segment, start: int = 0):
        scanned.append(segment.base_offset)
        return original(segment, start)

    monkeypatch.setattr(segment_module.LogSegment, "batch_headers", spy)
    reopened = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    assert scanned == []
    assert "00000000000000000005.snapshot" in _snapshots(reopened)
    assert reopened.producer_state.producers[PID].last_seq == 4
    assert reopened.append(_batch(4), NOW).duplicate


def test_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.close()
    latest = log.dir / "00000000000000000005.snapshot"
    latest.write_bytes(latest.read_bytes()[:-1] + b"\x00")
    reopened = _log(tmp_path, clean=True, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    assert reopened.producer_state.producers[PID].last_seq == 4
    assert decode_snapshot(latest.read_bytes())  # rewritten, whole again


def test_clean_log_without_any_snapshot_starts_empty_without_a_scan(tmp_path: Path, monkeypatch) -> None:
    log = _log(tmp_path)
    log.append(_batch(0), NOW)
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    monkeypatch.setattr(segment_module.LogSegment, "batch_headers", _no_scan)
    reopened = _log(tmp_path, clean=True)  # as Kafka after an upgrade from a snapshot-less broker
    assert reopened.producer_state.producers == {}
    assert _snapshots(reopened) == ["00000000000000000001.snapshot"]


def test_stray_snapshots_are_removed_on_open(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(3):
        log.append(_batch(seq), NOW)
    log.close()  # snapshots at 2 (segment base) and 3 (log end)
    (log.dir / "00000000000000000001.snapshot").write_bytes(encode_snapshot([]))
    reopened = _log(tmp_path, clean=True, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    assert _snapshots(reopened) == ["00000000000000000002.snapshot", "00000000000000000003.snapshot"]


# --- truncation and retention ----------------------------------------------------------------------


def test_truncation_deletes_snapshots_above_the_new_log_end(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.truncate_to(3, NOW)
    assert _snapshots(log) == ["00000000000000000002.snapshot", "00000000000000000003.snapshot"]


def test_truncation_rebuilds_the_producer_state(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.truncate_to(3, NOW)
    assert log.producer_state.producers[PID].last_seq == 2
    info = log.append(_batch(3), NOW)
    assert not info.duplicate and info.first_offset == 3


def test_full_truncation_deletes_every_snapshot(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES)
    for seq in range(5):
        log.append(_batch(seq), NOW)
    log.truncate_fully_and_start_at(100, NOW)
    assert _snapshots(log) == [] and log.producer_state.producers == {}


def test_retention_deletes_the_snapshot_of_each_deleted_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=SEGMENT_FOR_TWO_BATCHES, file_delete_delay_ms=0)
    for seq in range(7):
        log.append(_batch(seq), NOW)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(5, NOW)
    assert _snapshots(log) == ["00000000000000000004.snapshot", "00000000000000000006.snapshot"]
    assert log.producer_state.producers[PID].last_seq == 6  # producers outlive their records
