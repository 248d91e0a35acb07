"""Replica fetchers against a real leader: an in-process kbroker on a real socket, told by LeaderAndIsr (through its
replica manager) that broker 5 follows its partition. The follower side is this module's own log, Partition and
ReplicaFetcherManager on the test's event loop. (test_broker_with_kafka_controller.py runs the same code against a
Kafka 3.9 leader.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kbroker.cluster.fetcher import FetcherSettings, ReplicaFetcherManager, fetcher_id, java_string_hash
from kbroker.cluster.model import EndPoint, LeaderAndIsr, PartitionState
from kbroker.cluster.partition import Partition
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from kbroker.log.partition_log import PartitionLog
from kbroker.testing import running_broker
from wire.records import Record, build_batch

TOPIC, FOLLOWER = "f", 5


def batch(values: list[bytes], base_offset: int = 0, epoch: int = -1) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(base_offset + i, now, None, v) for i, v in enumerate(values)], base_offset=base_offset,
                       partition_leader_epoch=epoch)


class Leader:
    """The in-process kbroker, with helpers that run on its loop."""

    def __init__(self, thread) -> None:
        self.thread = thread
        self.broker = thread.broker

    def run(self, function):
        async def call():
            return function()
        return self.thread._call(call())

    def lead(self, epoch: int) -> None:
        """LeaderAndIsr: broker 0 leads at `epoch`, with FOLLOWER as a replica in the ISR."""
        state = PartitionState(LeaderAndIsr(0, epoch, (0, FOLLOWER), partition_epoch=epoch), epoch)
        item = LeaderAndIsrPartition(TOPIC, 0, state, (0, FOLLOWER))
        changes = self.run(lambda: self.broker.replicas.become_leader_or_follower(
            epoch, [item], lambda t, p: self.broker.partition_log(t, p)))
        assert not any(changes.partition_errors.values()), changes

    def append(self, values: list[bytes]) -> None:
        def write():
            partition = self.broker.replicas.get(TOPIC, 0)
            return partition.append_as_leader(batch(values), int(time.time() * 1000), 1)
        self.run(write)

    @property
    def log(self) -> PartitionLog:
        return self.broker.partition_log(TOPIC, 0)


@pytest.fixture
def leader(tmp_path: Path):
    with running_broker(tmp_path / "leader") as thread:
        thread._call(_create(thread.broker))
        yield Leader(thread)


async def _create(broker) -> None:
    broker.create_topic(TOPIC, 1)


def follower_partition(tmp_path: Path, epoch: int) -> Partition:
    log = PartitionLog(tmp_path / "follower" / f"{TOPIC}-0")
    partition = Partition(TOPIC, 0, log, FOLLOWER)
    partition.make_follower(LeaderAndIsr(0, epoch, (0, FOLLOWER), partition_epoch=epoch), (0, FOLLOWER), epoch)
    return partition


async def replicate_until(leader: Leader, partition: Partition, done, timeout: float = 20) -> None:
    settings = FetcherSettings(FOLLOWER, max_wait_ms=100, backoff_ms=100)
    manager = ReplicaFetcherManager(settings, lambda: 1)
    host, port = leader.thread.bootstrap_servers.split(":")
    topic_id = leader.broker.topics[TOPIC].topic_id
    manager.add_partitions([(partition, topic_id, EndPoint("PLAINTEXT", host, int(port), "PLAINTEXT"))])
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the follower did not catch up"
            await asyncio.sleep(0.05)
    finally:
        await manager.stop()


def records(log: PartitionLog) -> list[tuple[int, int]]:
    """(offset, batch leader epoch) of every batch in the log."""
    from wire.records import read_batch_header

    found, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset)
        raw = bytes(data) if data is not None else b""
        position = 0
        while position < len(raw):
            header = read_batch_header(raw, position)
            found.append((header.base_offset, header.partition_leader_epoch))
            position += header.size
            offset = header.base_offset + header.last_offset_delta + 1
    return found


def test_fetcher_id_is_kafkas_hash_of_topic_and_partition() -> None:
    assert java_string_hash("hello") == 99_162_322  # Java's "hello".hashCode()
    assert java_string_hash("polygenelubricants") == -(2 ** 31)  # the famous Integer.MIN_VALUE hash
    assert fetcher_id("rf2", 1, 3) == (31 * java_string_hash("rf2") + 1) % 3
    assert fetcher_id("polygenelubricants", 0, 7) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0, not negative
    assert java_string_hash("topic-with-a-negative-hash-code") == -551_949_271
    # 31 * -551949271 overflows a Java int to 69441783; % 5 is 3
    assert fetcher_id("topic-with-a-negative-hash-code", 0, 5) == 3
    assert fetcher_id("topic-with-a-negative-hash-code", 2, 5) == 0
    # "orders": 31 * -1008770331 overflows to -1207109189, whose Utils.abs % 7 is 6 (a mask would give 3)
    assert fetcher_id("orders", 0, 7) == 6


def test_follower_copies_the_leaders_batches_with_offsets_and_epochs(leader: Leader, tmp_path: Path) -> None:
    leader.lead(epoch=1)
    leader.append([b"a", b"b"])
    leader.append([b"c"])
    partition = follower_partition(tmp_path, epoch=1)
    asyncio.run(replicate_until(leader, partition, lambda: partition.log.log_end_offset == 3
                                and partition.log.high_watermark == 3))
    assert records(partition.log) == records(leader.log) == [(0, 1), (2, 1)]


def test_follower_truncates_a_diverged_tail_then_copies_the_new_epoch(leader: Leader, tmp_path: Path) -> None:
    leader.lead(epoch=1)
    leader.append([b"a", b"b"])                      # offsets 0-1 at epoch 1
    partition = follower_partition(tmp_path, epoch=1)
    asyncio.run(replicate_until(leader, partition, lambda: partition.log.log_end_offset == 2))
    partition.log.append_as_follower(batch([b"x", b"y", b"z"], base_offset=2, epoch=1))  # a tail the leader lacks
    leader.lead(epoch=2)
    leader.append([b"c"])                            # offset 2 at epoch 2: epoch 1 ends at 2 on the leader
    partition.make_follower(LeaderAndIsr(0, 2, (0, FOLLOWER), partition_epoch=2), (0, FOLLOWER), 2)
    asyncio.run(replicate_until(leader, partition, lambda: records(partition.log) == [(0, 1), (2, 2)]))
    assert partition.log.log_end_offset == 3


def test_follower_high_watermark_is_the_leaders(leader: Leader, tmp_path: Path) -> None:
    leader.lead(epoch=1)
    leader.append([b"a"])
    partition = follower_partition(tmp_path, epoch=1)
    asyncio.run(replicate_until(leader, partition, lambda: partition.log.high_watermark == 1))
    assert leader.log.high_watermark == 1


def test_follower_log_start_follows_the_leaders_after_records_are_deleted(leader: Leader, tmp_path: Path) -> None:
    leader.lead(epoch=1)
    leader.append([b"a", b"b", b"c", b"d"])
    partition = follower_partition(tmp_path, epoch=1)
    asyncio.run(replicate_until(leader, partition, lambda: partition.log.high_watermark == 4))
    assert leader.run(lambda: leader.log.delete_records_before(3)) == 3
    leader.append([b"e"])
    asyncio.run(replicate_until(leader, partition, lambda: partition.log.log_start_offset == 3))
    assert partition.log.log_end_offset == 5
