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
from confluent_kafka import KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_wire_peer import WireClient
from kbroker_process import KbrokerCluster, KbrokerProcess, running_cluster
from waiting import wait_until

from kbroker.coordinator.hashing import partition_for as kafka_partition_for
from wire import messages

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2, 3)
TOPIC = "replicated"
SESSION_MS = 6000
TIMEOUT = 60
OFFSETS_PARTITIONS = 5
GROUP = "cluster-readers"


class Cluster(KbrokerCluster):
    """The module's cluster, TOPIC the default topic of its questions."""

    def partition(self, via: KbrokerProcess, index: int, name: str = TOPIC) -> tuple[int, tuple[int, ...]] | None:
        return super().partition(via, index, name)

    def agreed(self, index: int, name: str = TOPIC) -> tuple[int, tuple[int, ...]] | None:
        return super().agreed(index, name)


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    connect = f"{zookeeper_server.connect}/kbroker-cluster-{uuid.uuid4().hex[:8]}"
    overrides = {
        "zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
        "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "group.initial.rebalance.delay.ms": "0",
        "default.replication.factor": "3", "num.partitions": "2",
        "auto.leader.rebalance.enable": "false"}  # leaderships move only when a test moves them
    with running_cluster(connect, tmp_path_factory.mktemp("kbroker-cluster"), BROKER_IDS, overrides) as started:
        yield Cluster(started.brokers)


def produce(bootstrap: str, values: list[bytes], partition: int = 0, topic: str = TOPIC) -> list[int]:
    """acks=all, idempotent; the offsets acknowledged (raises on any failed delivery)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 0})
    acked: list[int] = []
    errors: list[object] = []

    def delivered(error, message) -> None:
        (errors.append(error) if error is not None else acked.append(message.offset()))

    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0, "records still undelivered"
    assert not errors, errors
    return sorted(acked)


def read_partition(bootstrap: str, partition: int, count: int, topic: str = TOPIC) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, partition)])
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
    return cluster.coordinator(GROUP)


def group_consumer(cluster: Cluster) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap().split(","), group_id=GROUP, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=2_000)


def committed(cluster: Cluster) -> dict[int, int]:
    """GROUP's committed offsets of TOPIC, partition -> offset, as OffsetFetch answers them."""
    client = kafka_admin(cluster)
    try:
        found = client.list_group_offsets({GROUP: None})[GROUP]
    finally:
        client.close()
    return {tp.partition: meta.offset for tp, meta in found.items() if tp.topic == TOPIC}


def test_a_consumer_group_commits_to_the_leader_of_its_offsets_partition_replicated_three_times(
        cluster: Cluster) -> None:
    consumer = group_consumer(cluster)
    try:
        consumer.subscribe([TOPIC])
        seen = [message for _, message in zip(range(50), consumer, strict=False)]
        assert len(seen) == 50, "the group's consumer read the topic"
        consumer.commit()
        position = consumer.position(TopicPartition(TOPIC, 0))  # the only partition with records
    finally:
        consumer.close()
    assert committed(cluster)[0] == position == seen[-1].offset + 1
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
    wait_until(lambda: group_coordinator(cluster) not in (coordinator, -1), "another broker coordinates the group",
               timeout=SESSION_MS / 1000 + TIMEOUT)
    assert committed(cluster) == before
    consumer = group_consumer(cluster)
    try:  # the group's next member starts where the commits say, and commits through the new coordinator
        partition = TopicPartition(TOPIC, 0)
        assert consumer.committed(partition) == before[0]
        consumer.assign([partition])
        consumer.commit({partition: OffsetAndMetadata(before[0] + 1, "", -1)})
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


def test_records_deleted_on_the_leader_stay_deleted_when_a_follower_takes_over(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    admin.create_topics([NewTopic("trimmed", num_partitions=1, replication_factor=3)])["trimmed"].result(TIMEOUT)
    wait_until(lambda: (cluster.agreed(0, "trimmed") or (None, ()))[1] == BROKER_IDS, "trimmed has three in sync")
    values = [f"trimmed-{i}".encode() for i in range(10)]
    assert produce(cluster.bootstrap(), values, topic="trimmed") == list(range(10))
    (deleted,) = admin.delete_records([ConfluentPartition("trimmed", 0, 6)], request_timeout=30).values()
    assert deleted.result(TIMEOUT).low_watermark == 6  # answered once every live replica starts at 6
    leader, _ = cluster.agreed(0, "trimmed")  # type: ignore[misc]
    cluster.brokers[leader].stop(signal.SIGKILL)
    wait_until(lambda: (found := cluster.agreed(0, "trimmed")) and found[0] != leader, "a follower leads trimmed",
               timeout=SESSION_MS / 1000 + TIMEOUT)
    assert read_partition(cluster.bootstrap(), 0, 4, topic="trimmed") == values[6:]
    cluster.brokers[leader].start()
    wait_until(lambda: (cluster.agreed(0, "trimmed") or (None, ()))[1] == BROKER_IDS, "the old leader is back in sync")


def produce_error(bootstrap: str, topic: str, value: bytes) -> object:
    """The delivery error of one record (None when it was acknowledged)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, "message.timeout.ms": 10000})
    errors: list[object] = []
    producer.produce(topic, value=value, on_delivery=lambda error, message: errors.append(error))
    producer.flush(TIMEOUT)
    return errors[0] if errors else "undelivered"


def test_a_topic_config_changed_through_any_broker_takes_effect_on_the_partitions_leader(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    admin.create_topics([NewTopic("limited", num_partitions=1, replication_factor=3)])["limited"].result(TIMEOUT)
    wait_until(lambda: cluster.agreed(0, "limited"), "limited has a leader")
    assert produce_error(cluster.bootstrap(), "limited", b"x" * 5000) is None
    leader, _ = cluster.agreed(0, "limited")  # type: ignore[misc]
    elsewhere = next(b for b in cluster.live() if b.broker_id != leader)  # so the leader learns it from ZooKeeper
    host, port = elsewhere.bootstrap.rsplit(":", 1)
    client = WireClient(host, int(port))
    try:
        IAC = messages.IncrementalAlterConfigsRequest
        answer = client.call(44, 1, IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
            resource_type=2, resource_name="limited", configs=[IAC.AlterableConfig(
                name="max.message.bytes", config_operation=0, value="1000")])])).body
    finally:
        client.close()
    assert [r.error_code for r in answer.responses] == [0]
    for broker in cluster.live():  # DescribeConfigs reads ZooKeeper on every broker, hosting the topic or not
        one_broker = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        (entries,) = [future.result(TIMEOUT) for future in
                      one_broker.describe_configs([ConfigResource("topic", "limited")]).values()]
        assert entries["max.message.bytes"].value == "1000"
    error = wait_until(lambda: produce_error(cluster.bootstrap(), "limited", b"x" * 5000),
                       "the leader applies the change notification")
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error


def kafka_admin(cluster: Cluster) -> KafkaAdminClient:
    """kafka-python's admin client: it sends ElectLeaders and the reassignment APIs to the controller."""
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap().split(","), request_timeout_ms=30_000)


def replicas_and_isr(cluster: Cluster, topic: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    found = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0}).list_topics(topic, timeout=5) \
        .topics[topic].partitions.get(0)
    return None if found is None else (tuple(sorted(found.replicas)), tuple(sorted(found.isrs)))


def test_a_partition_reassigned_to_other_brokers_moves_there_with_its_records(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    admin.create_topics([NewTopic("moving", num_partitions=1, replication_factor=-1,
                                  replica_assignment=[[1]])])["moving"].result(TIMEOUT)
    wait_until(lambda: cluster.agreed(0, "moving"), "moving has its leader")
    values = [f"moving-{i}".encode() for i in range(20)]
    assert produce(cluster.bootstrap(), values, topic="moving") == list(range(20))
    client = kafka_admin(cluster)
    try:
        assert client.alter_partition_reassignments({TopicPartition("moving", 0): [2, 3]}) == \
            {TopicPartition("moving", 0): None}
        wait_until(lambda: replicas_and_isr(cluster, "moving") == ((2, 3), (2, 3)), "moving lives on brokers 2 and 3",
                   timeout=TIMEOUT)
        wait_until(lambda: client.list_partition_reassignments() == {}, "no reassignment is left in progress")
    finally:
        client.close()
    assert read_partition(cluster.bootstrap(), 0, 20, topic="moving") == values


def test_a_preferred_election_gives_partitions_back_to_their_first_replica(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    admin.create_topics([NewTopic("preferring", num_partitions=1, replication_factor=-1,
                                  replica_assignment=[[1, 2, 3]])])["preferring"].result(TIMEOUT)
    wait_until(lambda: (cluster.agreed(0, "preferring") or (None, ()))[1] == BROKER_IDS, "preferring in sync")
    assert cluster.agreed(0, "preferring")[0] == 1
    cluster.brokers[1].stop(signal.SIGTERM)  # a controlled shutdown moves the leadership away
    cluster.brokers[1].start()
    wait_until(lambda: (cluster.agreed(0, "preferring") or (None, ()))[1] == BROKER_IDS,
               "broker 1 is back in the ISR of preferring")
    assert cluster.agreed(0, "preferring")[0] != 1  # auto.leader.rebalance.enable is off here
    client = kafka_admin(cluster)
    try:
        response = client.elect_leaders(0, {"preferring": [0]})
    finally:
        client.close()
    assert [(r[0], [tuple(p[:2]) for p in r[1]]) for r in response.replica_election_results] == \
        [("preferring", [(0, 0)])]
    wait_until(lambda: (cluster.agreed(0, "preferring") or (None,))[0] == 1, "broker 1 leads preferring again")
