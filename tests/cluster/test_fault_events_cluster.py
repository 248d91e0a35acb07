"""The real cluster event behind the fault endpoint: POST /events/move-leadership moves a partition's leadership to
another in-sync replica through the controller (AlterPartitionReassignments, then a PREFERRED ElectLeaders), as an
operator would. Two `kbroker serve` brokers over the session's real ZooKeeper, each with its kbroker.faults.port;
the move is asked of the broker that is NOT the controller, so it goes over the Kafka protocol."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KbrokerProcess, running_cluster
from waiting import wait_until

from kbroker.net.one_request import call
from kbroker.testing import free_port
from wire import messages

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2)
TIMEOUT = 60
RECORDS_AROUND_THE_MOVE = 1000  # sent before the move starts, and again after it ends


class FaultyBroker:
    """A cluster broker and its fault endpoint."""

    def __init__(self, process: KbrokerProcess, faults_port: int) -> None:
        self.process, self.faults_port = process, faults_port
        self.broker_id = process.broker_id

    def event(self, name: str, arguments: dict) -> tuple[int, object]:
        """POST /events/<name>: (HTTP status, decoded JSON answer)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.faults_port}/events/{name}",
                                         data=json.dumps(arguments).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def partition_state(self, topic: str, partition: int = 0):
        """The partition as this broker's Metadata (v9, with the leader epoch) tells it."""
        host, port = self.process.bootstrap.rsplit(":", 1)
        request = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False)
        answer = call(host, int(port), 3, 9, request, "test-fault-events", 10)
        (found,) = [p for t in answer.topics if t.name == topic for p in t.partitions if p.partition_index == partition]
        return found

    def controller_id(self) -> int:
        host, port = self.process.bootstrap.rsplit(":", 1)
        return call(host, int(port), 3, 9, messages.MetadataRequest(topics=[]), "test-fault-events", 10).controller_id


@pytest.fixture(scope="module")
def brokers(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, FaultyBroker]]:
    connect = f"{zookeeper_server.connect}/kbroker-fault-events-{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("kbroker-fault-events-cluster")
    overrides = {"replica.fetch.backoff.ms": "200", "offsets.topic.num.partitions": "1",
                 "auto.leader.rebalance.enable": "false"}  # else the controller could move leaders back by itself
    ports = {i: free_port() for i in BROKER_IDS}
    with running_cluster(connect, workdir, BROKER_IDS,
                         lambda i: {**overrides, "kbroker.faults.port": str(ports[i])}) as cluster:
        yield {i: FaultyBroker(cluster.brokers[i], ports[i]) for i in BROKER_IDS}


def controller_and_other(brokers: dict[int, FaultyBroker]) -> tuple[FaultyBroker, FaultyBroker]:
    controller_id = brokers[BROKER_IDS[0]].controller_id()
    (other,) = [b for b in brokers.values() if b.broker_id != controller_id]
    return brokers[controller_id], other


def bootstrap(brokers: dict[int, FaultyBroker]) -> str:
    return ",".join(b.process.bootstrap for b in brokers.values())


def create_in_sync_topic(brokers: dict[int, FaultyBroker], replicas: list[int]) -> str:
    """A one-partition topic on `replicas` (the first leads), returned once every replica is in sync."""
    name = f"moved-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers), "log_level": 0})
    created = NewTopic(name, num_partitions=1, replication_factor=-1, replica_assignment=[replicas])
    admin.create_topics([created])[name].result(TIMEOUT)
    for broker in brokers.values():
        wait_until(lambda b=broker: sorted(b.partition_state(name).isr_nodes) == sorted(replicas),
                   f"broker {broker.broker_id} sees every replica of {name} in sync", TIMEOUT)
    return name


def leader_named_by_metadata(brokers: dict[int, FaultyBroker], topic: str) -> int:
    found = AdminClient({"bootstrap.servers": bootstrap(brokers), "log_level": 0}).list_topics(topic, timeout=10)
    return found.topics[topic].partitions[0].leader


def test_moving_leadership_makes_metadata_name_the_other_replica_with_a_higher_leader_epoch(
        brokers: dict[int, FaultyBroker]) -> None:
    controller, other = controller_and_other(brokers)
    topic = create_in_sync_topic(brokers, [controller.broker_id, other.broker_id])
    epoch_before = controller.partition_state(topic).leader_epoch

    status, answer = other.event("move-leadership", {"topic": topic, "partition": 0})

    assert (status, answer) == (200, {"result": {"0": other.broker_id}})
    assert leader_named_by_metadata(brokers, topic) == other.broker_id
    moved = other.partition_state(topic)  # the broker that asked shows the move when the call returns
    assert moved.leader_id == other.broker_id
    assert moved.leader_epoch > epoch_before
    assert sorted(moved.replica_nodes) == sorted([controller.broker_id, other.broker_id])  # the same replica set


def test_an_idempotent_producer_loses_and_duplicates_nothing_across_a_leadership_move(
        brokers: dict[int, FaultyBroker]) -> None:
    controller, other = controller_and_other(brokers)
    topic = create_in_sync_topic(brokers, [other.broker_id, controller.broker_id])
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "enable.idempotence": True, "linger.ms": 2,
                         "log_level": 0})
    answers: list[tuple[int, object]] = []
    mover = threading.Thread(target=lambda: answers.append(
        controller.event("move-leadership", {"topic": topic, "partition": 0})))

    sent, failures = send_across(producer, topic, mover)

    assert producer.flush(TIMEOUT) == 0
    assert answers == [(200, {"result": {"0": controller.broker_id}})]
    assert failures == []
    assert read_all(brokers, topic) == [str(value).encode() for value in range(sent)]


def send_across(producer: Producer, topic: str, mover: threading.Thread) -> tuple[int, list[KafkaError]]:
    """Records "0", "1"... to partition 0 before, while and after `mover` runs (RECORDS_AROUND_THE_MOVE before it
    starts and after it ends): (how many were sent, the delivery errors)."""
    failures: list[KafkaError] = []
    sent, after_the_move = 0, 0
    deadline = time.monotonic() + TIMEOUT
    while after_the_move < RECORDS_AROUND_THE_MOVE and time.monotonic() < deadline:
        if sent == RECORDS_AROUND_THE_MOVE:
            mover.start()
        producer.produce(topic, str(sent).encode(), partition=0,
                         on_delivery=lambda error, _: failures.append(error) if error else None)
        producer.poll(0)
        sent += 1
        if sent > RECORDS_AROUND_THE_MOVE and not mover.is_alive():
            after_the_move += 1
        time.sleep(0.001)
    mover.join(TIMEOUT)
    assert after_the_move == RECORDS_AROUND_THE_MOVE, "the move did not end in time"
    return sent, failures


def read_all(brokers: dict[int, FaultyBroker], topic: str) -> list[bytes]:
    """Every record of partition 0 from the start to its end, in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False, "log_level": 0})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(values) < end and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_moving_leadership_without_another_in_sync_replica_is_refused_with_the_reason(
        brokers: dict[int, FaultyBroker]) -> None:
    controller, other = controller_and_other(brokers)
    topic = create_in_sync_topic(brokers, [other.broker_id])

    status, answer = controller.event("move-leadership", {"topic": topic, "partition": 0})

    assert status == 400
    assert "no other in-sync replica" in answer["error"]
    assert leader_named_by_metadata(brokers, topic) == other.broker_id
