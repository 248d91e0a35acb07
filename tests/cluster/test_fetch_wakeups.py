"""A long-polling Fetch on a replicated partition is answered as soon as it has something: a follower's when the
leader appends, a consumer's when the high watermark moves (Kafka's DelayedFetch), and one of an older leader epoch
when a LeaderAndIsr bumps the epoch. The broker leads "t"-0 with a follower the test drives
(test_pipelined_produce.leader)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_wire_peer import WireClient
from test_pipelined_produce import FOLLOWER, LOCAL, leader

from kbroker.cluster.model import LeaderAndIsr, PartitionState
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

FR, PR = messages.FetchRequest, messages.ProduceRequest
LONG_POLL_MS = 10_000


def fetch(port: int, replica_id: int, offset: int, leader_epoch: int = -1):
    """Fetch v12 of t-0 waiting up to LONG_POLL_MS for one byte: (seconds it took, the partition's answer)."""
    client = WireClient("127.0.0.1", port)
    try:
        body = FR(replica_id=replica_id, max_wait_ms=LONG_POLL_MS, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                  session_id=0, session_epoch=-1, topics=[FR.FetchTopic(topic="t", partitions=[
                      FR.FetchPartition(partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset,
                                        last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                  forgotten_topics_data=[], rack_id="")
        started = time.monotonic()
        data = client.call(1, 12, body).body.responses[0].partitions[0]
        return time.monotonic() - started, data
    finally:
        client.close()


def produce_acks_1(port: int, value: bytes) -> None:
    client = WireClient("127.0.0.1", port)
    try:
        batch = build_batch([Record(0, 1_000, None, value)])
        answer = client.call(0, 9, PR(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
            PR.TopicProduceData(name="t", partition_data=[PR.PartitionProduceData(index=0, records=batch)])])).body
        assert answer.responses[0].partition_responses[0].error_code == 0
    finally:
        client.close()


def test_a_waiting_follower_fetch_is_answered_when_the_leader_appends(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leader(tmp_path) as (_, server):
            follower = asyncio.ensure_future(asyncio.to_thread(fetch, server.port, FOLLOWER, 0))
            await asyncio.sleep(0.3)
            assert not follower.done(), "the follower's fetch waits for records"
            await asyncio.to_thread(produce_acks_1, server.port, b"new")
            took, data = await asyncio.wait_for(follower, 5)
            assert b"new" in bytes(data.records or b"") and took < LONG_POLL_MS / 2000

    asyncio.run(scenario())


def test_a_waiting_consumer_fetch_is_answered_when_the_follower_moves_the_high_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leader(tmp_path) as (broker, server):
            consumer = asyncio.ensure_future(asyncio.to_thread(fetch, server.port, -1, 0))
            await asyncio.to_thread(produce_acks_1, server.port, b"new")
            await asyncio.sleep(0.3)
            assert not consumer.done(), "the record is not readable before the ISR has it"
            partition = broker.replicas.get("t", 0)
            broker.replicas.record_follower_fetch(partition, FOLLOWER, 1, 0, 1)  # the follower copied it
            took, data = await asyncio.wait_for(consumer, 5)
            assert (data.high_watermark, b"new" in bytes(data.records or b"")) == (1, True)
            assert took < LONG_POLL_MS / 2000

    asyncio.run(scenario())


def test_a_waiting_fetch_of_the_old_leader_epoch_is_fenced_when_the_leader_epoch_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leader(tmp_path) as (broker, server):
            follower = asyncio.ensure_future(asyncio.to_thread(fetch, server.port, FOLLOWER, 0, 1))
            await asyncio.sleep(0.3)
            assert not follower.done(), "the follower's fetch waits for records"
            bump = PartitionState(LeaderAndIsr(LOCAL, 2, (LOCAL, FOLLOWER)), 1)
            broker.replicas.become_leader_or_follower(1, [LeaderAndIsrPartition("t", 0, bump, (LOCAL, FOLLOWER))],
                                                      lambda name, index: broker.logs.create(name, index))
            took, data = await asyncio.wait_for(follower, 5)
            assert data.error_code == ErrorCode.FENCED_LEADER_EPOCH and took < LONG_POLL_MS / 2000

    asyncio.run(scenario())

