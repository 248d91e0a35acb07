"""Opening a log after a crash (recovery) or after a clean shutdown (no scan)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from kbroker.log import LogConfig, LogManager, PartitionLog
from wire.records import iter_batches

from log_helpers import batch, flip_byte, index_entries, read_records, time_index_entries

NOW = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def _written(tmp_path: Path, batches: int = 5, **config: object) -> PartitionLog:
    log = PartitionLog(tmp_path / "t-0", LogConfig(**config), now_ms=NOW)
    for i in range(batches):
        log.append(batch(2, timestamp=NOW + i, value_size=1_500), NOW)
    log.close()
    return log


def _reopen(tmp_path: Path, *, clean: bool, recovery_point: int = 0, **config: object) -> PartitionLog:
    return PartitionLog(
        tmp_path / "t-0",
        LogConfig(**config),
        had_clean_shutdown=clean,
        recovery_point=recovery_point,
        now_ms=NOW,
    )


def _positions(path: Path) -> list[int]:
    return [p for p, _ in iter_batches(path.read_bytes())]


def test_unclean_open_truncates_a_torn_half_batch(tmp_path: Path) -> None:
    log = _written(tmp_path)
    size = log.active_segment.log_path.stat().st_size
    with open(log.active_segment.log_path, "ab") as f:
        f.write(batch(3)[:40])
    again = _reopen(tmp_path, clean=False)
    assert again.log_end_offset == 10
    assert again.truncated_on_load == 40
    assert again.active_segment.log_path.stat().st_size == size
    assert again.append(batch(1), NOW).first_offset == 10


def test_unclean_open_truncates_trailing_garbage(tmp_path: Path) -> None:
    log = _written(tmp_path)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(b"\x00" * 7 + b"\xff" * 100)
    again = _reopen(tmp_path, clean=False)
    assert again.log_end_offset == 10
    assert [r.offset for r in read_records(again)] == list(range(10))


def test_unclean_open_truncates_from_a_bit_flipped_batch(tmp_path: Path) -> None:
    log = _written(tmp_path)
    path = log.active_segment.log_path
    flip_byte(path, _positions(path)[4] + 100)  # inside the last batch's records: CRC fails
    again = _reopen(tmp_path, clean=False)
    assert again.log_end_offset == 8
    assert path.stat().st_size == _positions(path)[-1] + len(batch(2, value_size=1_500))


def test_missing_index_is_rebuilt_even_after_a_clean_shutdown(tmp_path: Path) -> None:
    log = _written(tmp_path)
    index_path, time_path = log.active_segment.offset_index.path, log.active_segment.time_index.path
    before, time_before = index_entries(index_path), time_index_entries(time_path)
    assert before  # 15 KB of batches: several entries
    index_path.unlink()
    time_path.unlink()
    _reopen(tmp_path, clean=True).close()
    assert index_entries(index_path) == before
    assert time_index_entries(time_path) == time_before


def test_corrupt_index_is_rebuilt_after_a_clean_shutdown(tmp_path: Path) -> None:
    log = _written(tmp_path)
    index_path = log.active_segment.offset_index.path
    before = index_entries(index_path)
    index_path.write_bytes(b"\x7f\xff\xff\xff" * 2 + index_path.read_bytes())  # out of order
    _reopen(tmp_path, clean=True).close()
    assert index_entries(index_path) == before


def test_clean_open_trusts_the_files_and_unclean_open_scans_them(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        log = manager.create("t", 0)
        for i in range(3):
            log.append(batch(1, timestamp=NOW + i), NOW)
    path = tmp_path / "t-0" / "00000000000000000000.log"
    flip_byte(path, _positions(path)[1] + 70)  # corrupt the middle batch of three

    with LogManager([tmp_path]) as manager:  # clean: no scan, the damage goes unnoticed
        assert manager.get("t", 0).log_end_offset == 3
    assert path.stat().st_size == 3 * len(batch(1))

    (tmp_path / ".kafka_cleanshutdown").unlink()  # as if the broker had crashed
    with LogManager([tmp_path]) as manager:  # unclean: recovery finds and cuts it
        assert manager.get("t", 0).log_end_offset == 1
    assert path.stat().st_size == len(batch(1))


def test_recovery_starts_at_the_segment_holding_the_recovery_point(tmp_path: Path) -> None:
    log = _written(tmp_path, batches=6, segment_bytes=2 * len(batch(2, value_size=1_500)) + 1)
    first, second = (s.log_path for s in log.segments[:2])
    flip_byte(first, _positions(first)[1] + 100)  # below the recovery point: never scanned
    flip_byte(second, _positions(second)[1] + 100)  # in the segment holding it: scanned
    again = _reopen(tmp_path, clean=False, recovery_point=5, segment_bytes=10**6)
    assert again.log_end_offset == 6
    assert [s.base_offset for s in again.segments] == [0, 4]  # the segment after the cut is gone
    assert first.stat().st_size == 2 * len(batch(2, value_size=1_500))


def test_clean_open_sets_the_recovery_point_to_the_log_end(tmp_path: Path) -> None:
    _written(tmp_path)
    assert _reopen(tmp_path, clean=True).recovery_point == 10
    assert _reopen(tmp_path, clean=False, recovery_point=4).recovery_point == 4


_CRASHING_BROKER = """
import os, sys
from pathlib import Path
from kbroker.log import LogManager
from wire.records import Record, build_batch
manager = LogManager([Path(sys.argv[1])])
log = manager.create("events", 0)
for i in range(50):
    log.append(build_batch([Record(0, 1000 + i, None, b"payload-%d" % i, ())]), 1000 + i)
torn = build_batch([Record(0, 2000, None, b"never acknowledged", ())])
os.write(log.active_segment.file.fileno(), torn[: len(torn) // 2])
os._exit(0)  # no close(): no checkpoints, no clean-shutdown marker
"""


def test_process_killed_mid_write_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CRASHING_BROKER), str(tmp_path)],
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    with LogManager([tmp_path]) as manager:
        log = manager.get("events", 0)
        assert log.log_end_offset == 50
        assert [r.value for r in read_records(log)] == [b"payload-%d" % i for i in range(50)]


def test_clean_open_recovers_an_active_segment_whose_last_header_is_damaged(tmp_path: Path) -> None:
    log = _written(tmp_path)
    path = log.active_segment.log_path
    flip_byte(path, _positions(path)[4] + 16)  # the magic byte of the last batch
    again = _reopen(tmp_path, clean=True)
    assert again.log_end_offset == 8
