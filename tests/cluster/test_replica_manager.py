"""kbroker.cluster.replica_manager: hosting, LeaderAndIsr / StopReplica fencing, the acks=all purgatory.

Replica managers for brokers 1, 2 and 3 each hold real logs in a temporary dir; a follower's fetch is
a read with its replica id followed by `record_follower_fetch` at its next fetch offset, as the Fetch
API does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kbroker.cluster.model import LeaderAndIsr, PartitionState
from kbroker.cluster.partition import Partition, Role
from kbroker.cluster.replica_manager import LeaderAndIsrPartition, ReplicaManager
from kbroker.log.partition_log import PartitionLog
from wire.errors import ErrorCode
from wire.records import Record, build_batch

TOPIC = "events"
KEY = (TOPIC, 0)


def batch(count: int = 1) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([Record(i, now, None, b"v") for i in range(count)])


class Node:
    """One broker's replica manager and its log dir."""

    def __init__(self, root: Path, broker_id: int, min_isr: int = 1) -> None:
        self.dir = root / f"broker-{broker_id}"
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.woken: list[tuple[str, int]] = []
        self.manager = ReplicaManager(broker_id, min_insync_replicas=lambda topic: min_isr)
        self.manager.on_high_watermark = lambda topic, index: self.woken.append((topic, index))

    def log_for(self, topic: str, index: int) -> PartitionLog:
        if (topic, index) not in self.logs:
            self.logs[(topic, index)] = PartitionLog(self.dir / f"{topic}-{index}")
        return self.logs[(topic, index)]

    def apply(self, leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3),
              controller_epoch: int = 1):
        state = PartitionState(LeaderAndIsr(leader, epoch, isr), controller_epoch)
        return self.manager.become_leader_or_follower(
            controller_epoch, [LeaderAndIsrPartition(TOPIC, 0, state, replicas)], self.log_for)

    @property
    def partition(self) -> Partition:
        return self.manager.get(*KEY)


def fetch(leader: Node, follower: Node) -> None:
    log = follower.logs[KEY]
    partition = leader.partition
    data = partition.read(log.log_end_offset, 1 << 20, replica_id=follower.manager.local_broker_id)
    leader.manager.record_follower_fetch(partition, follower.manager.local_broker_id, log.log_end_offset,
                                         log.log_start_offset, data.log_end_offset)
    if data.records is not None:
        log.append(data.records.read_bytes(), coordinator=True)


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[Node, Node, Node]:
    """Broker 1 leads events-0 at epoch 1, ISR [1, 2, 3]; 2 and 3 follow."""
    nodes = (Node(tmp_path, 1), Node(tmp_path, 2), Node(tmp_path, 3))
    for node in nodes:
        node.apply(1, 1, (1, 2, 3))
    return nodes


def test_a_single_node_hosts_each_partition_as_sole_leader_at_epoch_zero(tmp_path: Path) -> None:
    manager = ReplicaManager(7)
    partition = manager.host_sole_replica(TOPIC, 0, PartitionLog(tmp_path / "events-0"))
    assert (partition.role, partition.leader_epoch, partition.replicas, partition.isr) == (
        Role.LEADER, 0, (7,), {7})


def test_a_single_node_acks_all_produce_is_answered_at_once(tmp_path: Path) -> None:
    manager = ReplicaManager(7, min_insync_replicas=lambda topic: 2)
    partition = manager.host_sole_replica(TOPIC, 0, PartitionLog(tmp_path / "events-0"))
    info = partition.append_as_leader(batch(), 0, -1)
    errors = asyncio.run(manager.wait_for_acks({KEY: info.last_offset + 1}, 0))
    assert errors == {KEY: ErrorCode.NONE}


def test_acks_all_waits_until_the_followers_fetch_past_the_batch(cluster) -> None:
    leader, second, third = cluster
    info = leader.partition.append_as_leader(batch(2), 0, -1)

    async def produce_while_followers_fetch() -> dict:
        waiting = asyncio.ensure_future(leader.manager.wait_for_acks({KEY: info.last_offset + 1}, 10_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        for _ in range(2):
            fetch(leader, second)
            fetch(leader, third)
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(produce_while_followers_fetch()) == {KEY: ErrorCode.NONE}


def test_acks_all_not_replicated_within_the_timeout_is_request_timed_out(cluster) -> None:
    leader, _, _ = cluster
    info = leader.partition.append_as_leader(batch(), 0, -1)
    errors = asyncio.run(leader.manager.wait_for_acks({KEY: info.last_offset + 1}, 50))
    assert errors == {KEY: ErrorCode.REQUEST_TIMED_OUT}
    assert leader.manager.purgatory.watched(KEY) == 0


def test_acks_all_waiting_when_leadership_moves_is_not_leader_or_follower(cluster) -> None:
    leader, _, _ = cluster
    info = leader.partition.append_as_leader(batch(), 0, -1)

    async def produce_while_leadership_moves() -> dict:
        waiting = asyncio.ensure_future(leader.manager.wait_for_acks({KEY: info.last_offset + 1}, 10_000))
        await asyncio.sleep(0)
        leader.apply(2, 2, (2, 3))
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(produce_while_leadership_moves()) == {KEY: ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_a_follower_fetch_that_moves_the_high_watermark_wakes_its_waiters(cluster) -> None:
    leader, second, third = cluster
    leader.partition.append_as_leader(batch(), 0, 1)
    leader.woken.clear()
    for _ in range(2):
        fetch(leader, second)
        fetch(leader, third)
    assert leader.partition.high_watermark == 1 and leader.woken == [KEY]


def test_a_leader_and_isr_from_an_older_controller_epoch_is_refused_whole(cluster) -> None:
    leader, _, _ = cluster
    leader.apply(1, 2, (1, 2, 3), controller_epoch=5)
    changes = leader.apply(2, 3, (2, 3), controller_epoch=4)
    assert (changes.error, changes.partition_errors) == (ErrorCode.STALE_CONTROLLER_EPOCH, {})
    assert leader.partition.is_leader


def test_a_leader_and_isr_at_a_stale_leader_epoch_is_stale_controller_epoch(cluster) -> None:
    leader, _, _ = cluster
    changes = leader.apply(2, 1, (2, 3))
    assert changes.partition_errors == {KEY: ErrorCode.STALE_CONTROLLER_EPOCH}
    assert leader.partition.is_leader


def test_a_leader_and_isr_for_a_partition_not_assigned_here_is_unknown_topic_or_partition(tmp_path: Path) -> None:
    outsider = Node(tmp_path, 4)
    changes = outsider.apply(1, 1, (1, 2, 3))
    assert changes.partition_errors == {KEY: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_leader_and_isr_reports_who_became_leader_and_follower(cluster) -> None:
    leader, second, _ = cluster
    assert [p.role for p in leader.apply(2, 2, (2, 3)).became_follower] == [Role.FOLLOWER]
    assert [p.role for p in second.apply(2, 2, (2, 3)).became_leader] == [Role.LEADER]


def test_a_partition_not_hosted_answers_the_unhosted_error(tmp_path: Path) -> None:
    manager = ReplicaManager(1, unhosted_error=lambda topic, index: ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert manager.lookup(TOPIC, 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ReplicaManager(1).lookup(TOPIC, 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_stop_replica_at_an_older_leader_epoch_is_fenced_and_keeps_the_partition(cluster) -> None:
    leader, _, _ = cluster
    error, errors = leader.manager.stop_replicas(1, {KEY: 0}, delete=True)
    assert (error, errors) == (ErrorCode.NONE, {KEY: ErrorCode.FENCED_LEADER_EPOCH})
    assert leader.partition is not None


def test_stop_replica_with_delete_stops_hosting_the_partition(cluster) -> None:
    leader, _, _ = cluster
    assert leader.manager.stop_replicas(1, {KEY: -2}, delete=True) == (ErrorCode.NONE, {KEY: ErrorCode.NONE})
    assert leader.partition is None


def test_lagging_followers_are_proposed_out_of_the_isr_through_the_hook(tmp_path: Path) -> None:
    now = [1_000_000]
    manager = ReplicaManager(1, clock=lambda: now[0])
    proposals = []
    manager.propose_isr = lambda partition, proposed: proposals.append(proposed.isr)
    node_log = PartitionLog(tmp_path / "events-0")
    state = PartitionState(LeaderAndIsr(1, 1, (1, 2)), 1)
    manager.become_leader_or_follower(1, [LeaderAndIsrPartition(TOPIC, 0, state, (1, 2))], lambda t, p: node_log)
    now[0] += 30_001
    manager.maybe_shrink_isrs()
    assert proposals == [(1,)]
