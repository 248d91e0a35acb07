"""`kbroker cluster`: one command starts a ZooKeeper (from Kafka 3.9's jars) and N kbroker brokers, prints the
bootstrap servers once the cluster formed, and stops everything on Ctrl-C (kbroker/local_cluster.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from waiting import wait_until

import maven_jars

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

ROOT = Path(__file__).resolve().parents[2]


def refuses_connections(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return True
    return False


def test_kbroker_cluster_starts_zookeeper_and_brokers_and_stops_them_all_on_ctrl_c(tmp_path: Path) -> None:
    jars = maven_jars.jars("kafka-3.9")[0].parent  # the jars a Kafka 3.9 distribution's libs/ holds
    command = subprocess.Popen([sys.executable, "-m", "kbroker.cli", "cluster", "--brokers", "2", "--zookeeper-jars",
                                str(jars), "--data-dir", str(tmp_path), "--base-port", "0"],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True)
    admin = producer = None
    try:
        bootstrap = command.stdout.readline().strip()  # once every broker registered and a controller is elected
        zookeeper = command.stdout.readline().strip()
        assert bootstrap.startswith("bootstrap.servers="), bootstrap
        servers = bootstrap.split("=", 1)[1]
        admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
        admin.create_topics([NewTopic("dev", num_partitions=2, replication_factor=2)])["dev"].result(60)
        producer = Producer({"bootstrap.servers": servers, "acks": "all", "log_level": 0})
        for i in range(5):
            producer.produce("dev", f"record-{i}".encode())
        assert producer.flush(60) == 0
        # consumer groups work on two brokers: __consumer_offsets gets replication factor 2, not Kafka's 3
        commit = [ConsumerGroupTopicPartitions("dev-group", [TopicPartition("dev", 0, 3)])]
        wait_until(lambda: admin.alter_consumer_group_offsets(commit)["dev-group"].result(10),
                   "the group's coordinator took the commit")
        (listed,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("dev-group")]).values()
        assert [(p.partition, p.offset) for p in listed.result(60).topic_partitions] == [(0, 3)]
    finally:
        admin = producer = None  # destroyed now, while their brokers still answer (librdkafka's destroy can wedge
        # on brokers gone away, and a garbage collection later would run it inside another test)
        command.send_signal(signal.SIGINT)
        code = command.wait(150)
    assert code == 0
    for address in [*servers.split(","), zookeeper.split("=", 1)[1]]:
        assert refuses_connections(address), f"{address} still listening after Ctrl-C"
