"""A reassignment throttled with `kafka-reassign-partitions --throttle` (KIP-73 replication quotas), or on one
side only with `kafka-configs` (the leader's, or the new follower's): the new replica catches up at the throttled
rate, so the reassignment is still under way seconds after it began, and it completes once the throttle is lifted;
on three `kbroker serve` processes and on three Apache Kafka 3.9 brokers in ZooKeeper mode (the reference)."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_until
from workload import EVERYONE, TIMEOUT, create_topic, produce_all, replica_dir

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-reassignment-throttle")]

TOPIC = "throttled"
RATE = 100_000  # bytes per second: the 3 MB below take half a minute under it
RATES = "leader.replication.throttled.rate,follower.replication.throttled.rate"


@pytest.fixture(scope="module", params=sorted(KINDS))
def cluster(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    import java_harness
    import kafka_process

    connect = f"{zookeeper_server.connect}/reassignment-throttle-{uuid.uuid4().hex[:8]}"
    try:
        with running_cluster(connect, tmp_path_factory.mktemp(request.param), EVERYONE,
                             {"auto.leader.rebalance.enable": "false"}, request.param) as started:
            yield started
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")


def _reassign(cluster: KbrokerCluster, plan: Path, *args: str) -> str:
    import kafka_tools

    return kafka_tools.run("ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap(),
                           "--reassignment-json-file", plan, *args)


def _alter_configs(cluster: KbrokerCluster, entity_type: str, name: str, *args: str) -> None:
    import kafka_tools

    kafka_tools.run("ConfigCommand", "--bootstrap-server", cluster.bootstrap(), "--entity-type", entity_type,
                    "--entity-name", name, "--alter", *args)


def _topic_to_move(cluster: KbrokerCluster, topic: str, tmp_path: Path) -> Path:
    """`topic` with one replica, on broker 1, holding 3 MB; the plan that adds a replica on broker 2."""
    create_topic(cluster, topic, assignment=[[1]])
    produce_all(cluster, topic, [f"{i:04d}" + "x" * 10_000 for i in range(300)])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}))
    return plan


def _log_bytes(cluster: KbrokerCluster, broker_id: int, topic: str) -> int:
    found = replica_dir(cluster.brokers[broker_id], topic, 0)
    return sum(f.stat().st_size for f in found.glob("*.log")) if found.is_dir() else 0


def _held_then_lifted(cluster: KbrokerCluster, topic: str, plan: Path, lift: Callable[[], None],
                      record_property) -> None:
    time.sleep(3)
    assert "is still in progress" in _reassign(cluster, plan, "--verify"), "broker 2 catches up at the throttled rate"
    assert not cluster.in_sync(0, topic, (1, 2))
    copied, total = _log_bytes(cluster, 2, topic), _log_bytes(cluster, 1, topic)
    lift()
    lifted = time.monotonic()
    wait_until(lambda: cluster.in_sync(0, topic, (1, 2)), "broker 2 is in sync once the throttle is lifted",
               timeout=TIMEOUT)
    caught_up = time.monotonic() - lifted
    verified = _reassign(cluster, plan, "--verify")
    assert f"Reassignment of partition {topic}-0 is completed." in verified, verified
    record_property("figure", f"{copied / 1e6:.1f} of {total / 1e6:.1f} MB copied after 3 s at {RATE / 1e3:.0f} "
                              f"kB/s; in sync {caught_up:.1f} s after the lift")


def test_a_reassignment_throttled_by_kafka_reassign_partitions_is_held_until_the_throttle_is_lifted(
        cluster: KbrokerCluster, tmp_path: Path, record_property) -> None:
    plan = _topic_to_move(cluster, TOPIC, tmp_path)
    executed = _reassign(cluster, plan, "--execute", "--throttle", str(RATE))
    assert f"throttle limit was set to {RATE} B/s" in executed, executed

    def lift() -> None:  # by hand: --verify lifts it only once the reassignment is done
        for broker_id in ("1", "2"):
            _alter_configs(cluster, "brokers", broker_id, "--delete-config", RATES)
    _held_then_lifted(cluster, TOPIC, plan, lift, record_property)


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_reassignment_throttled_on_one_side_alone_is_held_until_the_throttle_is_lifted(
        cluster: KbrokerCluster, tmp_path: Path, side: str, record_property) -> None:
    """The leader (broker 1) holds back what it sends, or the new follower (broker 2) what it asks for."""
    topic, broker_id = f"{side}-throttled", "1" if side == "leader" else "2"
    plan = _topic_to_move(cluster, topic, tmp_path)
    _alter_configs(cluster, "topics", topic, "--add-config", f"{side}.replication.throttled.replicas=0:{broker_id}")
    _alter_configs(cluster, "brokers", broker_id, "--add-config", f"{side}.replication.throttled.rate={RATE}")
    _reassign(cluster, plan, "--execute")
    _held_then_lifted(cluster, topic, plan, lambda: _alter_configs(
        cluster, "brokers", broker_id, "--delete-config", f"{side}.replication.throttled.rate"), record_property)
