"""The group coordinator of a cluster broker: it serves only the groups of the `__consumer_offsets` partitions it
leads, loads them from the log when it becomes their leader, lets them go when it stops, and answers a commit only
once the ISR has it. The broker is driven as the LeaderAndIsr handler drives it, without ZooKeeper; the whole
cluster with stock clients is tests/cluster/test_kbroker_cluster.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kbroker.apis import groups as groups_api
from kbroker.apis import offsets as api
from kbroker.broker import Broker, Topic
from kbroker.cluster.member import ClusterMember
from kbroker.cluster.metadata_cache import MetadataUpdate, PartitionMetadata
from kbroker.cluster.model import LeaderAndIsr, PartitionState
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from kbroker.config import build
from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from wire import messages
from wire.errors import ErrorCode

PARTITIONS = 3
LOCAL, FOLLOWER = 1, 2
GROUP = "readers"
OC, OF = messages.OffsetCommitRequest, messages.OffsetFetchRequest
T = TypeVar("T")
M = TypeVar("M")


def cluster_broker(tmp_path: Path, **extra: str) -> Broker:
    """A cluster-mode broker whose member never reaches ZooKeeper. Topic "t" is hosted by another broker: this one
    knows it only from UpdateMetadata, as a coordinator knows most of the topics its groups commit to."""
    config = build({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                    "zookeeper.connect": "127.0.0.1:1/never-connected", "broker.id": str(LOCAL),
                    "offsets.topic.num.partitions": str(PARTITIONS), "group.initial.rebalance.delay.ms": "0", **extra})
    broker = Broker(config)
    member = ClusterMember(config)
    member.broker, broker.cluster = broker, member
    elsewhere = tuple(PartitionMetadata("t", index, FOLLOWER, 0, (FOLLOWER,), (FOLLOWER,)) for index in range(2))
    member.metadata.update(MetadataUpdate(FOLLOWER, 1, (), elsewhere, {"t": uuid.uuid4()}))
    offsets = Topic(OFFSETS_TOPIC, uuid.uuid4(), PARTITIONS, {})
    broker.topics[OFFSETS_TOPIC], broker.topics_by_id[offsets.topic_id] = offsets, offsets
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = cluster_broker(tmp_path)
    yield b
    b.close()


def leadership(broker: Broker, leader: int, epoch: int, replicas: tuple[int, ...] = (LOCAL,),
               isr: tuple[int, ...] | None = None) -> None:
    """A LeaderAndIsr for the group's offsets partition, applied to the replicas and to the coordinator."""
    partition = partition_for(GROUP, PARTITIONS)
    topic = broker.topics[OFFSETS_TOPIC]

    def log_for(name: str, index: int):
        return broker.logs.get(name, index) or broker.logs.create(name, index, broker.log_config_for(topic))

    state = PartitionState(LeaderAndIsr(leader, epoch, isr or replicas), 1)
    changes = broker.replicas.become_leader_or_follower(1, [LeaderAndIsrPartition(OFFSETS_TOPIC, partition, state,
                                                                                  replicas)], log_for)
    for led in changes.became_leader:
        broker.coordinator.load_partition(led.index, PARTITIONS)
    for followed in changes.became_follower:
        broker.coordinator.unload_partition(followed.index)


async def commit(broker: Broker, offset: int, partition: int = 0) -> int:
    """The error OffsetCommit (v8) answers for that partition of "t"."""
    request = OC(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[OC.OffsetCommitRequestTopic(
        name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)])])
    header = messages.RequestHeader(request_api_key=8, request_api_version=8, correlation_id=1, client_id="t")
    response = await api.offset_commit(broker, header, request)
    return response.topics[0].partitions[0].error_code


async def fetch(broker: Broker) -> tuple[int, int]:
    """(group error, committed offset of partition 0 of "t") from OffsetFetch v8."""
    request = OF(groups=[OF.OffsetFetchRequestGroup(group_id=GROUP, topics=[
        OF.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])], require_stable=False)
    header = messages.RequestHeader(request_api_key=9, request_api_version=8, correlation_id=1, client_id="t")
    (group,) = (await api.offset_fetch(broker, header, request)).groups
    offset = group.topics[0].partitions[0].committed_offset if group.topics else -1
    return group.error_code, offset


def offsets_partition(broker: Broker):
    return broker.replicas.get(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS))


def follower_caught_up(broker: Broker) -> None:
    """The follower fetches from the leader's log end: the high watermark reaches it."""
    partition = offsets_partition(broker)
    end = partition.log.log_end_offset
    broker.replicas.record_follower_fetch(partition, FOLLOWER, end, 0, end)


async def answered_once_caught_up(broker: Broker, request: Awaitable[T], wait_s: float,
                                  meanwhile: Callable[[], Awaitable[M]] | None = None) -> tuple[bool, M | None, T]:
    """The request waits `wait_s` for the ISR (`meanwhile` runs then), the follower catches up, the answer arrives:
    (whether it was still waiting, what `meanwhile` saw, the answer)."""
    answer = asyncio.ensure_future(request)
    await asyncio.sleep(wait_s)
    waited = not answer.done()
    seen = None if meanwhile is None else await meanwhile()
    follower_caught_up(broker)
    return waited, seen, await answer


def test_a_cluster_broker_is_not_the_coordinator_of_a_group_whose_partition_it_does_not_lead(broker: Broker) -> None:
    assert asyncio.run(commit(broker, 5)) == ErrorCode.NOT_COORDINATOR
    leadership(broker, FOLLOWER, 1, (FOLLOWER, LOCAL))
    assert asyncio.run(commit(broker, 5)) == ErrorCode.NOT_COORDINATOR
    assert asyncio.run(fetch(broker))[0] == ErrorCode.NOT_COORDINATOR


def test_a_broker_that_stops_leading_the_partition_forgets_its_groups(broker: Broker) -> None:
    leadership(broker, LOCAL, 1)
    assert asyncio.run(commit(broker, 5)) == ErrorCode.NONE
    leadership(broker, FOLLOWER, 2, (FOLLOWER, LOCAL))
    assert asyncio.run(fetch(broker))[0] == ErrorCode.NOT_COORDINATOR
    assert broker.coordinator.offsets.offsets == {}


def test_a_broker_that_becomes_the_leader_again_reads_the_groups_offsets_from_the_log(broker: Broker) -> None:
    leadership(broker, LOCAL, 1)
    assert asyncio.run(commit(broker, 5)) == ErrorCode.NONE
    leadership(broker, FOLLOWER, 2, (FOLLOWER, LOCAL))
    leadership(broker, LOCAL, 3, (FOLLOWER, LOCAL), isr=(LOCAL,))
    assert asyncio.run(fetch(broker)) == (ErrorCode.NONE, 5)


def test_a_commit_is_answered_only_once_the_follower_in_the_isr_has_it(broker: Broker) -> None:
    leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))

    async def scenario() -> tuple[bool, int]:
        waited, _, answer = await answered_once_caught_up(broker, commit(broker, 7), 0.3)
        return waited, answer

    assert asyncio.run(scenario()) == (True, ErrorCode.NONE)
    assert asyncio.run(fetch(broker)) == (ErrorCode.NONE, 7)


def test_a_commit_waiting_for_the_isr_is_not_yet_what_offset_fetch_answers(broker: Broker) -> None:
    leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))

    async def scenario() -> tuple[int, int] | None:
        _, meanwhile, _ = await answered_once_caught_up(broker, commit(broker, 7), 0.2, lambda: fetch(broker))
        return meanwhile

    assert asyncio.run(scenario()) == (ErrorCode.NONE, -1)


def test_a_commit_to_a_partition_that_does_not_exist_in_the_cluster_is_unknown_topic_or_partition(
        broker: Broker) -> None:
    leadership(broker, LOCAL, 1)
    assert asyncio.run(commit(broker, 7, partition=2)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_commit_the_isr_does_not_get_in_time_is_request_timed_out_and_not_kept(tmp_path: Path) -> None:
    broker = cluster_broker(tmp_path, **{"offsets.commit.timeout.ms": "200"})
    try:
        leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))
        assert asyncio.run(commit(broker, 7)) == ErrorCode.REQUEST_TIMED_OUT  # passed on, as Kafka's storeOffsets
        assert asyncio.run(fetch(broker)) == (ErrorCode.NONE, -1)
    finally:
        broker.close()


def test_a_commit_with_fewer_in_sync_replicas_than_min_insync_replicas_is_coordinator_not_available(
        tmp_path: Path) -> None:
    broker = cluster_broker(tmp_path, **{"min.insync.replicas": "2"})
    try:
        leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER), isr=(LOCAL,))
        assert asyncio.run(commit(broker, 7)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert asyncio.run(fetch(broker)) == (ErrorCode.NONE, -1)
    finally:
        broker.close()


JG, SG = messages.JoinGroupRequest, messages.SyncGroupRequest


async def join_then_sync(broker: Broker) -> asyncio.Future:
    """A one-member classic group: JoinGroup (v3, so no second join for a member id), then the leader's SyncGroup
    running; its answer (error, assignment) is the future's."""
    header = messages.RequestHeader(request_api_key=11, request_api_version=3, correlation_id=1, client_id="t")
    joined = await groups_api.join_group(broker, header, JG(
        group_id=GROUP, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
        protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"m")]))
    assert joined.error_code == ErrorCode.NONE
    header = messages.RequestHeader(request_api_key=14, request_api_version=3, correlation_id=2, client_id="t")
    sync = SG(group_id=GROUP, generation_id=joined.generation_id, member_id=joined.member_id, assignments=[
        SG.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"all of it")])

    async def answer() -> tuple[int, bytes]:
        synced = await groups_api.sync_group(broker, header, sync)
        return synced.error_code, bytes(synced.assignment)
    return asyncio.ensure_future(answer())


def test_the_leaders_sync_group_is_answered_only_once_the_isr_has_the_groups_assignment(broker: Broker) -> None:
    leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))

    async def scenario() -> tuple[bool, tuple[int, bytes]]:
        waited, _, answer = await answered_once_caught_up(broker, await join_then_sync(broker), 0.3)
        return waited, answer

    assert asyncio.run(scenario()) == (True, (ErrorCode.NONE, b"all of it"))


def test_a_sync_group_whose_assignment_the_isr_does_not_get_in_time_is_rebalance_in_progress(tmp_path: Path) -> None:
    broker = cluster_broker(tmp_path, **{"offsets.commit.timeout.ms": "200"})
    try:
        leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))

        async def scenario() -> tuple[int, bytes]:
            return await (await join_then_sync(broker))

        assert asyncio.run(scenario()) == (ErrorCode.REBALANCE_IN_PROGRESS, b"")
    finally:
        broker.close()


def test_of_two_commits_waiting_for_the_isr_the_newer_one_is_what_offset_fetch_answers(broker: Broker) -> None:
    leadership(broker, LOCAL, 1, (LOCAL, FOLLOWER))

    async def scenario() -> tuple[list[int], tuple[int, int]]:
        older = asyncio.ensure_future(commit(broker, 5))
        await asyncio.sleep(0.05)
        _, _, newer = await answered_once_caught_up(broker, commit(broker, 7), 0.05)
        answers = [newer, await older]
        return answers, await fetch(broker)

    assert asyncio.run(scenario()) == ([ErrorCode.NONE, ErrorCode.NONE], (ErrorCode.NONE, 7))
