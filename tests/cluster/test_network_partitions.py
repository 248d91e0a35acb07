"""No acknowledged record is lost when the network splits: three `kbroker serve` processes, each in a network
namespace of its own (netns.py: real Linux networking between them), a real ZooKeeper and stock producers
(confluent-kafka and aiokafka, idempotent, acks=all, min.insync.replicas=2) while the leader of a partition loses
its whole network, only ZooKeeper, or only the other brokers; then the network heals. The checker is the one of
the failover tests (history.py): every acknowledged record once, in send order, at its offset, on every replica,
and nothing a consumer read ever gone."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns
from kbroker_process import KbrokerCluster, running_cluster
from waiting import wait_for_zookeeper, wait_until
from workload import EVERYONE, Workload, check, create_topic

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-netns")]

SESSION_MS = 6000
LAG_MS = 3000
RECORDS = 1000


@pytest.fixture(scope="module")
def network() -> Iterator[netns.Network]:
    problem = netns.available()
    if problem is not None:
        import java_harness

        java_harness.unavailable(problem)  # CI runs as root and must run these
    with netns.Network(EVERYONE) as made:
        yield made


@pytest.fixture(scope="module")
def cluster(network: netns.Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    import kafka_process

    workdir = tmp_path_factory.mktemp("netns-cluster")
    zookeeper = kafka_process.ZooKeeperProcess(workdir, host=network.zookeeper)
    try:
        zookeeper.start()
        wait_for_zookeeper(zookeeper.connect)
        overrides = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
                     "replica.fetch.backoff.ms": "200", "auto.leader.rebalance.enable": "false",
                     "controlled.shutdown.enable": "false"}
        with running_cluster(f"{zookeeper.connect}/netns-{uuid.uuid4().hex[:8]}", workdir, EVERYONE, overrides,
                             host=network.address, wrap=lambda i: lambda argv: network.run(i, argv)) as started:
            yield started
    finally:
        zookeeper.stop()


def leader_seen_by_others(cluster: KbrokerCluster, topic: str, cut_off: int) -> int | None:
    """The partition's leader as every broker but `cut_off` tells it, when they agree on one that is not it."""
    seen = {cluster.partition(b, 0, topic) for b in cluster.live() if b.broker_id != cut_off}
    if len(seen) != 1:
        return None
    (found,) = seen
    return found[0] if found is not None and found[0] not in (-1, cut_off) else None


def partitioned(cluster: KbrokerCluster, network: netns.Network, topic: str, split: Callable[[int], None],
                until: Callable[[int, Workload], object], what: str) -> None:
    """Producers run while `split(leader)` cuts the leader of `topic`-0 off, until `until(leader, workload)`
    holds; then the network heals and the history is checked."""
    create_topic(cluster, topic, config={"min.insync.replicas": "2"})
    with Workload(cluster, topic, 1, count=RECORDS) as workload:
        wait_until(lambda: workload.under_way(100), "the producers are under way")
        leader, _ = cluster.agreed(0, topic)  # type: ignore[misc]
        split(leader)
        try:
            wait_until(lambda: until(leader, workload), what, timeout=SESSION_MS / 1000 + 60)
        finally:
            network.heal(leader)
        history = workload.finish()
    assert history.failed == {}, "every record was delivered within the producers' delivery timeout"
    assert len(history.acked) == 2 * RECORDS
    check(cluster, topic, 1, history)


def test_nothing_acknowledged_is_lost_when_a_leader_loses_its_whole_network(
        cluster: KbrokerCluster, network: netns.Network) -> None:
    partitioned(cluster, network, "isolated", network.isolate,
                lambda leader, _: leader_seen_by_others(cluster, "isolated", leader),
                "the brokers still connected elect another leader")


def test_nothing_acknowledged_is_lost_when_a_leader_loses_only_zookeeper(
        cluster: KbrokerCluster, network: netns.Network) -> None:
    partitioned(cluster, network, "no-zookeeper", lambda leader: network.cut(leader, [network.zookeeper]),
                lambda leader, _: leader_seen_by_others(cluster, "no-zookeeper", leader),
                "the controller elects another leader once the cut-off broker's session expired")


def test_nothing_acknowledged_is_lost_when_a_leader_loses_only_its_followers(
        cluster: KbrokerCluster, network: netns.Network) -> None:
    partitioned(cluster, network, "no-followers",
                lambda leader: network.cut(leader, [network.address(b) for b in EVERYONE if b != leader]),
                lambda leader, workload: time.monotonic() - workload.last_ack > 2 * LAG_MS / 1000,
                "acks=all stops being acknowledged for two replica.lag.time.max.ms")
