"""No acknowledged record is lost when the network splits: three `kbroker serve` processes, and as the reference
three Apache Kafka 3.9 brokers in ZooKeeper mode, each in a network namespace of its own (netns.py: real Linux
networking between them), a real ZooKeeper and stock producers
(confluent-kafka and aiokafka, idempotent, acks=all, min.insync.replicas=2) while the leader of a partition loses
its whole network, only ZooKeeper, or only the other brokers; then the network heals. The checker is the one of
the failover tests (history.py): every acknowledged record once, in send order, at its offset, on every replica,
and nothing a consumer read ever gone. A record may fail by timing out (a request to a broker that went silent
waits out the client's request timeout), never otherwise."""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns
from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_for_zookeeper, wait_until
from workload import EVERYONE, Workload, check, create_topic

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-netns")]

SESSION_MS = 6000
LAG_MS = 3000
TIMED_OUT = re.compile(r"time ?out|timed.?out", re.IGNORECASE)  # the clients' words for a timeout
RECORDS = 3000  # per producer: enough that they are still sending when the network heals


@pytest.fixture(scope="module")
def network() -> Iterator[netns.Network]:
    problem = netns.available()
    if problem is not None:
        import java_harness

        java_harness.unavailable(problem)  # CI runs as root and must run these
    with netns.Network(EVERYONE) as made:
        yield made


@pytest.fixture(scope="module", params=sorted(KINDS))
def cluster(request, network: netns.Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    import java_harness
    import kafka_process

    workdir = tmp_path_factory.mktemp(f"netns-{request.param}")
    zookeeper = kafka_process.ZooKeeperProcess(workdir, host=network.zookeeper)
    try:
        zookeeper.start()
        wait_for_zookeeper(zookeeper.connect)
        overrides = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
                     "replica.fetch.backoff.ms": "200", "auto.leader.rebalance.enable": "false",
                     "controlled.shutdown.enable": "false"}
        with running_cluster(f"{zookeeper.connect}/netns-{uuid.uuid4().hex[:8]}", workdir, EVERYONE, overrides,
                             request.param, host=network.address,
                             wrap=lambda i: lambda argv: network.run(i, argv)) as started:
            yield started
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")
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
                until: Callable[[int, Workload], object], what: str, record_property,
                served_meanwhile: bool) -> None:
    """Producers run while `split(leader)` cuts the leader of `topic`-0 off, until `until(leader, workload)`
    holds (and, when `served_meanwhile`, records are acknowledged again, by the new leader); then the network
    heals and the history is checked. The cluster scenarios table's figures: when `until` held, from the cut, and
    the longest the producers went without an acknowledgement."""
    wait_until(lambda: all(cluster.knows_everyone(b) for b in cluster.live()),
               "every broker is back in the cluster (an earlier test's cut-off one re-registers)")
    create_topic(cluster, topic, config={"min.insync.replicas": "2"})
    with Workload(cluster, topic, 1, count=RECORDS) as workload:
        wait_until(lambda: workload.under_way(100), "the producers are under way")
        leader, _ = cluster.agreed(0, topic)  # type: ignore[misc]
        workload.longest_wait = 0.0
        split(leader)
        started = time.monotonic()
        try:
            wait_until(lambda: until(leader, workload), what, timeout=SESSION_MS / 1000 + 60)
            held = time.monotonic() - started
            if served_meanwhile:
                moved = workload.acked()
                wait_until(lambda: workload.acked() >= moved + 100, "acknowledgements before the network heals")
        finally:
            network.heal(leader)
        history = workload.finish()
    not_timeouts = {value: error for value, error in history.failed.items() if not TIMED_OUT.search(error)}
    assert not_timeouts == {}, "records fail only by timing out (a request on a silent connection waits out the " \
                               "client's request timeout)"
    assert len(history.acked) > RECORDS
    check(cluster, topic, 1, history)
    record_property("figure", f"{what} after {held:.1f} s; {len(history.acked)} acknowledged, "
                              f"{len(history.failed)} timed out, none acknowledged for {workload.longest_wait:.1f} s "
                              "at most")


def test_nothing_acknowledged_is_lost_when_a_leader_loses_its_whole_network(
        cluster: KbrokerCluster, network: netns.Network, record_property) -> None:
    partitioned(cluster, network, "isolated", network.isolate,
                lambda leader, _: leader_seen_by_others(cluster, "isolated", leader),
                "another leader", record_property, served_meanwhile=True)


def test_nothing_acknowledged_is_lost_when_a_leader_loses_only_zookeeper(
        cluster: KbrokerCluster, network: netns.Network, record_property) -> None:
    # Not served_meanwhile: the cut-off leader still answers the clients as leader (the controller updates only
    # live brokers), so on Kafka 3.9 too the producers may wait on it until the network heals.
    partitioned(cluster, network, "no-zookeeper", lambda leader: network.cut(leader, [network.zookeeper]),
                lambda leader, _: leader_seen_by_others(cluster, "no-zookeeper", leader),
                "another leader", record_property, served_meanwhile=False)


def test_nothing_acknowledged_is_lost_when_a_leader_loses_only_its_followers(
        cluster: KbrokerCluster, network: netns.Network, record_property) -> None:
    partitioned(cluster, network, "no-followers",
                lambda leader: network.cut(leader, [network.address(b) for b in EVERYONE if b != leader]),
                lambda leader, workload: time.monotonic() - workload.last_ack > 2 * LAG_MS / 1000,
                f"{2 * LAG_MS / 1000:.0f} s without an acknowledgement", record_property, served_meanwhile=False)
