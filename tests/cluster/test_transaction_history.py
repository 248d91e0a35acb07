"""Transactions keep their promise through kill -9s, proved over the full history: two confluent-kafka transactional
producers run transactions back to back (every third aborted) on three brokers while the coordinator of one of
their ids, a partition leader and the controller are killed in turn, each restarted once the producers commit
again without it. A read_committed consumer reads all along; at the end the whole topic is read again, and the
checker (compat-tests/transaction_history.py) finds every committed transaction's records once each and in order,
no aborted one's, an unknown one's whole or not at all, and everything the live reader saw still in place. The
same run on Apache Kafka 3.9 in ZooKeeper mode is the reference (a check that fails there is a wrong check).
This is the short version; bench/suites/cluster_transactions.py runs it for minutes."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KINDS, KbrokerCluster, running_cluster
from transaction_history import ROLES, run_history

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2, 3)
SESSION_MS = 6000
STATE_PARTITIONS = 5
TOPIC = "history"
PARTITIONS = 3
TRANSACTIONAL_IDS = ["history-a", "history-b"]


@pytest.fixture(scope="module", params=sorted(KINDS))
def cluster(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    import java_harness
    import kafka_process

    connect = f"{zookeeper_server.connect}/txn-history-{uuid.uuid4().hex[:8]}"
    overrides = {
        "zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
        "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
        "auto.leader.rebalance.enable": "false", "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
        # Kafka's defaults, which compat-tests' Kafka harness lowers to 1 for its single-node runs
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
    try:
        with running_cluster(connect, tmp_path_factory.mktemp(f"txn-history-{request.param}"), BROKER_IDS,
                             overrides, request.param) as started:
            admin = AdminClient({"bootstrap.servers": started.bootstrap(), "log_level": 0})
            admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                          config={"min.insync.replicas": "2"})])[TOPIC].result(60)
            yield started
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")


def test_committed_transactions_are_read_once_in_order_and_aborted_ones_never_through_a_kill_of_each_role(
        cluster: KbrokerCluster, record_property) -> None:
    history, verdict = run_history(cluster.brokers, TOPIC, PARTITIONS, STATE_PARTITIONS, TRANSACTIONAL_IDS,
                                   kills=len(ROLES), pause_s=0.02)
    record_property("kills", [(k.role, k.broker_id, round(k.stall_s, 1)) for k in history.nemesis.kills])
    record_property("outcomes", dict(verdict.outcomes))
    assert [k.role for k in history.nemesis.kills] == list(ROLES)
    assert verdict.violations == []
    assert verdict.outcomes["committed"] >= 20 and verdict.outcomes["aborted"] >= 10, verdict.outcomes
    assert verdict.live_records > 0, "the live read_committed consumer read nothing"
