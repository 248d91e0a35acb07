"""A broker's cluster start-up on a real ZooKeeper: cluster id, broker id, registration and its renewal after the
session expires (kbroker/cluster/member.py). The whole broker in cluster mode, against Kafka 3.9 as controller, is
test_broker_with_kafka_controller.py; here only the member, and the single node that must not change."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from kbroker import config as broker_config
from kbroker.apis.api_versions import supported_versions
from kbroker.broker import Broker, Topic
from kbroker.cluster.member import ClusterMember, endpoints_of
from kbroker.cluster.model import EndPoint
from kbroker.testing import running_broker
from wire.records import Record, build_batch

CONTROLLER_TO_BROKER = {4, 5, 6}


def member_config(zookeeper: str, tmp_path: Path, **extra: str) -> broker_config.BrokerConfig:
    return broker_config.build({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                "zookeeper.connect": zookeeper, "zookeeper.session.timeout.ms": "6000", **extra})


def znode(zookeeper: str, path: str) -> tuple[dict, object] | None:
    client = KazooClient(hosts=zookeeper)
    client.start(timeout=30)
    try:
        if not client.exists(path):
            return None
        data, stat = client.get(path)
        return json.loads(data), stat
    finally:
        client.stop()
        client.close()


def test_connect_writes_the_cluster_id_and_generates_a_broker_id_above_the_reserved_range(zookeeper: str,
                                                                                           tmp_path: Path) -> None:
    async def run() -> broker_config.BrokerConfig:
        member = ClusterMember(member_config(zookeeper, tmp_path))
        try:
            return await member.connect()
        finally:
            await member.stop()

    config = asyncio.run(run())
    assert config.broker_id > 1000  # reserved.broker.max.id + the /brokers/seqid version
    assert znode(zookeeper, "/cluster/id")[0]["id"] == config["cluster.id"]


def test_a_second_member_joins_the_cluster_id_already_there(zookeeper: str, tmp_path: Path) -> None:
    async def cluster_id(n: int) -> str:
        member = ClusterMember(member_config(zookeeper, tmp_path / str(n), **{"broker.id": str(n)}))
        try:
            return str((await member.connect())["cluster.id"])
        finally:
            await member.stop()

    assert asyncio.run(cluster_id(1)) == asyncio.run(cluster_id(2))


def test_register_writes_kafkas_registration_and_the_epoch_is_its_czxid(zookeeper: str, tmp_path: Path) -> None:
    config = member_config(zookeeper, tmp_path, **{"broker.id": "7", "broker.rack": "r1"})

    async def run() -> int:
        member = ClusterMember(config)
        try:
            await member.connect()
            await member.register(endpoints_of(config, {"PLAINTEXT": 9093}))
            registration, stat = znode(zookeeper, "/brokers/ids/7")
            assert registration["endpoints"] == ["PLAINTEXT://127.0.0.1:9093"]
            assert (registration["host"], registration["port"], registration["rack"]) == ("127.0.0.1", 9093, "r1")
            assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
            assert member.broker_epoch == stat.czxid
            return member.broker_epoch
        finally:
            await member.stop()

    asyncio.run(run())
    assert znode(zookeeper, "/brokers/ids/7") is None  # a clean stop closes the session: the registration goes


def test_registration_is_written_again_after_the_session_expires(zookeeper: str, tmp_path: Path) -> None:
    config = member_config(zookeeper, tmp_path, **{"broker.id": "8"})

    async def run() -> tuple[int, int]:
        member = ClusterMember(config)
        try:
            await member.connect()
            await member.register([EndPoint("PLAINTEXT", "127.0.0.1", 9094, "PLAINTEXT")])
            first = member.broker_epoch
            await asyncio.to_thread(_expire_session, zookeeper, member.zk.kazoo.client_id)
            deadline = time.monotonic() + 30
            while member.broker_epoch == first:
                assert time.monotonic() < deadline, "the member did not register again"
                await asyncio.sleep(0.1)
            _, stat = znode(zookeeper, "/brokers/ids/8")
            assert stat.czxid == member.broker_epoch
            return first, member.broker_epoch
        finally:
            await member.stop()

    first, second = asyncio.run(run())
    assert second > first


def _expire_session(zookeeper: str, client_id: tuple[int, bytes]) -> None:
    """ZooKeeper's documented way to expire a session from a test: open it elsewhere and close it."""
    other = KazooClient(hosts=zookeeper, client_id=client_id)
    other.start(timeout=30)
    other.stop()
    other.close()


def test_a_single_node_neither_advertises_nor_serves_the_controller_apis(tmp_path: Path) -> None:
    with running_broker(tmp_path / "single"):
        advertised = {v.api_key for v in supported_versions()}
    assert not advertised & CONTROLLER_TO_BROKER


def test_a_restarted_cluster_broker_keeps_its_high_watermark_and_leader_epochs_until_the_controller_speaks(
        tmp_path: Path) -> None:
    """Records above the high watermark may be truncated by the next leader: a restart must neither commit them
    (HW to the log end) nor rewrite the epochs they were written in, which the follower's truncation relies on."""
    config = member_config("127.0.0.1:1/never-connected", tmp_path)  # a Broker alone never talks to ZooKeeper
    first = Broker(config)
    topic = Topic("t", uuid.uuid4(), 1, {})
    first.topics["t"], first.topics_by_id[topic.topic_id] = topic, topic
    log = first.logs.create("t", 0, first.log_config_for(topic))
    assert first._is_log_of(log, topic)
    for epoch in (3, 5):
        log.append(build_batch([Record(i, 1_000, None, b"v", ()) for i in range(5)]), leader_epoch=epoch)
    log.update_high_watermark(5)
    first._save_topics()
    first.close()
    for _ in range(2):  # the second start reads what the first wrote
        again = Broker(config)
        try:
            assert list(again.replicas.partitions()) == []  # nothing led or followed before LeaderAndIsr
            log = again.logs.get("t", 0)
            assert (log.high_watermark, log.log_end_offset) == (5, 10)
            assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(3, 0), (5, 5)]
        finally:
            again.close()
