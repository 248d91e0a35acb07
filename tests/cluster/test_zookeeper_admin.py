"""What a cluster keeps in ZooKeeper for its operators. Requests written straight to the /admin znodes (what
kafka-reassign-partitions and kafka-preferred-replica-election did with --zookeeper, and what other tools still
write) are carried out by the controller and removed once done; dynamic broker configs set through any broker live
in /config/brokers and reach the brokers they concern through /config/changes. Each test runs on three
`kbroker serve` processes and on three Apache Kafka 3.9 brokers in ZooKeeper mode (the reference); znodes are
written and read with kazoo, configs changed and described with confluent-kafka's AdminClient."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_wire_peer import WireClient
from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_until
from workload import TIMEOUT, create_topic, leader_log, produce_all, replica_logs

from wire import messages
from wire.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-zookeeper-admin")]

BROKER_IDS = (1, 2, 3)
REASSIGN = "/admin/reassign_partitions"
PREFERRED = "/admin/preferred_replica_election"
MESSAGE_MAX_BYTES = "message.max.bytes"  # dynamic, cluster-wide (settable per broker too), default 1048588
CLEANER_BACKOFF_MS = "log.cleaner.backoff.ms"  # dynamic, cluster-wide, default 15000


@pytest.fixture(scope="module", params=sorted(KINDS))
def chroot(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KbrokerCluster,
                                                                                                 KazooClient]]:
    """The cluster (kbroker's, or Kafka 3.9's with the same settings) and a ZooKeeper session on its chroot."""
    import java_harness
    import kafka_process

    connect = f"{zookeeper_server.connect}/zookeeper-admin-{uuid.uuid4().hex[:8]}"
    overrides = {"zookeeper.session.timeout.ms": "6000", "controlled.shutdown.retry.backoff.ms": "500",
                 "auto.leader.rebalance.enable": "false"}  # leaderships move only when a test moves them
    try:
        with running_cluster(connect, tmp_path_factory.mktemp(request.param), BROKER_IDS, overrides,
                             request.param) as cluster:
            zk = KazooClient(hosts=connect)
            zk.start(timeout=30)
            try:
                yield cluster, zk
            finally:
                zk.stop()
                zk.close()
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")


def assigned_replicas(zk: KazooClient, topic: str) -> list[int]:
    return json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]["0"]


def test_a_reassignment_written_to_zookeeper_moves_the_partition_with_its_records_and_the_znode_goes(
        chroot: tuple[KbrokerCluster, KazooClient]) -> None:
    cluster, zk = chroot
    topic = f"zk-moving-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, assignment=[[1]])
    values = [f"{topic}-{i}" for i in range(20)]
    produce_all(cluster, topic, values)
    request = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 3]}]}
    zk.create(REASSIGN, json.dumps(request).encode())
    wait_until(lambda: zk.exists(REASSIGN) is None, f"the controller removed {REASSIGN}", timeout=TIMEOUT)
    assert assigned_replicas(zk, topic) == [2, 3]
    wait_until(lambda: cluster.in_sync(0, topic, (2, 3)), f"{topic} led and in sync on brokers 2 and 3")
    served = [value for _, value in leader_log(cluster, topic, 1)[0]]
    assert served == values
    assert {b: [v for _, v in logs[0]] for b, logs in replica_logs(cluster, topic, 1, (2, 3)).items()} == \
        {2: values, 3: values}


def test_a_preferred_election_written_to_zookeeper_gives_the_leadership_back_and_the_znode_goes(
        chroot: tuple[KbrokerCluster, KazooClient]) -> None:
    cluster, zk = chroot
    topic = f"zk-preferring-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, assignment=[[1, 2, 3]])
    assert cluster.agreed(0, topic)[0] == 1
    cluster.brokers[1].stop(signal.SIGTERM)  # a controlled shutdown moves the leadership away
    cluster.brokers[1].start()
    wait_until(lambda: cluster.in_sync(0, topic, BROKER_IDS), f"broker 1 back in the ISR of {topic}",
               timeout=TIMEOUT)
    assert cluster.agreed(0, topic)[0] != 1
    zk.create(PREFERRED, json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0}]}).encode())
    wait_until(lambda: (cluster.agreed(0, topic) or (None,))[0] == 1, f"broker 1 leads {topic} again",
               timeout=TIMEOUT)
    wait_until(lambda: zk.exists(PREFERRED) is None, f"the controller removed {PREFERRED}")


def change_broker_config(cluster: KbrokerCluster, entity: str, name: str, value: str | None,
                         via: int = 1) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 on broker `entity` (an id, sent to that broker; or "" for the cluster default,
    which stock admin clients refuse to name, sent to broker `via`): SET, or DELETE for None. (error code,
    message)"""
    broker = cluster.brokers[int(entity) if entity else via]
    host, port = broker.bootstrap.rsplit(":", 1)
    client = WireClient(host, int(port))
    try:
        IAC = messages.IncrementalAlterConfigsRequest
        answer = client.call(44, 1, IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
            resource_type=4, resource_name=entity, configs=[IAC.AlterableConfig(
                name=name, config_operation=0 if value is not None else 1, value=value)])])).body
    finally:
        client.close()
    (result,) = answer.responses
    return result.error_code, result.error_message


def replace_broker_configs(cluster: KbrokerCluster, broker_id: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """The legacy AlterConfigs v1 (the whole set replaced), sent to broker `broker_id`; (error code, message)."""
    host, port = cluster.brokers[int(broker_id)].bootstrap.rsplit(":", 1)
    client = WireClient(host, int(port))
    try:
        AC = messages.AlterConfigsRequest
        answer = client.call(33, 1, AC(validate_only=False, resources=[AC.AlterConfigsResource(
            resource_type=4, resource_name=broker_id, configs=[AC.AlterableConfig(name=n, value=v)
                                                               for n, v in configs.items()])])).body
    finally:
        client.close()
    (result,) = answer.responses
    return result.error_code, result.error_message


def broker_config(cluster: KbrokerCluster, broker_id: int, name: str) -> tuple[str | None, ConfigSource]:
    """(value, source) of `name` as broker `broker_id` describes itself."""
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    entry = admin.describe_configs([resource])[resource].result(TIMEOUT)[name]
    return entry.value, ConfigSource(entry.source)


def stored(zk: KazooClient, entity: str) -> dict[str, str] | None:
    found = zk.exists(f"/config/brokers/{entity}") and zk.get(f"/config/brokers/{entity}")[0]
    return json.loads(found)["config"] if found else None


def test_a_cluster_default_set_through_any_broker_is_kept_in_zookeeper_and_reaches_every_broker(
        chroot: tuple[KbrokerCluster, KazooClient]) -> None:
    cluster, zk = chroot
    assert change_broker_config(cluster, "", MESSAGE_MAX_BYTES, "2000000") == (0, None)
    # at once, through another broker: the change starts from ZooKeeper, not from what that broker applied so far
    assert change_broker_config(cluster, "", CLEANER_BACKOFF_MS, "20000", via=2) == (0, None)
    try:
        assert stored(zk, "<default>") == {MESSAGE_MAX_BYTES: "2000000", CLEANER_BACKOFF_MS: "20000"}
        for broker_id in BROKER_IDS:
            wait_until(lambda b=broker_id: broker_config(cluster, b, MESSAGE_MAX_BYTES) ==
                       ("2000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                       f"broker {broker_id} has the new cluster default")
    finally:
        change_broker_config(cluster, "", MESSAGE_MAX_BYTES, None)
        change_broker_config(cluster, "", CLEANER_BACKOFF_MS, None, via=3)
    assert stored(zk, "<default>") == {}
    for broker_id in BROKER_IDS:
        wait_until(lambda b=broker_id: broker_config(cluster, b, MESSAGE_MAX_BYTES)[1] in
                   (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG),
                   f"broker {broker_id} is back to its own setting")


def test_a_config_set_for_one_broker_applies_there_only_and_is_read_from_zookeeper_when_it_starts(
        chroot: tuple[KbrokerCluster, KazooClient]) -> None:
    cluster, zk = chroot
    assert change_broker_config(cluster, "2", MESSAGE_MAX_BYTES, "3000000") == (0, None)
    try:
        assert stored(zk, "2") == {MESSAGE_MAX_BYTES: "3000000"}
        wait_until(lambda: broker_config(cluster, 2, MESSAGE_MAX_BYTES) ==
                   ("3000000", ConfigSource.DYNAMIC_BROKER_CONFIG), "broker 2 has its own setting")
        assert broker_config(cluster, 1, MESSAGE_MAX_BYTES)[0] != "3000000"
        cluster.brokers[2].stop(signal.SIGKILL)
        wait_until(lambda: zk.exists("/brokers/ids/2") is None, "broker 2's session expired", timeout=TIMEOUT)
        # changed while it was down, with no notification left: only reading /config/brokers at start finds it
        zk.set("/config/brokers/2", json.dumps({"version": 1, "config": {MESSAGE_MAX_BYTES: "4000000"}}).encode())
        for change in zk.get_children("/config/changes"):
            zk.delete(f"/config/changes/{change}")
        cluster.brokers[2].start()
        wait_until(lambda: cluster.knows_everyone(cluster.brokers[2]), "broker 2 is back", timeout=TIMEOUT)
        assert broker_config(cluster, 2, MESSAGE_MAX_BYTES) == ("4000000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    finally:
        change_broker_config(cluster, "2", MESSAGE_MAX_BYTES, None)


def test_a_password_config_is_refused_without_an_encoder_secret_to_keep_it_in_zookeeper(
        chroot: tuple[KbrokerCluster, KazooClient]) -> None:
    cluster, zk = chroot
    password = "listener.name.plaintext.ssl.keystore.password"
    message = "Invalid config value for resource ConfigResource(type=BROKER, name='1'): Password encoder secret not " \
              "configured"
    assert change_broker_config(cluster, "1", password, "secret") == (ErrorCode.INVALID_CONFIG, message)
    assert replace_broker_configs(cluster, "1", {password: "secret"}) == (ErrorCode.INVALID_CONFIG, message)
    assert stored(zk, "1") in (None, {})
