"""acks=all produces of one connection share the wait for their ISR: while the first waits, the next ones are
appended (in arrival order), and the answers still leave in request order, any other request after them. The
broker is a cluster member leading topic "t" with a follower that fetches only when the test says so; the client
is a raw socket speaking Kafka's framing."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from kbroker.broker import Broker, Topic
from kbroker.cluster.member import ClusterMember
from kbroker.cluster.model import LeaderAndIsr, PartitionState
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from kbroker.config import build
from kbroker.net.server import Server
from wire import headers, messages
from wire.records import Record, build_batch

LOCAL, FOLLOWER = 1, 2
PR = messages.ProduceRequest


@contextlib.asynccontextmanager
async def leader(tmp_path: Path, **settings: str) -> AsyncIterator[tuple[Broker, Server]]:
    """A cluster broker leading "t"-0 with FOLLOWER in the ISR, serving on a loopback port; `settings` are broker
    properties over the defaults."""
    config = build({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                    "zookeeper.connect": "127.0.0.1:1/never-connected", "broker.id": str(LOCAL), **settings})
    broker = Broker(config)
    member = ClusterMember(config)
    member.broker, broker.cluster = broker, member
    topic = Topic("t", uuid.uuid4(), 1, {})
    broker.topics["t"], broker.topics_by_id[topic.topic_id] = topic, topic
    state = PartitionState(LeaderAndIsr(LOCAL, 1, (LOCAL, FOLLOWER)), 1)
    broker.replicas.become_leader_or_follower(1, [LeaderAndIsrPartition("t", 0, state, (LOCAL, FOLLOWER))],
                                              lambda name, index: broker.logs.create(name, index,
                                                                                     broker.log_config_for(topic)))
    server = Server(broker, "127.0.0.1", 0)
    await server.start()
    try:
        yield broker, server
    finally:
        await server.stop()
        broker.close()


def frame(api_key: int, version: int, correlation_id: int, body) -> bytes:
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                    correlation_id=correlation_id, client_id="pipelining")
    out = headers.encode_request_header(header)
    messages.encode(body, version, out)
    return struct.pack(">i", len(out)) + bytes(out)


def produce(correlation_id: int, value: bytes) -> bytes:
    batch = build_batch([Record(0, 1_000, None, value)])
    return frame(0, 9, correlation_id, PR(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        PR.TopicProduceData(name="t", partition_data=[PR.PartitionProduceData(index=0, records=batch)])]))


async def correlation_ids(reader: asyncio.StreamReader, count: int) -> list[int]:
    found = []
    for _ in range(count):
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        body = await reader.readexactly(size)
        found.append(struct.unpack(">i", body[:4])[0])
    return found


def test_acks_all_produces_on_one_connection_are_appended_while_the_first_waits_and_answered_in_order(
        tmp_path: Path) -> None:
    asyncio.run(pipelined(tmp_path))


async def pipelined(tmp_path: Path) -> None:
    async with leader(tmp_path) as (broker, server):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(produce(1, b"first") + produce(2, b"second")
                         + frame(18, 3, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                       client_software_version="1")))
            await writer.drain()
            partition = broker.replicas.get("t", 0)
            for _ in range(100):
                if partition.log.log_end_offset == 2:
                    break
                await asyncio.sleep(0.01)
            assert partition.log.log_end_offset == 2, "the second produce was appended while the first waited"
            assert partition.log.high_watermark == 0
            answers = asyncio.ensure_future(correlation_ids(reader, 3))
            await asyncio.sleep(0.1)
            assert not answers.done(), "nothing is answered before the ISR has the records"
            broker.replicas.record_follower_fetch(partition, FOLLOWER, 2, 0, 2)  # the follower caught up
            assert await answers == [1, 2, 3]
        finally:
            writer.close()
