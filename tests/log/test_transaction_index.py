"""Transactions on a partition log: `.txnindex` files (Kafka's TransactionIndex), the last stable offset,
coordinator epochs of markers, READ_COMMITTED reads, and the index through truncation, recovery and cleaning."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kbroker.log import AbortedTxn, LogConfig, PartitionLog, TransactionIndex
from kbroker.log.cleaner import clean_log
from kbroker.log.errors import CorruptIndexError, InvalidProducerEpochError, TransactionCoordinatorFencedError
from wire.errors import ErrorCode
from wire.records import Record, build_batch, build_end_txn_batch

from log_helpers import batch_offsets

NOW = 1_700_000_000_000
P1, P2, P3 = 1001, 1002, 1003
KAFKA_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset


def _log(tmp_path: Path, **kwargs: object) -> PartitionLog:
    config = kwargs.pop("config", None) or LogConfig(segment_bytes=kwargs.pop("segment_bytes", 1 << 20))
    return PartitionLog(tmp_path / "txn-0", config, now_ms=NOW, **kwargs)  # type: ignore[arg-type]


def _data(pid: int, seq: int = 0, *, epoch: int = 0, count: int = 1, base_offset: int = 0) -> bytes:
    records = [Record(base_offset + i, NOW, None, b"value-%d" % i, ()) for i in range(count)]
    return build_batch(records, base_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def _plain(base_offset: int = 0) -> bytes:
    return build_batch([Record(base_offset, NOW, None, b"plain", ())], base_offset=base_offset)


def _marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0, base_offset: int = 0) -> bytes:
    return build_end_txn_batch(commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                               timestamp=NOW, base_offset=base_offset)


def _end(log: PartitionLog, pid: int, commit: bool, **kwargs: int) -> int:
    """Append a marker as the coordinator does; its offset."""
    return log.append(_marker(pid, commit, **kwargs), NOW, coordinator=True).first_offset


def _entries(path: Path) -> list[tuple[int, int, int, int, int]]:
    data = path.read_bytes()
    assert len(data) % KAFKA_ENTRY.size == 0
    return list(KAFKA_ENTRY.iter_unpack(data))


def _txnindex(log: PartitionLog, base: int = 0) -> Path:
    return log.dir / f"{base:020d}.txnindex"


def _all_aborted(log: PartitionLog) -> list[AbortedTxn]:
    return [txn for segment in log.segments for txn in segment.txn_index.all_aborted_txns()]


def _two_aborted_transactions(log: PartitionLog) -> None:
    """0: P1 opens; 1: P2 opens; 2: P1 aborts (LSO then: P2's first offset, 1); 3: P2 aborts (LSO 4)."""
    log.append(_data(P1), NOW)
    log.append(_data(P2), NOW)
    _end(log, P1, False)
    _end(log, P2, False)


# --- the file ----------------------------------------------------------------------------------


def test_txnindex_entry_bytes_are_kafkas_34_byte_layout(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    index.append(AbortedTxn(producer_id=7, first_offset=100, last_offset=120, last_stable_offset=121))
    index.append(AbortedTxn(producer_id=2**40, first_offset=110, last_offset=130, last_stable_offset=115))
    assert index.path.read_bytes() == (struct.pack(">hqqqq", 0, 7, 100, 120, 121)
                                       + struct.pack(">hqqqq", 0, 2**40, 110, 130, 115))
    assert index.path.stat().st_size == 2 * 34
    reopened = TransactionIndex(index.path, 100)
    assert reopened.all_aborted_txns() == [AbortedTxn(7, 100, 120, 121), AbortedTxn(2**40, 110, 130, 115)]


def test_txnindex_last_offsets_must_increase(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 1, 5, 6))


def test_txnindex_with_an_entry_below_its_segment_fails_the_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 99, 100))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100).sanity_check()


def test_txnindex_of_an_unknown_version_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 1, 7, 10, 99, 100))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).sanity_check()


# --- markers on the leader path --------------------------------------------------------------------


def test_txnindex_file_is_created_by_the_first_abort_only(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, True)
    assert not _txnindex(log).exists()
    log.append(_data(P1, 1), NOW)
    _end(log, P1, False)
    assert _txnindex(log).exists()


def test_abort_marker_adds_an_entry_with_the_lso_of_that_moment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _two_aborted_transactions(log)
    # P1's LSO is the first offset of the oldest other open transaction (P2's); P2's is its marker + 1
    assert _entries(_txnindex(log)) == [(0, P1, 0, 2, 1), (0, P2, 1, 3, 4)]


def test_an_open_transaction_of_the_same_producer_does_not_bound_the_lso(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, False)
    assert _entries(_txnindex(log)) == [(0, P1, 0, 1, 2)]


def test_commit_marker_adds_no_entry(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    log.append(_data(P2), NOW)
    _end(log, P1, True)
    _end(log, P2, False)
    assert _entries(_txnindex(log)) == [(0, P2, 1, 3, 4)]


def test_marker_without_an_open_transaction_adds_no_entry(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _end(log, P1, False)
    assert not _txnindex(log).exists()
    assert log.producer_state.producers[P1].current_txn_first_offset == -1


def test_abort_entry_goes_to_the_segment_holding_the_marker(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    log.roll(NOW)
    _end(log, P1, False)
    assert not _txnindex(log, 0).exists()
    assert _entries(_txnindex(log, 1)) == [(0, P1, 0, 1, 2)]


# --- coordinator epochs ------------------------------------------------------------------------------


def test_marker_stores_its_coordinator_epoch_in_the_producer_entry(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, True, coordinator_epoch=5)
    assert log.producer_state.producers[P1].coordinator_epoch == 5


def test_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, True, coordinator_epoch=5)
    log.append(_data(P1, 1), NOW)
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError) as refused:
        _end(log, P1, False, coordinator_epoch=4)
    assert refused.value.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end  # nothing written
    assert log.producer_state.producers[P1].current_txn_first_offset == 2


def test_marker_with_an_older_producer_epoch_is_invalid_producer_epoch(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1, epoch=3), NOW)
    with pytest.raises(InvalidProducerEpochError):
        _end(log, P1, False, epoch=2)


def test_coordinator_epoch_survives_a_snapshot(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, True, coordinator_epoch=9)
    log.close()
    reopened = _log(tmp_path, had_clean_shutdown=True)
    assert reopened.producer_state.producers[P1].coordinator_epoch == 9


def test_follower_replicates_markers_of_older_epochs_as_the_leader_wrote_them(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_follower(_data(P1, epoch=3) + _marker(P1, True, epoch=3, coordinator_epoch=5, base_offset=1), NOW)
    zombie = _data(P1, 1, epoch=3, base_offset=2) + _marker(P1, False, epoch=2, coordinator_epoch=4, base_offset=3)
    log.append_as_follower(zombie, NOW)
    assert log.log_end_offset == 4
    assert _entries(_txnindex(log)) == [(0, P1, 2, 3, 4)]


# --- the last stable offset ------------------------------------------------------------------------


def test_lso_stays_at_an_open_transactions_first_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_data(P1), NOW)
    log.append(_plain(), NOW)
    log.update_high_watermark(log.log_end_offset)
    assert (log.high_watermark, log.last_stable_offset, log.first_unstable_offset) == (3, 1, 1)


def test_lso_is_the_high_watermark_without_transactions(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_plain(), NOW)
    log.update_high_watermark(1)
    assert (log.last_stable_offset, log.first_unstable_offset) == (1, None)


def test_lso_moves_past_a_marker_only_once_the_high_watermark_passes_it(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_data(P1), NOW)
    log.update_high_watermark(log.log_end_offset)
    marker = _end(log, P1, False)
    assert log.last_stable_offset == 1  # the transaction is over, but its marker is not replicated yet
    log.update_high_watermark(marker)
    assert log.last_stable_offset == 1
    log.update_high_watermark(marker + 1)
    assert (log.last_stable_offset, log.first_unstable_offset) == (marker + 1, None)


def test_lso_is_the_oldest_of_several_open_transactions(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_data(P1), NOW)
    log.append(_data(P2), NOW)
    _end(log, P1, True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2  # P1's marker is replicated: P2's transaction is the oldest left
    _end(log, P2, True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 5


def test_open_transaction_holds_the_lso_across_a_clean_restart(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_data(P1), NOW)
    log.close()
    reopened = _log(tmp_path, had_clean_shutdown=True, high_watermark=2)
    assert reopened.last_stable_offset == 1
    _end(reopened, P1, False)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 3
    assert _entries(_txnindex(reopened)) == [(0, P1, 1, 2, 3)]


def test_markers_replayed_on_load_end_transactions_and_hold_the_lso_below_the_high_watermark(
        tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.roll(NOW)  # the snapshot at 1 is the newest: the load replays the batches after it
    log.append(_data(P1), NOW)  # 1
    _end(log, P1, False, coordinator_epoch=7)  # 2
    log.flush()
    log.close(flush=False)
    behind = _log(tmp_path, had_clean_shutdown=True, high_watermark=2)
    assert (behind.producer_state.producers[P1].coordinator_epoch, behind.last_stable_offset) == (7, 1)
    behind.close(flush=False)
    caught_up = _log(tmp_path, had_clean_shutdown=True, high_watermark=3)
    assert (caught_up.last_stable_offset, caught_up.first_unstable_offset) == (3, None)
    assert _entries(_txnindex(caught_up, 1)) == [(0, P1, 1, 2, 3)]  # kept as written, not rebuilt


# --- collecting aborted transactions -----------------------------------------------------------------


def test_collect_aborted_transactions_returns_those_overlapping_the_range(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _two_aborted_transactions(log)  # P1 [0, 2], P2 [1, 3]
    log.append(_plain(), NOW)  # 4
    log.roll(NOW)
    log.append(_data(P3), NOW)  # 5
    _end(log, P3, False)  # 6
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(0, 7)] == [
        (P1, 0), (P2, 1), (P3, 5)]
    assert [t.producer_id for t in log.collect_aborted_transactions(3, 4)] == [P2]
    assert log.collect_aborted_transactions(4, 5) == []
    assert [t.producer_id for t in log.collect_aborted_transactions(5, 6)] == [P3]


def test_read_with_aborted_transactions_lists_those_of_the_range_read(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _two_aborted_transactions(log)
    log.append(_plain(), NOW)
    log.update_high_watermark(log.log_end_offset)
    records, aborted = log.read_with_aborted_transactions(0, 1 << 20, log.last_stable_offset)
    assert batch_offsets(records.read_bytes()) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert [(t.producer_id, t.first_offset) for t in aborted] == [(P1, 0), (P2, 1)]
    assert log.read_with_aborted_transactions(5, 1 << 20, log.last_stable_offset) == (None, [])


def test_read_committed_stops_at_the_lso(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.append(_data(P1), NOW)
    log.append(_plain(), NOW)
    log.update_high_watermark(log.log_end_offset)
    records, aborted = log.read_with_aborted_transactions(0, 1 << 20, log.last_stable_offset)
    assert batch_offsets(records.read_bytes()) == [(0, 0)]
    assert aborted == []


# --- truncation, recovery, retention ----------------------------------------------------------------


def test_truncation_cuts_the_txnindex_at_the_truncation_point(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _two_aborted_transactions(log)
    log.truncate_to(3)
    assert _entries(_txnindex(log)) == [(0, P1, 0, 2, 1)]
    assert log.producer_state.producers[P2].current_txn_first_offset == 1  # its abort is gone
    log.truncate_to(2)
    assert _entries(_txnindex(log)) == []
    assert log.last_stable_offset == 0


def test_truncation_removes_the_txnindex_of_later_segments(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    log.roll(NOW)
    _end(log, P1, False)
    log.truncate_to(1, NOW)  # the segment at 1 stays, emptied, and so does its (empty) file, as in Kafka
    assert _entries(_txnindex(log, 1)) == []
    log.truncate_to(0, NOW)
    log.purge_deleted(force=True)
    assert not list(log.dir.glob(f"{1:020d}.txnindex*"))


def test_recovery_rebuilds_the_txnindex_of_recovered_segments(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    log.append(_data(P2), NOW)
    log.roll(NOW)  # the snapshot at 2 holds both open transactions
    _end(log, P1, False)
    _end(log, P2, False)
    expected = _txnindex(log, 2).read_bytes()
    log.close(flush=False)
    _txnindex(log, 2).unlink()
    reopened = _log(tmp_path, recovery_point=2)
    assert _txnindex(reopened, 2).read_bytes() == expected
    assert _entries(_txnindex(reopened, 2)) == [(0, P1, 0, 2, 1), (0, P2, 1, 3, 4)]


def test_recovery_without_snapshots_replays_the_earlier_segments_to_rebuild_the_txnindex(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    log.append(_data(P2), NOW)
    log.roll(NOW)
    _end(log, P1, False)
    _end(log, P2, False)
    log.close(flush=False)
    _txnindex(log, 2).write_bytes(b"")
    for snapshot in log.dir.glob("*.snapshot"):
        snapshot.unlink()
    reopened = _log(tmp_path, recovery_point=2)
    assert _entries(_txnindex(reopened, 2)) == [(0, P1, 0, 2, 1), (0, P2, 1, 3, 4)]


def test_recovery_drops_entries_of_a_torn_tail(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _two_aborted_transactions(log)
    log.close(flush=False)
    segment_log = log.dir / f"{0:020d}.log"
    size = segment_log.stat().st_size
    with open(segment_log, "r+b") as f:
        f.truncate(size - 10)  # P2's marker is torn
    reopened = _log(tmp_path)
    assert reopened.log_end_offset == 3
    assert _entries(_txnindex(reopened)) == [(0, P1, 0, 2, 1)]
    assert reopened.producer_state.producers[P2].current_txn_first_offset == 1


def test_a_corrupt_txnindex_is_rebuilt_even_after_a_clean_shutdown(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.roll(NOW)
    log.append(_data(P1), NOW)
    log.roll(NOW)
    _end(log, P1, False)
    log.append(_plain(), NOW)
    log.close()
    _txnindex(log, 2).write_bytes(struct.pack(">hqqqq", 0, P1, 0, 1, 1))  # ends below the segment
    reopened = _log(tmp_path, had_clean_shutdown=True)
    assert _entries(_txnindex(reopened, 2)) == [(0, P1, 1, 2, 3)]


def test_roll_replaces_a_stale_txnindex_left_at_the_new_base(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    _txnindex(log, 1).write_bytes(struct.pack(">hqqqq", 0, P1, 0, 5, 6))
    log.roll(NOW)
    assert not _txnindex(log, 1).exists()
    assert _all_aborted(log) == []


def test_txnindex_without_its_log_is_removed_on_load(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_plain(), NOW)
    log.close()
    orphan = _txnindex(log, 50)
    orphan.write_bytes(struct.pack(">hqqqq", 0, P1, 50, 55, 56))
    _log(tmp_path, had_clean_shutdown=True)
    assert not orphan.exists()


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_data(P1), NOW)
    _end(log, P1, False)
    log.roll(NOW)
    log.append(_plain(), NOW)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(2, NOW)
    assert (log.dir / f"{0:020d}.txnindex.deleted").exists()
    log.purge_deleted(force=True)
    assert not list(log.dir.glob(f"{0:020d}.txnindex*"))


# --- cleaning ----------------------------------------------------------------------------------------


def test_cleaner_carries_an_aborted_transaction_into_the_cleaned_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, config=LogConfig(cleanup_policy="compact", segment_bytes=10_000))
    log.append(build_batch([Record(0, NOW, b"t", b"aborted", ())], producer_id=P1, producer_epoch=0,
                           base_sequence=0, is_transactional=True), NOW)
    _end(log, P1, False)
    log.append(build_batch([Record(0, NOW, b"k", b"v", ())]), NOW)
    log.roll(NOW)
    log.append(build_batch([Record(0, NOW, b"active", b"v", ())]), NOW)
    log.update_high_watermark(log.log_end_offset)
    clean_log(log, now_ms=NOW)
    # the batch stays emptied (P1 is an active producer), so the marker and its entry stay
    assert _entries(_txnindex(log, 0)) == [(0, P1, 0, 1, 2)]
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
    later = NOW + 2 * 86_400_000
    log.apply_retention(later)  # producer.id.expiration.ms: P1 is no longer active
    clean_log(log, now_ms=later)  # the emptied batch goes; this round met it, so the entry is carried once more
    assert _entries(_txnindex(log, 0)) == [(0, P1, 0, 1, 2)]
    clean_log(log, now_ms=later)  # no batch of the transaction is left: the entry is not carried again
    assert not _txnindex(log, 0).exists()
