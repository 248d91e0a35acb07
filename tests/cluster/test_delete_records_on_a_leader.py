"""DeleteRecords on a cluster partition's leader, as Kafka's DelayedDeleteRecords answers it: once every replica
on a live broker starts at the offset, REQUEST_TIMED_OUT (with the leader's low watermark) when one does not in
time, and a dead broker's replica not waited for. The broker is driven in-process as LeaderAndIsr and follower
fetches drive it; test_kbroker_cluster.py runs DeleteRecords across three real brokers."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from kbroker.apis.delete_records import delete_records
from kbroker.broker import Broker, Topic
from kbroker.cluster.member import ClusterMember
from kbroker.cluster.metadata_cache import MetadataUpdate, PartitionMetadata
from kbroker.cluster.model import BrokerRegistration, EndPoint, LeaderAndIsr, PartitionState
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from kbroker.config import build
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

LEADER, FOLLOWER = 1, 2
TOPIC = "trimmed"
DR = messages.DeleteRecordsRequest


def leader_of_trimmed(tmp_path: Path, follower_alive: bool) -> Broker:
    """Broker 1 leads TOPIC-0 with broker 2 in the ISR; ten records, all replicated (the HW is 10)."""
    config = build({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                    "zookeeper.connect": "127.0.0.1:1/never-connected", "broker.id": str(LEADER)})
    broker = Broker(config)
    member = ClusterMember(config)
    member.broker, broker.cluster = broker, member
    alive = tuple(BrokerRegistration(b, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + b, "PLAINTEXT"),), None)
                  for b in ((LEADER, FOLLOWER) if follower_alive else (LEADER,)))
    member.metadata.update(MetadataUpdate(LEADER, 1, alive, (PartitionMetadata(
        TOPIC, 0, LEADER, 1, (LEADER, FOLLOWER), (LEADER, FOLLOWER)),), {TOPIC: uuid.uuid4()}))
    topic = Topic(TOPIC, member.metadata.topic_id(TOPIC), 1, {})
    broker.topics[TOPIC], broker.topics_by_id[topic.topic_id] = topic, topic
    broker.logs.create(TOPIC, 0, broker.log_config_for(topic))  # as LeaderAndIsr's log opener makes it
    state = PartitionState(LeaderAndIsr(LEADER, 1, (LEADER, FOLLOWER)), 1)
    broker.replicas.become_leader_or_follower(1, [LeaderAndIsrPartition(TOPIC, 0, state, (LEADER, FOLLOWER))],
                                              lambda name, index: broker.partition_log(name, index))
    partition = broker.replicas.get(TOPIC, 0)
    now = int(time.time() * 1000)
    partition.append_as_leader(build_batch([Record(i, now, None, b"v", ()) for i in range(10)]), now, 1)
    follower_fetched(broker, log_start=0)
    assert partition.high_watermark == 10
    return broker


def follower_fetched(broker: Broker, log_start: int) -> None:
    partition = broker.replicas.get(TOPIC, 0)
    end = partition.log.log_end_offset
    broker.replicas.record_follower_fetch(partition, FOLLOWER, end, log_start, end)


async def delete_before(broker: Broker, offset: int, timeout_ms: int) -> tuple[int, int]:
    """(error, low watermark) of DeleteRecords v2 for TOPIC-0."""
    header = messages.RequestHeader(request_api_key=21, request_api_version=2, correlation_id=1, client_id="t")
    response = await delete_records(broker, header, DR(timeout_ms=timeout_ms, topics=[
        DR.DeleteRecordsTopic(name=TOPIC, partitions=[DR.DeleteRecordsPartition(partition_index=0, offset=offset)])]))
    result = response.topics[0].partitions[0]
    return result.error_code, result.low_watermark


def test_delete_records_is_answered_once_the_follower_starts_at_the_offset_too(tmp_path: Path) -> None:
    broker = leader_of_trimmed(tmp_path, follower_alive=True)
    try:
        async def scenario() -> tuple[bool, tuple[int, int]]:
            answer = asyncio.ensure_future(delete_before(broker, 6, 10_000))
            await asyncio.sleep(0.2)
            waited = not answer.done()
            follower_fetched(broker, log_start=6)
            return waited, await answer

        assert asyncio.run(scenario()) == (True, (ErrorCode.NONE, 6))
    finally:
        broker.close()


def test_delete_records_a_live_follower_does_not_follow_in_time_is_request_timed_out_with_the_leaders_start(
        tmp_path: Path) -> None:
    broker = leader_of_trimmed(tmp_path, follower_alive=True)
    try:
        assert asyncio.run(delete_before(broker, 6, 200)) == (ErrorCode.REQUEST_TIMED_OUT, 6)
        assert broker.partition_log(TOPIC, 0).log_start_offset == 6  # the leader deleted them all the same
    finally:
        broker.close()


def test_delete_records_does_not_wait_for_a_replica_on_a_dead_broker(tmp_path: Path) -> None:
    broker = leader_of_trimmed(tmp_path, follower_alive=False)
    try:
        assert asyncio.run(delete_before(broker, 6, 10_000)) == (ErrorCode.NONE, 6)
    finally:
        broker.close()


def test_delete_records_on_a_follower_is_not_leader_or_follower(tmp_path: Path) -> None:
    broker = leader_of_trimmed(tmp_path, follower_alive=True)
    try:
        state = PartitionState(LeaderAndIsr(FOLLOWER, 2, (LEADER, FOLLOWER)), 1)
        broker.replicas.become_leader_or_follower(1, [LeaderAndIsrPartition(TOPIC, 0, state, (LEADER, FOLLOWER))],
                                                  lambda name, index: broker.partition_log(name, index))
        assert asyncio.run(delete_before(broker, 6, 1000)) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    finally:
        broker.close()
