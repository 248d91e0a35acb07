"""`kbroker serve` reuses the memory of large requests instead of mapping it fresh for each.

A page fault costs microseconds on a VM, and a 1 MB produce request (its receive buffer, its
decompressed records) touches about 250 pages: counted here as the broker process's minor
page faults (/proc/<pid>/stat), a real `kbroker serve` and real sockets.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kbroker.testing import BrokerProcess
from wire import messages
from wire.compression import LZ4, NONE
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, METADATA = 0, 3
REQUESTS = 30
FAULTS_PER_FRESH_MIB = 256  # 4 KiB pages


def _minor_faults(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])  # minflt, the 10th field of the whole line


def _large_batch(codec: int) -> bytes:
    rng = random.Random(codec)
    values = [rng.randbytes(5_000) + b"k" * 5_000 for _ in range(90)]  # about 0.9 MB of records
    return build_batch([Record(i, 1_000 + i, None, value, []) for i, value in enumerate(values)], codec=codec)


def _produce(client: RawClient, topic: str, batch: bytes) -> None:
    P = messages.ProduceRequest
    response = client.call(PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    assert response.responses[0].partition_responses[0].error_code == 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="page fault counts come from /proc")
@pytest.mark.parametrize("codec", [NONE, LZ4], ids=["uncompressed", "lz4"])
def test_large_produce_requests_reuse_memory_instead_of_faulting_in_fresh_pages(tmp_path: Path, codec: int):
    broker = BrokerProcess(tmp_path, "log.segment.bytes=1073741824").start()
    client = RawClient(broker.bootstrap)
    try:
        M = messages.MetadataRequest
        client.call(METADATA, 9, M(topics=[M.MetadataRequestTopic(name="big")], allow_auto_topic_creation=True))
        batch = _large_batch(codec)
        for _ in range(5):  # warm up: the heap grows to its working size once
            _produce(client, "big", batch)
        before = _minor_faults(broker.process.pid)
        for _ in range(REQUESTS):
            _produce(client, "big", batch)
        per_request = (_minor_faults(broker.process.pid) - before) / REQUESTS
    finally:
        client.close()
        broker.stop()
    fresh = len(batch) / (1 << 20) * FAULTS_PER_FRESH_MIB  # what one fresh buffer of the request would take
    assert per_request < fresh / 4, f"{per_request:.0f} page faults per request ({os.uname().machine})"
