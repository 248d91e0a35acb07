"""Replicas moved between the log dirs of their brokers (AlterReplicaLogDirs) while producers write with acks=all
keep Kafka's promise: every acknowledged record is on every replica, once, at its offset, and nothing a consumer
read is gone (the failover tests' checker, tests/cluster/workload.py). The leader's replica and a follower's move,
on three `kbroker serve` processes and on three Apache Kafka 3.9 brokers in ZooKeeper mode (the reference), each
broker with two log dirs."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_until
from workload import EVERYONE, SECOND_LOG_DIR, TIMEOUT, Workload, check, create_topic

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-log-dir-moves")]

TOPIC = "moving-dirs"
RECORDS = 600  # per producer; the moves start once 150 of each are acknowledged


@pytest.fixture(scope="module", params=sorted(KINDS))
def cluster(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    import java_harness
    import kafka_process

    root = tmp_path_factory.mktemp(request.param)
    connect = f"{zookeeper_server.connect}/log-dir-moves-{uuid.uuid4().hex[:8]}"

    def settings(broker_id: int) -> dict[str, str]:
        data = KINDS[request.param](root / f"broker-{broker_id}", connect, broker_id).data  # its usual log dir
        return {"log.dirs": f"{data},{data.with_name(SECOND_LOG_DIR)}", "replica.lag.time.max.ms": "10000",
                "offsets.topic.replication.factor": "3", "auto.leader.rebalance.enable": "false"}
    try:
        with running_cluster(connect, root, EVERYONE, settings, request.param) as started:
            yield started
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")


def _replica_dirs(admin: KafkaAdminClient, broker_id: int) -> list[tuple[str, bool]]:
    """(log dir, whether a future replica) of each replica of TOPIC-0 on `broker_id`, as DescribeLogDirs says."""
    [answer] = admin.describe_log_dirs(topic_partitions={TOPIC: [0]}, brokers=[broker_id])
    return sorted((entry["log_dir"], p["is_future_key"]) for entry in answer["log_dirs"]
                  for t in entry["topics"] if t["name"] == TOPIC for p in t["partitions"])


def test_replicas_moved_between_log_dirs_under_acks_all_load_keep_every_acknowledged_record(cluster,
                                                                                           record_property):
    create_topic(cluster, TOPIC, config={"min.insync.replicas": "2"})
    leader, _ = cluster.agreed(0, TOPIC)  # type: ignore[misc]
    moving = (leader, next(b for b in EVERYONE if b != leader))
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap().split(","))
    try:
        with Workload(cluster, TOPIC, 1, count=RECORDS) as load:
            wait_until(lambda: load.under_way(RECORDS // 4), "the producers are under way", timeout=TIMEOUT)
            targets = {b: str(cluster.brokers[b].data.with_name(SECOND_LOG_DIR)) for b in moving}
            asked = {TopicPartitionReplica(TOPIC, 0, b): target for b, target in targets.items()}
            assert admin.alter_replica_log_dirs(asked) == dict.fromkeys(asked, NoError)
            for broker_id, target in targets.items():
                wait_until(lambda b=broker_id, t=target: _replica_dirs(admin, b) == [(t, False)],
                           f"broker {broker_id}'s replica has moved to {target}", timeout=TIMEOUT)
            history = load.finish()
    finally:
        admin.close()
    check(cluster, TOPIC, 1, history)
    record_property("figure", f"{len(history.acked)} acknowledged, {len(history.observed)} read meanwhile")
    assert cluster.agreed(0, TOPIC)[0] == leader  # type: ignore[index]
