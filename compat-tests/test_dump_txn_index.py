"""Kafka's DumpLogSegments over the `.txnindex` files kbroker writes: the byte-for-byte proof that an aborted
transaction is recorded as Kafka records it (version, producer id, first and last offsets, last stable offset),
next to the COMMIT/ABORT markers of the `.log` and the coordinator epochs of the producer snapshot.

The log is written by kbroker's storage layer in-process (transactional batches from two producers, markers
appended as the transaction coordinator appends them), so the check does not depend on a transactional client.
"""

from __future__ import annotations

import re
from pathlib import Path

import kafka_tools
import pytest

from kbroker.log import LogConfig, PartitionLog
from wire.records import Record, build_batch, build_end_txn_batch

pytestmark = [pytest.mark.client("kafka-tools"),
              pytest.mark.scenario("Storage format: DumpLogSegments over kbroker's files")]
NOW = 1_700_000_000_000
ENTRY = re.compile(r"^version: (\d+) producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: (\d+)$",
                   re.MULTILINE)
MARKER = re.compile(r"^\| offset: (\d+) .*endTxnMarker: (\w+) coordinatorEpoch: (\d+)$", re.MULTILINE)


def _data(producer_id: int) -> bytes:
    return build_batch([Record(0, NOW, b"key", b"value", ())], producer_id=producer_id, producer_epoch=0,
                       base_sequence=0, is_transactional=True)


def _marker(producer_id: int, commit: bool) -> bytes:
    return build_end_txn_batch(commit, producer_id=producer_id, producer_epoch=0, coordinator_epoch=3, timestamp=NOW)


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0: producer 11 opens; 1: producer 22 opens; 2: 11 aborts; 3: 22 aborts; 4: 33 opens; 5: 33 commits."""
    log = PartitionLog(tmp_path_factory.mktemp("txnindex") / "txn-0", LogConfig(), now_ms=NOW)
    log.append(_data(11), NOW)
    log.append(_data(22), NOW)
    log.append(_marker(11, False), NOW, coordinator=True)
    log.append(_marker(22, False), NOW, coordinator=True)
    log.append(_data(33), NOW)
    log.append(_marker(33, True), NOW, coordinator=True)
    log.update_high_watermark(log.log_end_offset)
    log.close()
    return log.dir


def test_kafka_reads_the_aborted_transactions_of_the_txnindex(partition_dir: Path) -> None:
    output = kafka_tools.run("DumpLogSegments", "--deep-iteration", "--files", ",".join(
        str(partition_dir / name) for name in ("00000000000000000000.txnindex", "00000000000000000000.log")))
    assert "isvalid: false" not in output and "Exception" not in output, output[-3000:]
    # producer 11's LSO is the first offset of 22's transaction, still open then; 22's is its marker + 1
    assert [tuple(map(int, entry)) for entry in ENTRY.findall(output)] == [(0, 11, 0, 2, 1), (0, 22, 1, 3, 4)]
    assert MARKER.findall(output) == [("2", "ABORT", "3"), ("3", "ABORT", "3"), ("5", "COMMIT", "3")]
