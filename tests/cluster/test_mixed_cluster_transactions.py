"""Transactions across a cluster of two kbroker brokers and one Apache Kafka 3.9 broker (ZooKeeper mode) on one
ZooKeeper chroot: whichever kind coordinates the transactional id, its markers reach partition leaders of the other
kind (WriteTxnMarkers), partition leaders of either kind check the producer's transaction with a coordinator of the
other (AddPartitionsToTxn verify_only), and a read_committed consumer reads each committed record once and no aborted
one. Stock clients only."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_processes import start_all, wait_formed
from kbroker_process import KINDS, KbrokerCluster
from transaction_checks import (
    PARTITIONS,
    TIMEOUT,
    TOPIC,
    leader_of,
    offsets_committed_with_transactions,
    read_after_commit_and_abort,
    state_leaders,
    transaction_coordinator,
    transactional_producer,
)
from waiting import wait_until

from kbroker.coordinator.hashing import partition_for as kafka_partition_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("kafka-zk-cluster")]

KIND_OF = {1: "kbroker", 2: "kafka-3.9", 3: "kbroker"}
BROKER_IDS = tuple(KIND_OF)
STATE_PARTITIONS = 5


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    connect = f"{zookeeper_server.connect}/mixed-txn-{uuid.uuid4().hex[:8]}"
    overrides = {
        "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "3000",
        "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0", "default.replication.factor": "3",
        "auto.leader.rebalance.enable": "false"}
    workdir = tmp_path_factory.mktemp("mixed-txn")
    brokers = {i: KINDS[kind](workdir / f"broker-{i}", connect, i, overrides) for i, kind in KIND_OF.items()}
    zk = KazooClient(hosts=connect)
    try:
        start_all(brokers.values())
        zk.start(timeout=30)
        wait_formed(zk, brokers.values())
        started = KbrokerCluster(brokers)
        admin = AdminClient({"bootstrap.servers": started.bootstrap(), "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(TIMEOUT)
        for index in range(PARTITIONS):
            wait_until(lambda i=index: started.in_sync(i, TOPIC, BROKER_IDS), f"{TOPIC}-{index} has its full ISR")
        yield started
    finally:
        for broker in brokers.values():
            print(f"broker {broker.broker_id} ({KIND_OF[broker.broker_id]}) log:\n{broker.log_tail(60)}")
            broker.stop(9)
        zk.stop()
        zk.close()


@pytest.fixture(scope="module")
def id_coordinated_by(cluster: KbrokerCluster) -> dict[int, str]:
    """A transactional id for each broker, coordinated there (`__transaction_state` created by the first ask)."""
    wait_until(lambda: transaction_coordinator(cluster, "mixed-probe") >= 0, "__transaction_state has its leaders",
               timeout=TIMEOUT)
    leaders = state_leaders(cluster, STATE_PARTITIONS)
    found: dict[int, str] = {}
    for i in range(1000):
        transactional_id = f"mixed-{i}"
        found.setdefault(leaders[kafka_partition_for(transactional_id, STATE_PARTITIONS)], transactional_id)
    assert sorted(found) == sorted(BROKER_IDS), "every broker leads a partition of __transaction_state"
    return found


def test_the_topics_partitions_are_led_by_both_kinds_of_broker(cluster: KbrokerCluster) -> None:
    leaders = {leader_of(cluster, p) for p in range(PARTITIONS)}
    assert {KIND_OF[leader] for leader in leaders} == {"kbroker", "kafka-3.9"}


@pytest.mark.parametrize("coordinator", BROKER_IDS, ids=[f"{KIND_OF[i]}-{i}" for i in BROKER_IDS])
def test_a_transaction_coordinated_by_either_kind_commits_and_aborts_on_partitions_of_both(
        cluster: KbrokerCluster, id_coordinated_by: dict[int, str], coordinator: int) -> None:
    transactional_id = id_coordinated_by[coordinator]
    producer = transactional_producer(cluster, transactional_id)
    wait_until(lambda: transaction_coordinator(cluster, transactional_id) == coordinator,
               f"broker {coordinator} is named the coordinator of {transactional_id}")
    seen = read_after_commit_and_abort(cluster, producer, transactional_id, 12)
    assert sorted(seen) == sorted(f"{transactional_id}-committed-{i}".encode() for i in range(12))


@pytest.mark.parametrize("coordinator", BROKER_IDS, ids=[f"{KIND_OF[i]}-{i}" for i in BROKER_IDS])
def test_offsets_sent_to_a_transaction_are_committed_by_whichever_kind_leads_the_groups_partition(
        cluster: KbrokerCluster, id_coordinated_by: dict[int, str], coordinator: int) -> None:
    producer = transactional_producer(cluster, id_coordinated_by[coordinator])
    group = f"mixed-readers-{coordinator}"
    assert offsets_committed_with_transactions(cluster, producer, group, 1, committed=7, aborted=11) == 7
