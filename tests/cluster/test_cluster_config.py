"""The cluster-mode properties in kbroker/config.py: Kafka 3.9's defaults and the checks its KafkaConfig makes.
(tests/cluster/test_zk_snapshot.py also compares these defaults with what a running Kafka 3.9 reports.)"""

from __future__ import annotations

import pytest

from kbroker.cluster.zk import ZkClient
from kbroker.config import ConfigError, build, property_type

KAFKA_3_9_DEFAULTS = {
    "zookeeper.connect": None, "zookeeper.session.timeout.ms": 18_000, "zookeeper.connection.timeout.ms": None,
    "broker.id": -1, "broker.id.generation.enable": True, "reserved.broker.max.id": 1000, "broker.rack": None,
    "default.replication.factor": 1, "min.insync.replicas": 1, "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3, "unclean.leader.election.enable": False,
    "replica.lag.time.max.ms": 30_000, "replica.fetch.min.bytes": 1, "replica.fetch.max.bytes": 1_048_576,
    "replica.fetch.wait.max.ms": 500, "replica.fetch.backoff.ms": 1000, "replica.fetch.response.max.bytes": 10_485_760,
    "num.replica.fetchers": 1, "replica.socket.timeout.ms": 30_000, "controlled.shutdown.enable": True,
    "controlled.shutdown.max.retries": 3, "controlled.shutdown.retry.backoff.ms": 5000,
    "auto.leader.rebalance.enable": True, "leader.imbalance.per.broker.percentage": 10,
    "leader.imbalance.check.interval.seconds": 300, "inter.broker.listener.name": None,
    "controller.socket.timeout.ms": 30_000, "delete.topic.enable": True,
}
CLUSTER = {"zookeeper.connect": "127.0.0.1:2181/kafka"}


def test_cluster_properties_default_to_kafka_3_9s():
    config = build({})
    assert {name: config[name] for name in KAFKA_3_9_DEFAULTS} == KAFKA_3_9_DEFAULTS


def test_cluster_property_types_are_kafkas():
    kinds = {name: property_type(name) for name in ("replica.lag.time.max.ms", "controlled.shutdown.retry.backoff.ms",
                                                    "leader.imbalance.check.interval.seconds",
                                                    "transaction.state.log.replication.factor",
                                                    "offsets.topic.replication.factor", "replica.fetch.wait.max.ms")}
    assert kinds == {"replica.lag.time.max.ms": "LONG", "controlled.shutdown.retry.backoff.ms": "LONG",
                     "leader.imbalance.check.interval.seconds": "LONG",
                     "transaction.state.log.replication.factor": "SHORT", "offsets.topic.replication.factor": "SHORT",
                     "replica.fetch.wait.max.ms": "INT"}


def test_without_zookeeper_connect_the_broker_is_a_single_node_with_id_0():
    config = build({})
    assert not config.cluster_mode and config.broker_id == 0


def test_a_cluster_broker_without_broker_id_waits_for_a_generated_one():
    config = build(CLUSTER)
    assert config.cluster_mode and config.broker_id == -1


def test_a_configured_broker_id_is_kept_in_cluster_mode():
    assert build({**CLUSTER, "broker.id": "7"}).broker_id == 7


def test_a_broker_id_above_reserved_broker_max_id_is_refused_in_cluster_mode():
    with pytest.raises(ConfigError, match=r"not greater than reserved\.broker\.max\.id"):
        build({**CLUSTER, "broker.id": "1001"})


def test_no_broker_id_without_id_generation_is_refused_in_cluster_mode():
    with pytest.raises(ConfigError, match=r"broker\.id must be greater than or equal to 0"):
        build({**CLUSTER, "broker.id.generation.enable": "false"})


def test_a_replica_fetch_wait_beyond_the_socket_timeout_is_refused():
    with pytest.raises(ConfigError, match=r"replica\.socket\.timeout\.ms should always be at least"):
        build({"replica.fetch.wait.max.ms": "40000"})


def test_a_replica_fetch_wait_beyond_the_lag_time_is_refused():
    with pytest.raises(ConfigError, match=r"should always be less than or equal to replica\.lag\.time\.max\.ms"):
        build({"replica.fetch.wait.max.ms": "20000", "replica.lag.time.max.ms": "10000"})


def test_the_inter_broker_listener_must_be_advertised_in_cluster_mode():
    with pytest.raises(ConfigError, match="valid options based on currently configured listeners are CLIENT"):
        build({**CLUSTER, "listeners": "CLIENT://127.0.0.1:9092"})


def test_the_inter_broker_listener_is_the_named_one():
    config = build({**CLUSTER, "listeners": "CLIENT://127.0.0.1:9092,internal://127.0.0.1:9093",
                    "inter.broker.listener.name": "internal"})
    assert config.inter_broker_listener == "INTERNAL"


def test_a_zookeeper_client_takes_connect_and_timeouts_from_the_config():
    client = ZkClient.from_config(build({**CLUSTER, "zookeeper.session.timeout.ms": "6000"}))
    assert (client.hosts, client.chroot, client.session_timeout_ms, client.connection_timeout_ms) == (
        "127.0.0.1:2181", "/kafka", 6000, 6000)
