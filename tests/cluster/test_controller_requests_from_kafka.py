"""What a real Kafka 3.9 controller (ZooKeeper mode) sends a broker, decoded with our specs, and how it answers
a broker's requests to it: the proof that wire/specs' inter-broker messages are Kafka's.

One Kafka 3.9 broker (id 1) becomes the controller; the test's WirePeer registers in /brokers/ids/2 as a second
broker, in Kafka's registration JSON. Topics with replicas on both make the controller send the peer
UpdateMetadata, LeaderAndIsr and StopReplica, and Kafka's replica fetcher follow the peer with Fetch; the peer,
as a broker, asks the controller for producer ids, an ISR change and a controlled shutdown. Every field checked
is compared with what Kafka wrote to ZooKeeper, so a wrong field, order or version fails here.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from wire import messages

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib

import kafka_process

pytestmark = pytest.mark.xdist_group("kafka-zk-controller-peer")  # one Kafka JVM: keep the module on one worker

KAFKA_ID, PEER_ID = 1, 2
TOPICS = {"mixed": [[2, 1], [1, 2]], "shrunk": [[2, 1]], "doomed": [[1, 2]]}
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN = 4, 5, 6, 7
FETCH, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS = 1, 56, 67
EPOCH_DURING_DELETE = -2  # the leader epoch a StopReplica carries for a topic being deleted
TIMEOUT = 60


@dataclass
class Cluster:
    kafka: kafka_process.KafkaProcess
    zk: KazooClient           # the peer's own session: its registration lives as long as this
    peer: peer_lib.WirePeer
    peer_epoch: int

    def broker_epoch(self, broker_id: int) -> int:
        return peer_lib.broker_epoch(self.zk, broker_id)

    def controller_epoch(self) -> int:
        return int(self.zk.get("/controller_epoch")[0])

    def topic_id(self, topic: str) -> uuid.UUID:
        text = json.loads(self.zk.get(f"/brokers/topics/{topic}")[0])["topic_id"]
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))

    def partition_state(self, topic: str, partition: int) -> tuple[dict, int]:
        data, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data), stat.version

    def call_controller(self, api_key: int, version: int, request) -> peer_lib.Frame:
        client = peer_lib.WireClient("127.0.0.1", self.kafka.port, client_id=f"broker-{PEER_ID}")
        try:
            return client.call(api_key, version, request)
        finally:
            client.close()

    def leader_and_isr_for(self, topic: str) -> peer_lib.Frame:
        return self.peer.wait_for(LEADER_AND_ISR, lambda body: any(t.topic_name == topic for t in body.topic_states))


def _start(kafka: kafka_process.KafkaProcess) -> kafka_process.KafkaProcess:
    try:
        return kafka.start()
    except kafka_process.KafkaUnavailable as error:
        kafka.stop()
        pytest.fail(f"cannot start Kafka 3.9: {error}", pytrace=False)
    except BaseException:
        kafka.stop()
        raise


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    chroot = f"/controller-peer-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper_server.connect)
    root.start(timeout=30)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    connect = zookeeper_server.connect + chroot
    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    try:
        kafka = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka-controller"), version="3.9",
                                           zookeeper=connect, node_id=KAFKA_ID)
        with peer_lib.WirePeer(forward_to=("127.0.0.1", kafka.port)) as peer:
            peer_epoch = peer_lib.register_broker(zk, PEER_ID, peer.port)
            _start(kafka)
            try:
                admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
                created = admin.create_topics([NewTopic(name, num_partitions=len(assignment),
                                                        replica_assignment=assignment)
                                               for name, assignment in TOPICS.items()])
                for future in created.values():
                    future.result(TIMEOUT)
                yield Cluster(kafka, zk, peer, peer_epoch)
            finally:
                kafka.stop()
    finally:
        zk.stop()
        zk.close()


def _by_id(live_brokers) -> dict[int, list[tuple[str, int, str, int]]]:
    return {b.id: [(e.host, e.port, e.listener, e.security_protocol) for e in b.endpoints] for b in live_brokers}


def test_update_metadata_lists_live_brokers_with_their_endpoints(cluster: Cluster) -> None:
    frame = cluster.peer.wait_for(UPDATE_METADATA, lambda body: len(body.live_brokers) == 2)
    body = frame.body
    assert frame.version == 8
    assert (body.controller_id, body.controller_epoch) == (KAFKA_ID, cluster.controller_epoch())
    assert body.broker_epoch == cluster.peer_epoch
    assert (body.is_k_raft_controller, body.type) == (False, 0)
    assert _by_id(body.live_brokers) == {
        KAFKA_ID: [("127.0.0.1", cluster.kafka.port, "PLAINTEXT", peer_lib.PLAINTEXT)],
        PEER_ID: [("127.0.0.1", cluster.peer.port, "PLAINTEXT", peer_lib.PLAINTEXT)],
    }
    assert all(b.rack is None for b in body.live_brokers)
    peer_lib.capture(frame, "request")


def test_leader_and_isr_for_a_new_topic_carries_its_id_leaders_isr_and_epochs(cluster: Cluster) -> None:
    frame = cluster.leader_and_isr_for("mixed")
    body = frame.body
    assert frame.version == 7
    assert (body.controller_id, body.controller_epoch, body.broker_epoch) == (
        KAFKA_ID, cluster.controller_epoch(), cluster.peer_epoch)
    (topic,) = [t for t in body.topic_states if t.topic_name == "mixed"]
    assert topic.topic_id == cluster.topic_id("mixed")
    states = {p.partition_index: p for p in topic.partition_states}
    assert sorted(states) == [0, 1]
    for index, replicas in enumerate(TOPICS["mixed"]):
        znode, version = cluster.partition_state("mixed", index)
        state = states[index]
        assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (
            znode["leader"], znode["leader_epoch"], znode["isr"], znode["controller_epoch"])
        assert (state.leader, state.isr, state.replicas) == (replicas[0], replicas, replicas)
        assert (state.partition_epoch, state.is_new, state.leader_recovery_state) == (version, True, 0)
        assert (state.adding_replicas, state.removing_replicas) == ([], [])
    assert {(leader.broker_id, leader.host_name, leader.port) for leader in body.live_leaders} == {
        (KAFKA_ID, "127.0.0.1", cluster.kafka.port), (PEER_ID, "127.0.0.1", cluster.peer.port)}
    peer_lib.capture(frame, "request")


def test_update_metadata_carries_the_new_topic_with_its_id(cluster: Cluster) -> None:
    frame = cluster.peer.wait_for(UPDATE_METADATA, lambda body: any(t.topic_name == "mixed"
                                                                      for t in body.topic_states))
    (topic,) = [t for t in frame.body.topic_states if t.topic_name == "mixed"]
    assert topic.topic_id == cluster.topic_id("mixed")
    states = {p.partition_index: p for p in topic.partition_states}
    for index, replicas in enumerate(TOPICS["mixed"]):
        state = states[index]
        assert (state.leader, state.leader_epoch, state.isr, state.replicas) == (replicas[0], 0, replicas, replicas)
        assert (state.zk_version, state.offline_replicas) == (cluster.partition_state("mixed", index)[1], [])
    peer_lib.capture(frame, "request")


def test_follower_fetch_names_its_replica_id_and_broker_epoch(cluster: Cluster) -> None:
    topic_id = cluster.topic_id("mixed")
    frame = cluster.peer.wait_for(FETCH, lambda body: any(t.topic_id == topic_id for t in body.topics))
    body = frame.body
    assert frame.version == 17
    assert body.replica_id == -1  # v15+ moved it into ReplicaState
    assert (body.replica_state.replica_id, body.replica_state.replica_epoch) == (
        KAFKA_ID, cluster.broker_epoch(KAFKA_ID))
    (topic,) = [t for t in body.topics if t.topic_id == topic_id]
    (partition,) = topic.partitions
    assert (topic.topic, partition.partition, partition.current_leader_epoch, partition.fetch_offset) == (
        "", 0, 0, 0)


def test_controller_allocates_producer_ids_to_a_broker(cluster: Cluster) -> None:
    request = messages.AllocateProducerIdsRequest(broker_id=PEER_ID, broker_epoch=cluster.peer_epoch)
    frame = cluster.call_controller(ALLOCATE_PRODUCER_IDS, 0, request)
    body = frame.body
    assert (body.error_code, body.throttle_time_ms) == (0, 0)
    block = json.loads(cluster.zk.get("/latest_producer_id_block")[0])
    assert block["broker"] == PEER_ID
    assert (int(block["block_start"]), int(block["block_end"])) == (
        body.producer_id_start, body.producer_id_start + body.producer_id_len - 1)
    peer_lib.capture(frame, "response")


def test_controller_accepts_an_isr_shrink_from_the_leader(cluster: Cluster) -> None:
    cluster.leader_and_isr_for("shrunk")
    _, version = cluster.partition_state("shrunk", 0)
    alter = messages.AlterPartitionRequest
    request = alter(broker_id=PEER_ID, broker_epoch=cluster.peer_epoch, topics=[alter.TopicData(
        topic_id=cluster.topic_id("shrunk"), partitions=[alter.PartitionData(
            partition_index=0, leader_epoch=0, partition_epoch=version, leader_recovery_state=0,
            new_isr_with_epochs=[alter.BrokerState(broker_id=PEER_ID, broker_epoch=cluster.peer_epoch)])])])
    frame = cluster.call_controller(ALTER_PARTITION, 3, request)
    assert frame.body.error_code == 0
    (topic,) = frame.body.topics
    (partition,) = topic.partitions
    assert topic.topic_id == cluster.topic_id("shrunk")
    assert (partition.partition_index, partition.error_code, partition.leader_id, partition.leader_epoch) == (
        0, 0, PEER_ID, 0)
    assert (partition.isr, partition.partition_epoch, partition.leader_recovery_state) == ([PEER_ID], version + 1, 0)
    znode, new_version = cluster.partition_state("shrunk", 0)
    assert (znode["isr"], new_version) == ([PEER_ID], version + 1)
    peer_lib.capture(frame, "response")


def test_stop_replica_deletes_the_replicas_of_a_deleted_topic(cluster: Cluster) -> None:
    cluster.leader_and_isr_for("doomed")
    admin = AdminClient({"bootstrap.servers": cluster.kafka.bootstrap, "log_level": 0})
    admin.delete_topics(["doomed"])["doomed"].result(TIMEOUT)

    def deletes_doomed(body) -> bool:
        return any(t.topic_name == "doomed" and all(p.delete_partition for p in t.partition_states)
                   for t in body.topic_states)

    frame = cluster.peer.wait_for(STOP_REPLICA, deletes_doomed)
    assert frame.version == 4
    assert (frame.body.controller_id, frame.body.broker_epoch) == (KAFKA_ID, cluster.peer_epoch)
    (topic,) = [t for t in frame.body.topic_states if t.topic_name == "doomed"]
    assert [(p.partition_index, p.leader_epoch) for p in topic.partition_states] == [(0, EPOCH_DURING_DELETE)]
    deadline = time.monotonic() + TIMEOUT  # our StopReplica answer lets the controller finish the deletion
    while cluster.zk.exists("/brokers/topics/doomed") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cluster.zk.exists("/brokers/topics/doomed")
    peer_lib.capture(frame, "request")


def test_controlled_shutdown_moves_leadership_off_the_broker(cluster: Cluster) -> None:
    """Last in the module: afterwards the controller treats the peer as shutting down."""
    cluster.leader_and_isr_for("mixed")
    request = messages.ControlledShutdownRequest(broker_id=PEER_ID, broker_epoch=cluster.peer_epoch)
    frame = cluster.call_controller(CONTROLLED_SHUTDOWN, 3, request)
    assert frame.body.error_code == 0
    znode, _ = cluster.partition_state("mixed", 0)
    assert (znode["leader"], znode["isr"]) == (KAFKA_ID, [KAFKA_ID])
    still_led = {(topic, 0) for topic in ("mixed", "shrunk")
                 if cluster.partition_state(topic, 0)[0]["leader"] == PEER_ID}
    assert {(p.topic_name, p.partition_index) for p in frame.body.remaining_partitions} == still_led
    peer_lib.capture(frame, "response")
