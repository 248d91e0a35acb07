"""The proof that kbroker's znodes are Kafka's: a real Kafka 3.9 broker in ZooKeeper mode and kbroker's zk.py do
the same things on two chroots of one ZooKeeper, and the two znode trees must match (paths, which znodes are
ephemeral, znode versions, and the JSON, with timestamps, addresses and generated ids normalised).

Kafka's actions: start (top-level paths, cluster id, broker registration, controller election, /feature),
create a topic with a config override through the AdminClient (assignment, config, partition states), change
that topic's config (config znode and a change notification), and an idempotent produce (a producer id block).
The same Kafka also reports its broker config defaults, which the cluster properties must match.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kazoo.client import KazooClient

from kbroker.cluster.model import (
    BrokerRegistration,
    EndPoint,
    FinalizedFeatures,
    LeaderAndIsr,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
)
from kbroker.cluster.zk import ZkClient
from kbroker.config import PROPERTIES
from kbroker.dynamic_config import kafka_text

import kafka_process

TOPIC, PARTITIONS, BROKER_ID = "snap", 2, 1
CREATED_CONFIG = {"retention.ms": "12345"}
CHANGED_CONFIG = {**CREATED_CONFIG, "cleanup.policy": "compact"}
TIMEOUT = 60
# what legitimately differs between two brokers doing the same thing: times, addresses, generated ids
VOLATILE = {"timestamp", "host", "port", "endpoints", "topic_id", "id"}

CLUSTER_PROPERTIES = (
    "zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms", "broker.id",
    "broker.id.generation.enable", "reserved.broker.max.id", "broker.rack", "default.replication.factor",
    "min.insync.replicas", "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "unclean.leader.election.enable", "replica.lag.time.max.ms", "replica.fetch.min.bytes",
    "replica.fetch.max.bytes", "replica.fetch.wait.max.ms", "replica.fetch.backoff.ms",
    "replica.fetch.response.max.bytes", "num.replica.fetchers", "replica.socket.timeout.ms",
    "controlled.shutdown.enable", "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
    "auto.leader.rebalance.enable", "leader.imbalance.per.broker.percentage",
    "leader.imbalance.check.interval.seconds", "inter.broker.listener.name", "controller.socket.timeout.ms",
    "delete.topic.enable")

Znode = tuple[bool, int, object]  # (ephemeral, znode version, parsed data)


def snapshot(connect: str) -> dict[str, Znode]:
    """Every znode under the chroot of `connect`: ephemeral or not, its version, its data (JSON parsed when it
    is JSON), with the volatile fields replaced by a placeholder."""
    client = KazooClient(hosts=connect)
    client.start(timeout=30)
    tree: dict[str, Znode] = {}

    def walk(path: str) -> None:
        data, stat = client.get(path)
        tree[path] = (stat.ephemeralOwner != 0, stat.version, _normalised(data))
        for child in client.get_children(path):
            walk(f"{path.rstrip('/')}/{child}")

    try:
        walk("/")
    finally:
        client.stop()
        client.close()
    del tree["/"]
    return tree


def _normalised(data: bytes | None) -> object:
    if not data:
        return None  # Kafka writes structural znodes with no data
    try:
        body = json.loads(data)
    except ValueError:
        return data.decode(errors="replace")
    return {k: "<volatile>" if k in VOLATILE else v for k, v in body.items()} if isinstance(body, dict) else body


def wait_for(connect: str, paths: list[str]) -> None:
    client = KazooClient(hosts=connect)
    client.start(timeout=30)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not all(client.exists(p) and client.get(p)[0] for p in paths):
            assert time.monotonic() < deadline, f"Kafka did not write {paths}"
            time.sleep(0.2)
    finally:
        client.stop()
        client.close()


def kafka_defaults(bootstrap: str) -> dict[str, str | None]:
    """The broker configs a running Kafka 3.9 reports at their default, as it prints them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(BROKER_ID))
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return {name: entry.value for name, entry in entries.items() if entry.is_default}


def kafka_actions(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=CREATED_CONFIG)])
    futures[TOPIC].result(TIMEOUT)
    change = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([change]).values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(TOPIC, b"value", partition=0)
    assert producer.flush(TIMEOUT) == 0


def kbroker_actions(connect: str, topic_partitions: int) -> dict[str, Znode]:
    """What kbroker's cluster layer does for the same story, through zk.py alone; the tree it leaves."""
    with ZkClient(connect) as zk:
        zk.create_top_level_paths()
        zk.create_or_get_cluster_id("kbroker-cluster-id")
        zk.register_broker(BrokerRegistration(BROKER_ID, (EndPoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)))
        elected = zk.register_controller(BROKER_ID)
        zk.write_features(FinalizedFeatures(True))
        zk.create_topic(TopicAssignment(TOPIC, uuid.uuid4(), {p: ReplicaAssignment((BROKER_ID,))
                                                              for p in range(topic_partitions)}), CREATED_CONFIG)
        first = PartitionState(LeaderAndIsr(BROKER_ID, 0, (BROKER_ID,)), elected.epoch)
        zk.create_partition_states(TOPIC, dict.fromkeys(range(topic_partitions), first), elected.zk_version)
        zk.change_entity_config("topics", TOPIC, CHANGED_CONFIG)
        zk.allocate_producer_id_block(BROKER_ID)
        return snapshot(connect)  # while this session still holds the ephemeral znodes


@pytest.fixture(scope="module")
def trees(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Znode]]]:
    """{"kafka": tree, "kbroker": tree, "kafka_defaults": broker configs at their default}, from one Kafka 3.9
    start."""
    kafka_connect = f"{zookeeper_server.connect}/kafka-{uuid.uuid4().hex[:8]}"
    kafka = kafka_process.KafkaProcess(Path(tmp_path_factory.mktemp("kafka")), version="3.9",
                                       zookeeper=kafka_connect, node_id=BROKER_ID)
    try:
        with kafka.started():
            kafka_actions(kafka.bootstrap)
            wait_for(kafka_connect, ["/latest_producer_id_block", "/config/changes/config_change_0000000000",
                                     *(f"/brokers/topics/{TOPIC}/partitions/{p}/state" for p in range(PARTITIONS))])
            kafka_tree = snapshot(kafka_connect)
            defaults = kafka_defaults(kafka.bootstrap)
    except kafka_process.KafkaUnavailable as error:
        pytest.fail(f"cannot start Apache Kafka 3.9: {error}", pytrace=False)
    kbroker_tree = kbroker_actions(f"{zookeeper_server.connect}/kbroker-{uuid.uuid4().hex[:8]}", PARTITIONS)
    yield {"kafka": kafka_tree, "kbroker": kbroker_tree, "kafka_defaults": defaults}


def test_kbroker_writes_the_same_znode_paths_as_kafka(trees):
    assert sorted(trees["kbroker"]) == sorted(trees["kafka"])


def test_kbroker_makes_the_same_znodes_ephemeral_as_kafka(trees):
    ephemeral = {name: sorted(p for p, (is_ephemeral, _, _) in trees[name].items() if is_ephemeral)
                 for name in ("kafka", "kbroker")}
    assert ephemeral["kbroker"] == ephemeral["kafka"] == ["/brokers/ids/1", "/controller"]


def test_kbroker_writes_the_same_json_as_kafka(trees):
    kafka, kbroker = trees["kafka"], trees["kbroker"]
    assert {p: kbroker[p][2] for p in kafka if p in kbroker} == {p: z[2] for p, z in kafka.items() if p in kbroker}


def test_kbroker_leaves_each_znode_at_the_same_version_as_kafka(trees):
    kafka, kbroker = trees["kafka"], trees["kbroker"]
    assert {p: kbroker[p][1] for p in kafka if p in kbroker} == {p: z[1] for p, z in kafka.items() if p in kbroker}


def test_cluster_property_defaults_are_the_ones_kafka_3_9_reports(trees):
    """The cluster properties this issue adds, against a live Kafka 3.9 (those the test broker leaves at
    their default: it sets broker.id, zookeeper.connect, its session timeout and the internal topics' factors)."""
    names = [name for name in CLUSTER_PROPERTIES if name in trees["kafka_defaults"]]
    assert len(names) >= len(CLUSTER_PROPERTIES) - 5
    assert {n: kafka_text(PROPERTIES[n].default) for n in names} == {n: trees["kafka_defaults"][n] for n in names}
