"""Requests written straight to ZooKeeper's /admin znodes (what kafka-reassign-partitions and
kafka-preferred-replica-election did with --zookeeper, and what other tools still write) are carried out by the
controller and removed once done. Each test runs on three `kbroker serve` processes and on three Apache Kafka 3.9
brokers in ZooKeeper mode (the reference), the znodes written with kazoo in Kafka's version 1 JSON."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_until
from workload import TIMEOUT, create_topic, leader_log, produce_all, replica_logs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-admin-znodes")]

BROKER_IDS = (1, 2, 3)
REASSIGN = "/admin/reassign_partitions"
PREFERRED = "/admin/preferred_replica_election"


@pytest.fixture(scope="module", params=sorted(KINDS))
def chroot(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KbrokerCluster,
                                                                                                 KazooClient]]:
    """The cluster (kbroker's, or Kafka 3.9's with the same settings) and a ZooKeeper session on its chroot."""
    import java_harness
    import kafka_process

    connect = f"{zookeeper_server.connect}/admin-znodes-{uuid.uuid4().hex[:8]}"
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
