"""A kbroker broker joins a ZooKeeper-mode cluster whose controller is a real Kafka 3.9 broker.

Kafka broker 1 starts first and takes /controller; kbroker broker 2 (`python -m kbroker serve` with
zookeeper.connect) registers in the same chroot and from then on only does what Kafka's controller tells it
(LeaderAndIsr, UpdateMetadata, StopReplica) and what a Kafka broker does for its peers. Topic `rf2` has two
partitions with two replicas: Kafka leads 0 and kbroker follows it, kbroker leads 1 and Kafka follows it.
Every check reads what the other side did: Kafka's ISR in its Metadata, kbroker's copy through a Fetch to
kbroker, Kafka's copy through a Fetch to Kafka.

One Kafka JVM and one ZooKeeper for the module; kbroker is a subprocess so it can be stopped, paused and
killed as a real broker is.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kazoo.client import KazooClient

from kbroker.cluster.zk import decode_topic
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch, decode_batch, read_batch_header

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib
from kbroker_process import KbrokerProcess
from waiting import wait_until

import kafka_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]  # one cluster at a time

KAFKA_ID, KBROKER_ID = 1, 2
TOPIC = "rf2"
KAFKA_LED, KBROKER_LED = 0, 1  # partition 0: replicas [1, 2]; partition 1: replicas [2, 1]
LAG_MS = 3000                  # replica.lag.time.max.ms on both: how soon a silent follower leaves the ISR
KBROKER_SESSION_MS = 12000     # longer than a shrink takes, so pausing kbroker is lag, not a dead session
KAFKA_SESSION_MS = 20000       # the same for pausing Kafka (the controller and partition 1's follower)
TIMEOUT = 60


# --------------------------------------------------------------------------------------------------------
# reading what each broker holds
# --------------------------------------------------------------------------------------------------------

def partition_metadata(bootstrap: str, partition: int) -> tuple[int, list[int], list[int]] | None:
    """(leader, replicas, isr) of rf2-<partition> as the broker at `bootstrap` tells it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topic = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
    if topic is None or topic.error is not None or partition not in topic.partitions:
        return None
    found = topic.partitions[partition]
    return found.leader, list(found.replicas), sorted(found.isrs)


def read_partition(port: int, partition: int, start: int = 0) -> tuple[int, list[tuple[int, bytes | None, int]]]:
    """(high watermark, [(offset, value, batch leader epoch)]) of rf2-<partition> read from one broker with
    Fetch v12, as a consumer (a follower answers too, from v11)."""
    request = messages.FetchRequest
    client = peer_lib.WireClient("127.0.0.1", port)
    try:
        found: list[tuple[int, bytes | None, int]] = []
        offset, high_watermark = start, -1
        while True:
            body = request(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[request.FetchTopic(topic=TOPIC, partitions=[
                               request.FetchPartition(partition=partition, current_leader_epoch=-1,
                                                      fetch_offset=offset, last_fetched_epoch=-1,
                                                      log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
            data = client.call(1, 12, body).body.responses[0].partitions[0]
            if data.error_code:
                raise RuntimeError(f"fetch of {TOPIC}-{partition} from port {port}: error {data.error_code}")
            high_watermark = data.high_watermark
            records = bytes(data.records or b"")
            position, before = 0, len(found)
            while len(records) - position >= 61:
                header = read_batch_header(records, position)
                if header.size > len(records) - position:
                    break
                _, batch = decode_batch(records, position)
                found.extend((r.offset, r.value, header.partition_leader_epoch) for r in batch if r.offset >= offset)
                position += header.size
            if len(found) == before or found[-1][0] + 1 >= high_watermark:
                return high_watermark, found
            offset = found[-1][0] + 1
    finally:
        client.close()


def produce(bootstrap: str, partition: int, values: list[bytes], acks: str = "all") -> list[int]:
    """Produce with confluent-kafka; the offsets acknowledged (raises on any failed delivery)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
                         "linger.ms": 0, "message.timeout.ms": 30000, "log_level": 0})
    acked: list[int] = []
    errors: list[object] = []

    def delivered(error, message) -> None:
        if error is not None:
            errors.append(error)
        else:
            acked.append(message.offset())

    for value in values:
        producer.produce(TOPIC, value=value, partition=partition, on_delivery=delivered)
    producer.flush(45)
    assert not errors, errors
    assert len(acked) == len(values)
    return acked


@dataclass
class Cluster:
    kafka: kafka_process.KafkaProcess
    kbroker: KbrokerProcess
    zk: KazooClient

    @property
    def bootstrap(self) -> str:
        return f"{self.kafka.bootstrap},{self.kbroker.bootstrap}"

    def state(self, partition: int) -> dict:
        data, _ = self.zk.get(f"/brokers/topics/{TOPIC}/partitions/{partition}/state")
        return json.loads(data)

    def kafka_sees_isr(self, partition: int, isr: list[int]) -> bool:
        found = partition_metadata(self.kafka.bootstrap, partition)
        return found is not None and found[2] == isr


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    chroot = f"/kbroker-member-{uuid.uuid4().hex[:8]}"
    connect = zookeeper_server.connect + chroot
    zk = KazooClient(hosts=zookeeper_server.connect)
    zk.start(timeout=30)
    zk.ensure_path(chroot)
    zk.stop()
    zk.close()
    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    workdir = tmp_path_factory.mktemp("kbroker-member")
    kafka = kafka_process.KafkaProcess(workdir, version="3.9", zookeeper=connect, node_id=KAFKA_ID,
                                       overrides={"replica.lag.time.max.ms": str(LAG_MS),
                                                  "zookeeper.session.timeout.ms": str(KAFKA_SESSION_MS),
                                                  "auto.leader.rebalance.enable": "false"})
    kbroker = KbrokerProcess(workdir / "kbroker", connect, KBROKER_ID, {
        "zookeeper.session.timeout.ms": str(KBROKER_SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
        "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
        "offsets.topic.replication.factor": "1"})
    try:
        try:
            kafka.start()
        except kafka_process.KafkaUnavailable as error:
            pytest.fail(f"cannot start Kafka 3.9: {error}", pytrace=False)
        kbroker.start()
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
        wait_until(lambda: KBROKER_ID in admin.list_topics(timeout=5).brokers, "Kafka sees kbroker registered")
        assignment = [[KAFKA_ID, KBROKER_ID], [KBROKER_ID, KAFKA_ID]]
        futures = admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=-1,
                                                replica_assignment=assignment)])
        futures[TOPIC].result(30)
        for partition, leader in ((KAFKA_LED, KAFKA_ID), (KBROKER_LED, KBROKER_ID)):
            wait_until(lambda p=partition, b=leader: (partition_metadata(kafka.bootstrap, p) or (None,))[0] == b,
                       f"partition {partition} is led by broker {leader}")
        yield Cluster(kafka, kbroker, zk)
    finally:
        print("kbroker log:\n" + kbroker.log_tail(80))
        kbroker.stop(signal.SIGKILL)
        kafka.stop(signal.SIGKILL)
        zk.stop()
        zk.close()


# --------------------------------------------------------------------------------------------------------
# kbroker follows a Kafka leader, and leads a Kafka follower
# --------------------------------------------------------------------------------------------------------

def test_kbroker_follower_copies_the_kafka_leaders_records_with_their_offsets(cluster: Cluster) -> None:
    values = [f"from-kafka-{i}".encode() for i in range(20)]
    offsets = produce(cluster.kafka.bootstrap, KAFKA_LED, values)
    leader_hw, on_kafka = read_partition(cluster.kafka.port, KAFKA_LED)

    def copied() -> bool:
        high_watermark, on_kbroker = read_partition(cluster.kbroker.port, KAFKA_LED)
        return high_watermark == leader_hw and on_kbroker == on_kafka

    wait_until(copied, "kbroker's copy of partition 0 equals Kafka's, up to the same high watermark")
    assert [offset for offset, _, _ in on_kafka[-20:]] == offsets


def test_acks_all_to_the_kbroker_leader_waits_for_the_kafka_follower(cluster: Cluster) -> None:
    values = [f"from-kbroker-{i}".encode() for i in range(20)]
    offsets = produce(cluster.kbroker.bootstrap, KBROKER_LED, values)
    # acknowledged with acks=all while Kafka stays in the ISR: Kafka holds every record, at the same offsets (a
    # follower shows them to consumers once its next fetch brings it the leader's high watermark)
    assert partition_metadata(cluster.kafka.bootstrap, KBROKER_LED)[2] == [KAFKA_ID, KBROKER_ID]

    def on_kafka() -> list[bytes | None]:
        by_offset = {offset: value for offset, value, _ in read_partition(cluster.kafka.port, KBROKER_LED)[1]}
        return [by_offset.get(offset) for offset in offsets]

    wait_until(lambda: on_kafka() == values, "Kafka's follower copy shows the records", timeout=10)


def test_kafka_leader_keeps_kbroker_in_the_isr_while_it_fetches(cluster: Cluster) -> None:
    produce(cluster.kafka.bootstrap, KAFKA_LED, [b"tick"] * 5)
    time.sleep(LAG_MS * 2 / 1000)  # two lag periods: a follower that stopped fetching would be out by now
    assert partition_metadata(cluster.kafka.bootstrap, KAFKA_LED)[2] == [KAFKA_ID, KBROKER_ID]


def test_a_consumer_reads_both_partitions_through_kbroker(cluster: Cluster) -> None:
    sent = {partition: [f"read-{partition}-{i}".encode() for i in range(3)] for partition in (KAFKA_LED, KBROKER_LED)}
    for partition, values in sent.items():
        produce(cluster.bootstrap, partition, values)
    consumer = KafkaConsumer(bootstrap_servers=cluster.kbroker.bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=15000, auto_offset_reset="earliest")
    seen: dict[int, list[bytes]] = {KAFKA_LED: [], KBROKER_LED: []}
    try:
        consumer.assign([TopicPartition(TOPIC, KAFKA_LED), TopicPartition(TOPIC, KBROKER_LED)])
        consumer.seek_to_beginning()
        for message in consumer:
            seen[message.partition].append(message.value)
            if all(seen[p][-3:] == values for p, values in sent.items()):
                break
    finally:
        consumer.close()
    assert {p: seen[p][-3:] for p in sent} == sent


def test_metadata_from_kbroker_names_kafkas_controller_and_both_leaders(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kbroker.bootstrap, "log_level": 0})
    found = admin.list_topics(TOPIC, timeout=10)
    assert found.controller_id == KAFKA_ID
    assert sorted(found.brokers) == [KAFKA_ID, KBROKER_ID]
    assert found.brokers[KAFKA_ID].port == cluster.kafka.port
    partitions = found.topics[TOPIC].partitions
    assert (partitions[KAFKA_LED].leader, partitions[KAFKA_LED].replicas) == (KAFKA_ID, [KAFKA_ID, KBROKER_ID])
    assert (partitions[KBROKER_LED].leader, partitions[KBROKER_LED].replicas) == (KBROKER_ID, [KBROKER_ID, KAFKA_ID])


# --------------------------------------------------------------------------------------------------------
# the ISR follows kbroker's fetching
# --------------------------------------------------------------------------------------------------------

def test_kafka_leader_shrinks_the_isr_when_kbroker_stops_fetching_and_expands_it_when_it_catches_up(
        cluster: Cluster) -> None:
    cluster.kbroker.send(signal.SIGSTOP)
    try:
        produce(cluster.kafka.bootstrap, KAFKA_LED, [b"while-paused"] * 10, acks="1")
        wait_until(lambda: cluster.kafka_sees_isr(KAFKA_LED, [KAFKA_ID]), "Kafka drops paused kbroker from the ISR",
                   timeout=KBROKER_SESSION_MS / 1000 - 1)
        assert cluster.zk.exists(f"/brokers/ids/{KBROKER_ID}"), "kbroker's session expired: not a lag shrink"
    finally:
        cluster.kbroker.send(signal.SIGCONT)
    wait_until(lambda: cluster.kafka_sees_isr(KAFKA_LED, [KAFKA_ID, KBROKER_ID]),
               "kbroker catches up and Kafka takes it back into the ISR")


def test_kbroker_leader_shrinks_and_expands_the_isr_through_kafkas_controller(cluster: Cluster) -> None:
    before = cluster.state(KBROKER_LED)
    before_version = cluster.zk.exists(f"/brokers/topics/{TOPIC}/partitions/{KBROKER_LED}/state").version
    pause = cluster.kafka.process
    os.kill(pause.pid, signal.SIGSTOP)  # Kafka both follows partition 1 and is the controller
    try:
        produce(cluster.kbroker.bootstrap, KBROKER_LED, [b"while-kafka-paused"] * 10, acks="1")
        time.sleep(LAG_MS * 1.5 / 1000 + 1)  # kbroker's shrink check has found the follower lagging
    finally:
        os.kill(pause.pid, signal.SIGCONT)
    wait_until(lambda: sorted(cluster.state(KBROKER_LED)["isr"]) == [KAFKA_ID, KBROKER_ID]
               and cluster.zk.exists(f"/brokers/topics/{TOPIC}/partitions/{KBROKER_LED}/state").version
               >= before_version + 2, "kbroker's AlterPartition shrink, then expand, written by the controller")
    after = cluster.state(KBROKER_LED)
    # AlterPartition keeps the leader and its epoch: the changes came from kbroker, not from a controller election
    assert (after["leader"], after["leader_epoch"]) == (before["leader"], before["leader_epoch"]) == (KBROKER_ID,
                                                                                                      after["leader_epoch"])


# --------------------------------------------------------------------------------------------------------
# kill -9 and a diverged tail
# --------------------------------------------------------------------------------------------------------

def _segment(data: Path, partition: int) -> Path:
    return sorted((data / f"{TOPIC}-{partition}").glob("*.log"))[-1]


def test_restarted_kbroker_truncates_a_diverged_tail_and_rejoins_the_isr(cluster: Cluster) -> None:
    produce(cluster.kafka.bootstrap, KAFKA_LED, [b"before-kill"] * 3)
    leader_hw, _ = read_partition(cluster.kafka.port, KAFKA_LED)
    wait_until(lambda: read_partition(cluster.kbroker.port, KAFKA_LED)[0] == leader_hw, "kbroker caught up")
    epoch_seen = cluster.state(KAFKA_LED)["leader_epoch"]
    cluster.kbroker.stop(signal.SIGKILL)
    # a tail Kafka never had: records kbroker "wrote" at the epoch it last followed, past the leader's end
    tail = build_batch([Record(leader_hw + i, int(time.time() * 1000), None, b"diverged") for i in range(4)],
                       base_offset=leader_hw, partition_leader_epoch=epoch_seen)
    with open(_segment(cluster.kbroker.data, KAFKA_LED), "ab") as segment:
        segment.write(tail)
    # the controller takes the dead broker out of the ISR under a new leader epoch; then Kafka writes on
    wait_until(lambda: cluster.state(KAFKA_LED)["isr"] == [KAFKA_ID], "the controller drops dead kbroker",
               timeout=KBROKER_SESSION_MS / 1000 + 30)
    assert cluster.state(KAFKA_LED)["leader_epoch"] > epoch_seen
    produce(cluster.kafka.bootstrap, KAFKA_LED, [b"after-kill"] * 2)
    cluster.kbroker.start()
    wait_until(lambda: cluster.kafka_sees_isr(KAFKA_LED, [KAFKA_ID, KBROKER_ID]), "kbroker rejoins the ISR",
               timeout=TIMEOUT + KBROKER_SESSION_MS / 1000)
    leader_hw, on_kafka = read_partition(cluster.kafka.port, KAFKA_LED)
    wait_until(lambda: read_partition(cluster.kbroker.port, KAFKA_LED) == (leader_hw, on_kafka),
               "kbroker's copy equals Kafka's again")
    assert b"diverged" not in [value for _, value, _ in read_partition(cluster.kbroker.port, KAFKA_LED)[1]]


# --------------------------------------------------------------------------------------------------------
# cluster-mode APIs and a graceful stop
# --------------------------------------------------------------------------------------------------------

def test_kbroker_in_cluster_mode_advertises_the_controller_to_broker_apis(cluster: Cluster) -> None:
    client = peer_lib.WireClient("127.0.0.1", cluster.kbroker.port)
    try:
        answer = client.call(18, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1")).body
    finally:
        client.close()
    ranges = {v.api_key: (v.min_version, v.max_version) for v in answer.api_keys}
    assert (ranges[4], ranges[5], ranges[6]) == ((0, 7), (0, 4), (0, 8))  # as a Kafka 3.9 ZooKeeper-mode broker


def api_keys(port: int) -> set[int]:
    client = peer_lib.WireClient("127.0.0.1", port)
    try:
        answer = client.call(18, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1")).body
    finally:
        client.close()
    return {v.api_key for v in answer.api_keys}


def test_kbroker_in_cluster_mode_advertises_no_api_a_kafka_zookeeper_broker_lacks(cluster: Cluster) -> None:
    """An API Kafka's ZooKeeper-mode broker does not have (KRaft-only ones such as DescribeTopicPartitions) would
    send clients down a path that the cluster cannot answer as Kafka does."""
    assert api_keys(cluster.kbroker.port) - api_keys(cluster.kafka.port) == set()


def find_coordinator(port: int, group: str) -> tuple[int, int, int]:
    """(error, node id, port) FindCoordinator v3 answers for `group`."""
    client = peer_lib.WireClient("127.0.0.1", port)
    try:
        answer = client.call(10, 3, messages.FindCoordinatorRequest(key=group, key_type=0)).body
    finally:
        client.close()
    return answer.error_code, answer.node_id, answer.port


def test_kbroker_names_the_same_group_coordinator_as_kafka(cluster: Cluster) -> None:
    groups = [f"group-{i}" for i in range(6)]

    def from_kafka(group: str) -> tuple[int, int, int] | None:
        answer = find_coordinator(cluster.kafka.port, group)
        return answer if answer[0] == 0 else None  # COORDINATOR_NOT_AVAILABLE while Kafka creates the topic

    kafka_says = {g: wait_until(lambda g=g: from_kafka(g), f"Kafka names {g}'s coordinator") for g in groups}
    assert {node for _, node, _ in kafka_says.values()} == {KAFKA_ID, KBROKER_ID}  # both lead offsets partitions
    wait_until(lambda: all(find_coordinator(cluster.kbroker.port, g) == kafka_says[g] for g in groups),
               "kbroker's answers equal Kafka's")


def test_groups_coordinated_by_kbroker_and_by_kafka_both_keep_their_commits(cluster: Cluster) -> None:
    groups = [f"committer-{i}" for i in range(8)]
    coordinators = {g: wait_until(lambda g=g: (found := find_coordinator(cluster.kafka.port, g))[0] == 0 and found[1],
                                  f"Kafka names {g}'s coordinator") for g in groups}
    assert set(coordinators.values()) == {KAFKA_ID, KBROKER_ID}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    for index, group in enumerate(groups):
        wanted = [ConfluentPartition(TOPIC, KAFKA_LED, 10 + index), ConfluentPartition(TOPIC, KBROKER_LED, 20 + index)]
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result(TIMEOUT)
    for index, group in enumerate(groups):
        (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        found = {p.partition: p.offset for p in future.result(TIMEOUT).topic_partitions}
        assert found == {KAFKA_LED: 10 + index, KBROKER_LED: 20 + index}, (group, coordinators[group])


def test_kbroker_hands_out_producer_ids_from_a_block_kafkas_controller_allocated_to_it(cluster: Cluster) -> None:
    client = peer_lib.WireClient("127.0.0.1", cluster.kbroker.port)
    try:
        first, second = peer_lib.init_producer_id(client), peer_lib.init_producer_id(client)
    finally:
        client.close()
    block = json.loads(cluster.zk.get("/latest_producer_id_block")[0])  # written by Kafka's controller
    assert block["broker"] == KBROKER_ID
    assert int(block["block_start"]) <= first < second == first + 1 <= int(block["block_end"])


def test_kbroker_refuses_create_topics_when_it_is_not_the_controller(cluster: Cluster) -> None:
    client = peer_lib.WireClient("127.0.0.1", cluster.kbroker.port)
    try:
        refused = peer_lib.create_topic(client, "elsewhere", partitions=1, replication_factor=1)
    finally:
        client.close()
    # as a Kafka broker answers when kbroker is the controller: test_controller_with_kafka_brokers.py
    assert refused.error_code == ErrorCode.NOT_CONTROLLER
    assert not cluster.zk.exists("/brokers/topics/elsewhere")


def controller_requests(cluster: Cluster, broker_id: int, broker_epoch: int, controller_epoch: int) -> dict:
    """LeaderAndIsr v7, StopReplica v4 and UpdateMetadata v8 for partition 0 as the controller would send them,
    with the epochs given (stale ones are refused before anything is applied)."""
    L, S, U = messages.LeaderAndIsrRequest, messages.StopReplicaRequest, messages.UpdateMetadataRequest
    state = cluster.state(KAFKA_LED)
    topic_id = decode_topic(TOPIC, cluster.zk.get(f"/brokers/topics/{TOPIC}")[0]).topic_id
    leader_and_isr = L(controller_id=KAFKA_ID, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
                       topic_states=[L.LeaderAndIsrTopicState(topic_name=TOPIC, topic_id=topic_id, partition_states=[
                           L.LeaderAndIsrPartitionState(partition_index=KAFKA_LED, controller_epoch=controller_epoch,
                                                        leader=state["leader"], leader_epoch=state["leader_epoch"] + 5,
                                                        isr=state["isr"], partition_epoch=99,
                                                        replicas=[KAFKA_ID, KBROKER_ID], is_new=False)])],
                       live_leaders=[])
    stop_replica = S(controller_id=KAFKA_ID, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                     topic_states=[S.StopReplicaTopicState(topic_name=TOPIC, partition_states=[
                         S.StopReplicaPartitionState(partition_index=KAFKA_LED, leader_epoch=-1,
                                                     delete_partition=False)])])
    update_metadata = U(controller_id=KAFKA_ID, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                        type=0, topic_states=[], live_brokers=[])
    return {4: (7, leader_and_isr), 5: (4, stop_replica), 6: (8, update_metadata)}


def answers(port: int, requests: dict) -> dict:
    client = peer_lib.WireClient("127.0.0.1", port)
    try:
        return {key: client.call(key, version, body).body.to_dict() for key, (version, body) in requests.items()}
    finally:
        client.close()


@pytest.mark.parametrize("stale", ["broker epoch", "controller epoch"])
def test_kbroker_refuses_stale_controller_requests_as_kafka_does(cluster: Cluster, stale: str) -> None:
    controller_epoch = int(cluster.zk.get("/controller_epoch")[0])
    found = {}
    for broker_id, port in ((KAFKA_ID, cluster.kafka.port), (KBROKER_ID, cluster.kbroker.port)):
        epoch = cluster.zk.exists(f"/brokers/ids/{broker_id}").czxid
        requests = controller_requests(cluster, broker_id, epoch - 1 if stale == "broker epoch" else epoch,
                                       controller_epoch - 1 if stale == "controller epoch" else controller_epoch)
        found[broker_id] = answers(port, requests)
    assert found[KBROKER_ID] == found[KAFKA_ID]
    assert found[KBROKER_ID][6]["error_code"] != 0


def test_sigterm_makes_kbroker_ask_kafkas_controller_for_a_controlled_shutdown(cluster: Cluster) -> None:
    assert cluster.kbroker.stop(signal.SIGTERM) == 0
    assert "controlled shutdown succeeded" in cluster.kbroker.log_tail(200)
    assert not cluster.zk.exists(f"/brokers/ids/{KBROKER_ID}")
