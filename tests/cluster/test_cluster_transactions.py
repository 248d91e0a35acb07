"""Transactions on three kbroker brokers over a real ZooKeeper: the transactional id's coordinator is the leader of
its `__transaction_state` partition, its state is replicated three times, its markers reach partition leaders on
other brokers, and a kill -9 of the coordinator or of a partition leader in the middle of a transaction loses no
committed record and exposes no aborted one. Stock clients only (confluent-kafka's transactional producer, kafka-python
read_committed consumers); each broker is a `kbroker serve` subprocess."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_wire_peer import WireClient
from kbroker_process import KbrokerCluster, running_cluster
from transaction_checks import (
    FAILOVER_S,
    PARTITIONS,
    TIMEOUT,
    TOPIC,
    committed_values,
    killed,
    leader_of,
    new_coordinator,
    offsets_committed_with_transactions,
    produce_all,
    read_after_commit_and_abort,
    retrying,
    state_leaders,
    transaction_coordinator,
    transactional_producer,
)
from waiting import wait_until

from kbroker.coordinator.hashing import partition_for as kafka_partition_for
from wire import messages

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2, 3)
SESSION_MS = 6000
STATE_PARTITIONS = 5
GROUP = "txn-readers"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    connect = f"{zookeeper_server.connect}/kbroker-txn-{uuid.uuid4().hex[:8]}"
    overrides = {
        "zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
        "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
        "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0", "default.replication.factor": "3",
        "auto.leader.rebalance.enable": "false"}
    with running_cluster(connect, tmp_path_factory.mktemp("kbroker-txn"), BROKER_IDS, overrides) as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap(), "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(TIMEOUT)
        for index in range(PARTITIONS):
            wait_until(lambda i=index: started.in_sync(i, TOPIC, BROKER_IDS), f"{TOPIC}-{index} has its full ISR")
        yield started


def test_the_coordinator_is_the_leader_of_the_ids_state_partition_replicated_three_times(
        cluster: KbrokerCluster) -> None:
    transactional_id = "placement"
    producer = transactional_producer(cluster, transactional_id)  # FindCoordinator creates __transaction_state
    producer.flush(1)
    leader = state_leaders(cluster, STATE_PARTITIONS)[kafka_partition_for(transactional_id, STATE_PARTITIONS)]
    state = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0}) \
        .list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    assert {tuple(sorted(p.replicas)) for p in state.partitions.values()} == {BROKER_IDS}
    assert transaction_coordinator(cluster, transactional_id) == leader


def test_a_cluster_member_serves_transactions_v1_only_as_kafka_3_9(cluster: KbrokerCluster) -> None:
    """No transaction.version feature and EndTxn up to v4, so Kafka 4 producers stay on v1 in a cluster whose Kafka
    3.9 brokers could not serve v2."""
    host, port = cluster.live()[0].bootstrap.rsplit(":", 1)
    client = WireClient(host, int(port))
    try:
        answer = client.call(18, 4, messages.ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1")).body
    finally:
        client.close()
    assert answer.finalized_features == [] and answer.supported_features == []
    assert {k.api_key: k.max_version for k in answer.api_keys}[26] == 4


def test_a_cluster_member_closes_the_connection_of_an_end_txn_v5_as_kafka_3_9(cluster: KbrokerCluster) -> None:
    host, port = cluster.live()[0].bootstrap.rsplit(":", 1)
    client = WireClient(host, int(port))
    try:
        with pytest.raises((ConnectionError, EOFError, OSError)):
            client.call(26, 5, messages.EndTxnRequest(transactional_id="v5", producer_id=1, producer_epoch=0,
                                                      committed=True))
    finally:
        client.close()


def test_a_committed_transaction_over_partitions_led_by_every_broker_is_read_once_and_an_aborted_one_never(
        cluster: KbrokerCluster) -> None:
    leaders = {leader_of(cluster, p) for p in range(PARTITIONS)}
    seen = read_after_commit_and_abort(cluster, transactional_producer(cluster, "commit-and-abort"), "txn", 30)
    assert len(leaders) == len(BROKER_IDS), "the topic's partitions are led by every broker"
    assert sorted(seen) == sorted(f"txn-committed-{i}".encode() for i in range(30))


def test_offsets_sent_to_a_transaction_are_committed_with_it_and_not_with_an_abort(cluster: KbrokerCluster) -> None:
    producer = transactional_producer(cluster, "consume-transform-produce")
    assert offsets_committed_with_transactions(cluster, producer, GROUP, 0, committed=5, aborted=9) == 5


def test_a_kill_9_of_the_coordinator_mid_transaction_lets_the_next_one_commit_it(cluster: KbrokerCluster) -> None:
    """The coordinator dies with the transaction Ongoing; its state partition's next leader loads the replicated state
    and takes the producer's EndTxn: every record of the transaction is read once, none of an aborted one."""
    transactional_id = "coordinator-dies"
    before = set(committed_values(cluster))
    producer = transactional_producer(cluster, transactional_id)
    producer.begin_transaction()
    produce_all(producer, [f"aborted-first-{i}".encode() for i in range(9)])
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    produce_all(producer, [f"survives-{i}".encode() for i in range(30)])
    coordinator = transaction_coordinator(cluster, transactional_id)
    assert coordinator in BROKER_IDS
    with killed(cluster, coordinator):
        new_coordinator(cluster, transactional_id, coordinator)
        retrying(lambda: producer.commit_transaction(TIMEOUT), "the commit through the new coordinator")
        seen = [v for v in committed_values(cluster) if v not in before]
        assert sorted(seen) == sorted(f"survives-{i}".encode() for i in range(30))


def test_a_new_producer_after_a_coordinator_kill_fences_the_old_one_and_aborts_its_transaction(
        cluster: KbrokerCluster) -> None:
    transactional_id = "zombie-after-failover"
    before = set(committed_values(cluster))
    zombie = transactional_producer(cluster, transactional_id)
    zombie.begin_transaction()
    produce_all(zombie, [f"zombie-{i}".encode() for i in range(12)])
    coordinator = transaction_coordinator(cluster, transactional_id)
    with killed(cluster, coordinator):
        new_coordinator(cluster, transactional_id, coordinator)
        successor = transactional_producer(cluster, transactional_id)  # aborts the zombie's open transaction
        successor.begin_transaction()
        produce_all(successor, [b"successor"])
        successor.commit_transaction(TIMEOUT)
        with pytest.raises(KafkaException) as refused:
            zombie.commit_transaction(TIMEOUT)
        assert refused.value.args[0].fatal() or refused.value.args[0].txn_requires_abort()
        seen = [v for v in committed_values(cluster) if v not in before]
        assert seen == [b"successor"]


def test_a_kill_9_of_a_partition_leader_mid_transaction_keeps_its_records_for_the_commit(
        cluster: KbrokerCluster) -> None:
    """A partition of the open transaction loses its leader (not the coordinator): the records acknowledged before
    the kill are on the new leader, the commit's marker goes there, and each record is read once."""
    transactional_id = "leader-dies"
    before = set(committed_values(cluster))
    producer = transactional_producer(cluster, transactional_id)
    coordinator = transaction_coordinator(cluster, transactional_id)
    victim = next(p for p in range(PARTITIONS) if leader_of(cluster, p) != coordinator)
    leader = leader_of(cluster, victim)
    producer.begin_transaction()
    produce_all(producer, [f"before-kill-{i}".encode() for i in range(30)])
    with killed(cluster, leader):
        wait_until(lambda: (found := cluster.agreed(victim, TOPIC)) and found[0] != leader,
                   f"a surviving broker leads {TOPIC}-{victim}", timeout=FAILOVER_S)
        produce_all(producer, [f"after-kill-{i}".encode() for i in range(30)])
        retrying(lambda: producer.commit_transaction(TIMEOUT), "the commit with a partition on its new leader")
        seen = [v for v in committed_values(cluster) if v not in before]
        expected = [f"before-kill-{i}".encode() for i in range(30)] + [f"after-kill-{i}".encode() for i in range(30)]
        assert sorted(seen) == sorted(expected)
