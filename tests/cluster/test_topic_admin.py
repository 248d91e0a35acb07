"""The topic APIs on a kbroker-only cluster over a real ZooKeeper (kbroker/cluster/topic_admin.py): one kbroker
broker that is also the controller. Against Kafka brokers: test_controller_with_kafka_brokers.py."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from wire.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib
from controller_node import ControllerNode

BROKER_ID = 1


@pytest.fixture(scope="module")
def node(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerNode]:
    connect = f"{zookeeper_server.connect}/topic-admin-{uuid.uuid4().hex[:8]}"
    started = ControllerNode(tmp_path_factory.mktemp("topic-admin"), connect, BROKER_ID, listener="PLAINTEXT")
    started.start()
    try:
        deadline = time.monotonic() + 60
        # placement counts the brokers the controller's UpdateMetadata told this broker of, as Kafka's metadata cache
        while not (started.is_active() and started.running.member.metadata.alive_brokers()):
            assert time.monotonic() < deadline, "kbroker did not become the controller and learn of itself"
            time.sleep(0.1)
        yield started
    finally:
        started.stop()


@pytest.fixture
def client(node: ControllerNode) -> Iterator[peer_lib.WireClient]:
    connection = peer_lib.WireClient("127.0.0.1", node.running.port)
    try:
        yield connection
    finally:
        connection.close()


def test_a_replication_factor_above_the_live_brokers_is_refused_as_kafka_words_it(client) -> None:
    result = peer_lib.create_topic(client, "too-many", partitions=1, replication_factor=2)
    assert (result.error_code, result.error_message) == \
        (ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor: 2 larger than available brokers: 1.")


def test_a_zero_timeout_answers_request_timed_out_but_the_topic_is_still_created(node, client) -> None:
    result = peer_lib.create_topic(client, "no-wait", partitions=2, replication_factor=1, timeout_ms=0)
    assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert node.zk.topic_assignment("no-wait") is not None


def test_records_go_through_a_topic_created_on_a_kbroker_only_cluster(node, client) -> None:
    assert peer_lib.create_topic(client, "through", partitions=1, replication_factor=1).error_code == 0
    bootstrap = f"127.0.0.1:{node.running.port}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for i in range(10):
        producer.produce("through", f"record-{i}".encode())
    assert producer.flush(30) == 0
    # no group: group coordination in cluster mode is still to come (the notes)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition("through", 0)])
        values = [message.value for _, message in zip(range(10), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"record-{i}".encode() for i in range(10)]


def test_a_deleted_topic_can_be_created_again_under_its_name(node, client) -> None:
    assert peer_lib.create_topic(client, "reborn", partitions=1, replication_factor=1).error_code == 0
    assert peer_lib.delete_topic(client, "reborn").error_code == 0
    deadline = time.monotonic() + 30
    while node.zk.exists("/brokers/topics/reborn") or node.zk.exists("/admin/delete_topics/reborn"):  # Kafka's last
        assert time.monotonic() < deadline, "the deletion did not finish"
        time.sleep(0.1)
    # a new topic id: the broker must not hold on to the old one (INCONSISTENT_TOPIC_ID, never a leader)
    again = peer_lib.create_topic(client, "reborn", partitions=1, replication_factor=1)
    assert again.error_code == 0
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{node.running.port}", "acks": "all", "log_level": 0})
    producer.produce("reborn", b"second life")
    assert producer.flush(30) == 0
