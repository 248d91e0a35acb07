"""Three kbroker brokers and nothing else, over a real ZooKeeper: one of them becomes the controller, and the
cluster replicates, keeps acknowledged records through a kill -9 of their leader, and takes the killed broker
back into the ISR. Each broker is a `kbroker serve` subprocess, driven by stock clients only."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kbroker_process import KbrokerProcess
from waiting import wait_until

from kbroker.coordinator.hashing import partition_for as kafka_partition_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2, 3)
TOPIC = "replicated"
SESSION_MS = 6000
TIMEOUT = 60
OFFSETS_PARTITIONS = 5
GROUP = "cluster-readers"


class Cluster:
    def __init__(self, brokers: dict[int, KbrokerProcess]) -> None:
        self.brokers = brokers

    def live(self) -> list[KbrokerProcess]:
        return [b for b in self.brokers.values() if b.process is not None]

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live())

    def knows_everyone(self, via: KbrokerProcess) -> bool:
        metadata = AdminClient({"bootstrap.servers": via.bootstrap, "log_level": 0}).list_topics(timeout=5)
        return metadata.controller_id in BROKER_IDS and sorted(metadata.brokers) == list(BROKER_IDS)

    def partition(self, via: KbrokerProcess, index: int) -> tuple[int, tuple[int, ...]] | None:
        """(leader, sorted ISR) of TOPIC-index as the broker `via` tells it in Metadata."""
        topic = AdminClient({"bootstrap.servers": via.bootstrap, "log_level": 0}).list_topics(TOPIC, timeout=5) \
            .topics.get(TOPIC)
        if topic is None or topic.error is not None or index not in topic.partitions:
            return None
        found = topic.partitions[index]
        return found.leader, tuple(sorted(found.isrs))

    def agreed(self, index: int) -> tuple[int, tuple[int, ...]] | None:
        """The partition's (leader, ISR) once every live broker tells the same, with a leader."""
        seen = {self.partition(b, index) for b in self.live()}
        if len(seen) != 1:
            return None
        (found,) = seen
        return found if found is not None and found[0] >= 0 else None


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    connect = f"{zookeeper_server.connect}/kbroker-cluster-{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("kbroker-cluster")
    brokers = {i: KbrokerProcess(workdir / f"broker-{i}", connect, i, {
        "zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
        "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "group.initial.rebalance.delay.ms": "0",
        "default.replication.factor": "3", "num.partitions": "2"})
        for i in BROKER_IDS}
    zk = KazooClient(hosts=connect)
    try:
        for broker in brokers.values():
            broker.start()
        zk.start(timeout=30)
        wait_until(lambda: sorted(map(int, zk.get_children("/brokers/ids"))) == list(BROKER_IDS),
                   "all three brokers registered")
        cluster = Cluster(brokers)
        wait_until(lambda: all(cluster.knows_everyone(b) for b in brokers.values()),
                   "every broker's Metadata names the controller and all three brokers")
        yield cluster
    finally:
        for broker in brokers.values():
            print(f"broker {broker.broker_id} log:\n{broker.log_tail(60)}")
            broker.stop(signal.SIGKILL)
        zk.stop()
        zk.close()


def produce(bootstrap: str, values: list[bytes], partition: int = 0) -> list[int]:
    """acks=all, idempotent; the offsets acknowledged (raises on any failed delivery)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 0})
    acked: list[int] = []
    errors: list[object] = []

    def delivered(error, message) -> None:
        (errors.append(error) if error is not None else acked.append(message.offset()))

    for value in values:
        producer.produce(TOPIC, value=value, partition=partition, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0, "records still undelivered"
    assert not errors, errors
    return sorted(acked)


def read_partition(bootstrap: str, partition: int, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(TOPIC, partition)])
        return [message.value for _, message in zip(range(count), consumer, strict=False)]
    finally:
        consumer.close()


def test_a_topic_created_with_the_admin_client_gets_three_in_sync_replicas(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)])[TOPIC].result(TIMEOUT)
    for index in range(3):
        wait_until(lambda i=index: (cluster.agreed(i) or (None, ()))[1] == BROKER_IDS,
                   f"partition {index} has all three brokers in its ISR")


def test_records_acknowledged_with_acks_all_survive_a_kill_9_of_their_leader(cluster: Cluster) -> None:
    values = [f"record-{i}".encode() for i in range(200)]
    acked = produce(cluster.bootstrap(), values)
    assert acked == list(range(acked[0], acked[0] + len(values)))
    leader, isr = cluster.agreed(0)  # type: ignore[misc]
    assert isr == BROKER_IDS
    cluster.brokers[leader].stop(signal.SIGKILL)
    moved = wait_until(lambda: (found := cluster.agreed(0)) and found[0] != leader and found,
                       "a surviving broker leads partition 0", timeout=SESSION_MS / 1000 + TIMEOUT)
    assert moved[0] in isr
    assert read_partition(cluster.bootstrap(), 0, acked[-1] + 1)[acked[0]:] == values
    assert produce(cluster.bootstrap(), [b"after the kill"])  # the new leader takes writes


def test_the_killed_broker_restarts_and_rejoins_every_isr(cluster: Cluster) -> None:
    (killed,) = [b for b in cluster.brokers.values() if b.process is None]
    killed.start()
    for index in range(3):
        wait_until(lambda i=index: (cluster.agreed(i) or (None, ()))[1] == BROKER_IDS,
                   f"partition {index} has the restarted broker back in its ISR")


def group_coordinator(cluster: Cluster) -> int:
    """The broker FindCoordinator names for GROUP (librdkafka asks it for DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    (described,) = admin.describe_consumer_groups([GROUP], request_timeout=10).values()
    return described.result(TIMEOUT).coordinator.id


def committed(cluster: Cluster) -> dict[int, int]:
    """GROUP's committed offsets of TOPIC, partition -> offset, as OffsetFetch answers them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)],
                                                  request_timeout=10).values()
    return {p.partition: p.offset for p in future.result(TIMEOUT).topic_partitions if p.topic == TOPIC}


def test_a_consumer_group_commits_to_the_leader_of_its_offsets_partition_replicated_three_times(
        cluster: Cluster) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = TIMEOUT
        while seen < 50 and deadline > 0:
            message = consumer.poll(1)
            deadline -= 1
            if message is not None and message.error() is None:
                seen += 1
        assert seen == 50, "the group's consumer read the topic"
        consumer.commit(asynchronous=False)
        positions = {p.partition: p.offset for p in consumer.position(consumer.assignment())}
    finally:
        consumer.close()
    assert committed(cluster) == {p: o for p, o in positions.items() if o >= 0}
    offsets = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0}) \
        .list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert len(offsets.partitions) == OFFSETS_PARTITIONS
    assert {tuple(sorted(p.replicas)) for p in offsets.partitions.values()} == {BROKER_IDS}
    leader_of_group = offsets.partitions[kafka_partition_for(GROUP, OFFSETS_PARTITIONS)].leader
    assert group_coordinator(cluster) == leader_of_group


def test_committed_offsets_survive_a_kill_9_of_the_group_coordinator(cluster: Cluster) -> None:
    before = committed(cluster)
    assert before, "the previous test committed offsets"
    coordinator = group_coordinator(cluster)
    cluster.brokers[coordinator].stop(signal.SIGKILL)
    wait_until(lambda: group_coordinator(cluster) != coordinator, "another broker coordinates the group",
               timeout=SESSION_MS / 1000 + TIMEOUT)
    assert committed(cluster) == before
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": GROUP, "auto.offset.reset": "latest",
                         "enable.auto.commit": False, "log_level": 0})
    try:  # the group's next member starts where the commits say, and commits through the new coordinator
        consumer.subscribe([TOPIC])
        wait_until(lambda: (consumer.poll(0.5), len(consumer.assignment()) == 3)[1], "the consumer joined")
        assert {p.partition: p.offset for p in consumer.committed(consumer.assignment(), timeout=10)
                if p.offset >= 0} == before
        consumer.commit(offsets=[ConfluentPartition(TOPIC, 0, before[0] + 1)], asynchronous=False)
    finally:
        consumer.close()
    assert committed(cluster)[0] == before[0] + 1
    cluster.brokers[coordinator].start()
    for index in range(3):
        wait_until(lambda i=index: (cluster.agreed(i) or (None, ()))[1] == BROKER_IDS,
                   f"partition {index} has the restarted broker back in its ISR")


def test_producing_to_an_unknown_topic_creates_it_with_the_clusters_defaults(cluster: Cluster) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "log_level": 0})
    producer.produce("made-by-a-producer", value=b"first")
    assert producer.flush(TIMEOUT) == 0  # Metadata created it (LEADER_NOT_AVAILABLE meanwhile), then acks=all
    topic = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0}) \
        .list_topics("made-by-a-producer", timeout=10).topics["made-by-a-producer"]
    assert sorted(topic.partitions) == [0, 1]  # num.partitions
    assert {tuple(sorted(p.replicas)) for p in topic.partitions.values()} == {BROKER_IDS}  # default.replication.factor
