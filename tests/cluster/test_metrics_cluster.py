"""The Prometheus figures only a cluster moves: the active controller, ISR shrinks and expands, under-replicated
and offline partitions, acks=all produces in the produce purgatory. Two `kbroker serve` brokers over a real
ZooKeeper, each with its own prometheus.port; a follower is frozen (SIGSTOP) to fall out of sync."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KbrokerProcess, running_cluster
from waiting import wait_until

from kbroker.testing import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2)
LAG_MS = 3000  # replica.lag.time.max.ms: a frozen follower leaves the ISR within about 1.5x this
SESSION_MS = 12000  # well above the lag: the leader shrinks the ISR before the controller sees the follower gone
TIMEOUT = 60


class MeteredBroker:
    """A cluster broker and the port of its /metrics."""

    def __init__(self, process: KbrokerProcess, metrics_port: int) -> None:
        self.process, self.metrics_port = process, metrics_port
        self.broker_id = process.broker_id

    def value(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        wanted = tuple(sorted(labels.items()))
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and tuple(sorted(sample.labels.items())) == wanted:
                    return sample.value
        return 0.0

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP for the block: it neither fetches nor answers, as a hung machine."""
        os.kill(self.process.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.process.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def brokers(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, MeteredBroker]]:
    connect = f"{zookeeper_server.connect}/kbroker-metrics-{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("kbroker-metrics-cluster")
    overrides = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
                 "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
                 "offsets.topic.num.partitions": "1", "auto.leader.rebalance.enable": "false"}
    ports = {i: free_port() for i in BROKER_IDS}
    with running_cluster(connect, workdir, BROKER_IDS,
                         lambda i: {**overrides, "prometheus.port": str(ports[i])}) as cluster:
        yield {i: MeteredBroker(cluster.brokers[i], ports[i]) for i in BROKER_IDS}


def controller_and_other(brokers: dict[int, MeteredBroker]) -> tuple[MeteredBroker, MeteredBroker]:
    """(the active controller, the other broker) by their activecontrollercount."""
    active = wait_until(lambda: [b for b in brokers.values()
                                 if b.value("kafka_controller_kafkacontroller_activecontrollercount") == 1],
                        "a broker reports itself the active controller", TIMEOUT)
    (controller,) = active
    (other,) = [b for b in brokers.values() if b is not controller]
    return controller, other


def create_topic(brokers: dict[int, MeteredBroker], assignment: list[list[int]]) -> str:
    name = f"metered-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ",".join(b.process.bootstrap for b in brokers.values())})
    created = NewTopic(name, num_partitions=len(assignment), replication_factor=-1, replica_assignment=assignment)
    admin.create_topics([created])[name].result(TIMEOUT)
    return name


def append(leader: MeteredBroker, topic: str) -> None:
    """One record, acks=1: the leader's log end moves past a frozen follower's, which now lags (a follower at
    the leader's log end counts as caught up, however long ago it fetched, as in Kafka)."""
    producer = Producer({"bootstrap.servers": leader.process.bootstrap, "acks": "1", "log_level": 0})
    producer.produce(topic, b"moves the log end", partition=0)
    assert producer.flush(TIMEOUT) == 0


def test_exactly_one_broker_reports_itself_the_active_controller(brokers: dict[int, MeteredBroker]) -> None:
    _, other = controller_and_other(brokers)
    assert other.value("kafka_controller_kafkacontroller_activecontrollercount") == 0


def test_a_frozen_follower_is_shrunk_out_of_the_isr_and_leaves_its_partition_under_replicated(
        brokers: dict[int, MeteredBroker]) -> None:
    leader, follower = controller_and_other(brokers)
    topic = create_topic(brokers, [[leader.broker_id, follower.broker_id]])
    shrinks = leader.value("kafka_server_replicamanager_isrshrinks_total")
    with follower.frozen():
        append(leader, topic)
        wait_until(lambda: leader.value("kafka_server_replicamanager_isrshrinks_total") > shrinks,
                   "the leader shrinks the ISR", TIMEOUT)
        assert leader.value("kafka_server_replicamanager_underreplicatedpartitions") >= 1
    wait_until(lambda: leader.value("kafka_server_replicamanager_underreplicatedpartitions") == 0,
               "the thawed follower is back in every ISR", TIMEOUT)


def test_a_follower_that_catches_up_again_is_expanded_into_the_isr(brokers: dict[int, MeteredBroker]) -> None:
    leader, follower = controller_and_other(brokers)
    topic = create_topic(brokers, [[leader.broker_id, follower.broker_id]])
    shrinks = leader.value("kafka_server_replicamanager_isrshrinks_total")
    with follower.frozen():
        append(leader, topic)
        wait_until(lambda: leader.value("kafka_server_replicamanager_isrshrinks_total") > shrinks,
                   "the leader shrinks the ISR", TIMEOUT)
        expands = leader.value("kafka_server_replicamanager_isrexpands_total")
    wait_until(lambda: leader.value("kafka_server_replicamanager_isrexpands_total") > expands,
               "the leader expands the ISR again", TIMEOUT)


def test_an_acks_all_produce_waits_in_the_produce_purgatory_while_a_follower_lags(
        brokers: dict[int, MeteredBroker]) -> None:
    leader, follower = controller_and_other(brokers)
    topic = create_topic(brokers, [[leader.broker_id, follower.broker_id]])
    wait_until(lambda: leader.value("kafka_server_replicamanager_underreplicatedpartitions") == 0,
               "both replicas in sync", TIMEOUT)
    producer = Producer({"bootstrap.servers": leader.process.bootstrap, "acks": "all", "linger.ms": 0,
                         "log_level": 0})
    producer.list_topics(topic, timeout=10)
    with follower.frozen():
        producer.produce(topic, b"waits for the ISR", partition=0)
        producer.poll(0)
        wait_until(lambda: leader.value("kafka_server_delayedoperationpurgatory_purgatorysize",
                                        delayedOperation="Produce") >= 1, "the produce waits in the purgatory",
                   LAG_MS / 1000, every=0.05)
    assert producer.flush(TIMEOUT) == 0
    assert leader.value("kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Produce") == 0


def test_the_controller_counts_a_partition_whose_only_replica_is_gone_as_offline(
        brokers: dict[int, MeteredBroker]) -> None:
    controller, other = controller_and_other(brokers)
    create_topic(brokers, [[other.broker_id]])
    assert controller.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    with other.frozen():  # its ZooKeeper session expires: the controller takes it for dead
        wait_until(lambda: controller.value("kafka_controller_kafkacontroller_offlinepartitionscount") >= 1,
                   "the controller counts the partition offline", TIMEOUT)
    wait_until(lambda: controller.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0,
               "the partition is back online with its broker", TIMEOUT)
