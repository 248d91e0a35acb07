"""What a real Kafka 3.9 broker (ZooKeeper mode) sends its controller, and how it answers the controller, when
the controller is the test's WirePeer speaking only through our specs.

The peer takes /controller (with /controller_epoch) and registers as broker 2 before Kafka's broker 1 starts,
so broker 1 never becomes controller. When broker 1 registers, the peer sends it UpdateMetadata (naming itself
controller) and LeaderAndIsr (broker 1 leads `led` with the peer as a follower that never fetches). Broker 1 then
comes to the peer for producer ids (an idempotent producer), for an ISR shrink once the silent follower passes
replica.lag.time.max.ms, and for a controlled shutdown on SIGTERM; the peer's answers must be right for broker 1
to carry on (the produce completes, the ids are the peer's block, the broker stops without being killed).

Not provoked here: OffsetForLeaderEpoch from a follower. At inter.broker.protocol.version 3.9 a Kafka follower
truncates through the diverging epoch in Fetch responses (KIP-595's truncation on fetch) and sends
OffsetForLeaderEpoch only at older protocol versions; the request is kafka-python's spec, which covers v2-v4.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from wire import messages

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib

import kafka_process

pytestmark = pytest.mark.xdist_group("kafka-zk-broker-peer")  # one Kafka JVM: keep the module on one worker

KAFKA_ID, PEER_ID, CONTROLLER_EPOCH = 1, 2, 1
LED, GONE = "led", "gone"  # broker 1 leads both; the peer follows `led` (and never fetches)
LEADER_EPOCH, PARTITION_EPOCH = 5, 7  # not Kafka's starting values, so echoes of them are telling
BLOCK_START, BLOCK_LEN = 5000, 1000
LAG_MS = 2000  # replica.lag.time.max.ms: how soon the silent follower leaves the ISR
STOP_REPLICA, UPDATE_METADATA, LEADER_AND_ISR, CONTROLLED_SHUTDOWN = 5, 6, 4, 7
INIT_PRODUCER_ID, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS = 22, 56, 67
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_EPOCH = -1
TIMEOUT = 60


# ---------------------------------------------------------------------------------------------------------
# The peer's answers as controller
# ---------------------------------------------------------------------------------------------------------

def allocate_block(frame: peer_lib.Frame) -> messages.AllocateProducerIdsResponse:
    return messages.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=BLOCK_START,
                                                producer_id_len=BLOCK_LEN)


def accept_isr_change(frame: peer_lib.Frame) -> messages.AlterPartitionResponse:
    """Take the ISR the leader asks for and bump the partition epoch, as a controller that agrees does."""
    response = messages.AlterPartitionResponse
    request = frame.body

    def isr(p) -> list[int]:
        return [b.broker_id for b in p.new_isr_with_epochs] if frame.version >= 3 else list(p.new_isr)

    return response(throttle_time_ms=0, error_code=0, topics=[response.TopicData(
        topic_name=topic.topic_name, topic_id=topic.topic_id,
        partitions=[response.PartitionData(
            partition_index=p.partition_index, error_code=0, leader_id=request.broker_id,
            leader_epoch=p.leader_epoch, isr=isr(p), leader_recovery_state=p.leader_recovery_state,
            partition_epoch=p.partition_epoch + 1) for p in topic.partitions])
        for topic in request.topics])


def agree_to_shutdown(frame: peer_lib.Frame) -> messages.ControlledShutdownResponse:
    return messages.ControlledShutdownResponse(error_code=0, remaining_partitions=[])


CONTROLLER_ANSWERS = {ALLOCATE_PRODUCER_IDS: allocate_block, ALTER_PARTITION: accept_isr_change,
                      CONTROLLED_SHUTDOWN: agree_to_shutdown}


# ---------------------------------------------------------------------------------------------------------
# The peer's requests as controller
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Controller:
    kafka: kafka_process.KafkaProcess
    zk: KazooClient
    peer: peer_lib.WirePeer
    topic_ids: dict[str, uuid.UUID] = field(default_factory=lambda: {LED: uuid.uuid4(), GONE: uuid.uuid4()})
    kafka_epoch: int = -1
    responses: dict[int, peer_lib.Frame] = field(default_factory=dict)
    client: peer_lib.WireClient | None = None
    failure: BaseException | None = None

    def replicas(self, topic: str) -> list[int]:
        return [KAFKA_ID, PEER_ID] if topic == LED else [KAFKA_ID]

    def update_metadata(self) -> messages.UpdateMetadataRequest:
        request = messages.UpdateMetadataRequest
        brokers = [(KAFKA_ID, self.kafka.port), (PEER_ID, self.peer.port)]
        return request(
            controller_id=PEER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.kafka_epoch,
            topic_states=[request.UpdateMetadataTopicState(
                topic_name=topic, topic_id=topic_id, partition_states=[request.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=CONTROLLER_EPOCH, leader=KAFKA_ID,
                    leader_epoch=LEADER_EPOCH, isr=self.replicas(topic), zk_version=PARTITION_EPOCH,
                    replicas=self.replicas(topic), offline_replicas=[])])
                for topic, topic_id in self.topic_ids.items()],
            live_brokers=[request.UpdateMetadataBroker(id=broker_id, rack=None, endpoints=[
                request.UpdateMetadataEndpoint(port=port, host="127.0.0.1", listener=peer_lib.LISTENER,
                                               security_protocol=peer_lib.PLAINTEXT)])
                for broker_id, port in brokers])

    def leader_and_isr(self) -> messages.LeaderAndIsrRequest:
        request = messages.LeaderAndIsrRequest
        return request(
            controller_id=PEER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.kafka_epoch, type=0,
            topic_states=[request.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=topic_id, partition_states=[request.LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=CONTROLLER_EPOCH, leader=KAFKA_ID,
                    leader_epoch=LEADER_EPOCH, isr=self.replicas(topic), partition_epoch=PARTITION_EPOCH,
                    replicas=self.replicas(topic), is_new=True, leader_recovery_state=0)])
                for topic, topic_id in self.topic_ids.items()],
            live_leaders=[request.LeaderAndIsrLiveLeader(broker_id=KAFKA_ID, host_name="127.0.0.1",
                                                         port=self.kafka.port)])

    def stop_replica(self, topic: str) -> messages.StopReplicaRequest:
        request = messages.StopReplicaRequest
        return request(controller_id=PEER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.kafka_epoch,
                       topic_states=[request.StopReplicaTopicState(topic_name=topic, partition_states=[
                           request.StopReplicaPartitionState(partition_index=0, leader_epoch=-2,
                                                             delete_partition=True)])])

    def send(self, api_key: int, version: int, request) -> peer_lib.Frame:
        frame = self.client.call(api_key, version, request)
        self.responses[api_key] = frame
        return frame

    def take_charge_of_broker(self) -> None:
        """Run while broker 1 starts: once it registers, tell it who leads what (Kafka waits for this)."""
        try:
            deadline = time.monotonic() + 120
            while not self.zk.exists(f"/brokers/ids/{KAFKA_ID}"):
                if time.monotonic() > deadline:
                    raise TimeoutError("broker 1 did not register")
                time.sleep(0.1)
            self.kafka_epoch = peer_lib.broker_epoch(self.zk, KAFKA_ID)
            self.client = peer_lib.connect_when_listening("127.0.0.1", self.kafka.port)
            self.send(UPDATE_METADATA, 8, self.update_metadata())
            self.send(LEADER_AND_ISR, 7, self.leader_and_isr())
        except BaseException as error:  # reported by the fixture
            self.failure = error


@pytest.fixture(scope="module")
def controller(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    chroot = f"/broker-peer-{uuid.uuid4().hex[:8]}"
    connect = zookeeper_server.connect + chroot
    zk = KazooClient(hosts=zookeeper_server.connect)
    zk.start(timeout=30)
    zk.ensure_path(chroot)
    zk.stop()
    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    kafka = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka-broker"), version="3.9", zookeeper=connect,
                                       node_id=KAFKA_ID, overrides={"replica.lag.time.max.ms": str(LAG_MS)})
    try:
        with peer_lib.WirePeer(CONTROLLER_ANSWERS, forward_to=("127.0.0.1", kafka.port)) as peer:
            peer_lib.take_controller(zk, PEER_ID, CONTROLLER_EPOCH)
            peer_lib.register_broker(zk, PEER_ID, peer.port)
            found = Controller(kafka, zk, peer)
            driver = threading.Thread(target=found.take_charge_of_broker, daemon=True)
            driver.start()
            try:
                kafka.start()
            except kafka_process.KafkaUnavailable as error:
                pytest.fail(f"cannot start Kafka 3.9: {error}", pytrace=False)
            finally:
                driver.join(TIMEOUT)
            if found.failure is not None:
                raise found.failure
            try:
                yield found
            finally:
                if found.client is not None:
                    found.client.close()
    finally:
        kafka.stop(signal.SIGKILL)  # a no-op when the last test stopped it politely
        zk.stop()
        zk.close()


def test_broker_answers_update_metadata_from_its_controller(controller: Controller) -> None:
    frame = controller.responses[UPDATE_METADATA]
    assert (frame.version, frame.body.error_code) == (8, 0)
    cluster = AdminClient({"bootstrap.servers": controller.kafka.bootstrap, "log_level": 0}).list_topics(
        timeout=TIMEOUT)
    assert cluster.controller_id == PEER_ID
    assert {b.id: (b.host, b.port) for b in cluster.brokers.values()} == {
        KAFKA_ID: ("127.0.0.1", controller.kafka.port), PEER_ID: ("127.0.0.1", controller.peer.port)}
    partition = cluster.topics[LED].partitions[0]
    assert (partition.leader, partition.replicas, partition.isrs) == (KAFKA_ID, [1, 2], [1, 2])
    peer_lib.capture(frame, "response")


def test_broker_answers_leader_and_isr_from_its_controller(controller: Controller) -> None:
    frame = controller.responses[LEADER_AND_ISR]
    assert (frame.version, frame.body.error_code) == (7, 0)
    assert {t.topic_id: [(p.partition_index, p.error_code) for p in t.partition_errors]
            for t in frame.body.topics} == {topic_id: [(0, 0)] for topic_id in controller.topic_ids.values()}
    assert (controller.kafka.log_dir / f"{LED}-0").is_dir()
    peer_lib.capture(frame, "response")


def test_broker_sends_alter_partition_when_the_isr_shrinks(controller: Controller) -> None:
    frame = controller.peer.wait_for(ALTER_PARTITION, timeout=TIMEOUT)
    body = frame.body
    assert frame.version == 3
    assert (body.broker_id, body.broker_epoch) == (KAFKA_ID, controller.kafka_epoch)
    (topic,) = body.topics
    (partition,) = topic.partitions
    assert topic.topic_id == controller.topic_ids[LED]
    assert (partition.partition_index, partition.leader_epoch, partition.partition_epoch) == (
        0, LEADER_EPOCH, PARTITION_EPOCH)
    # A ZooKeeper-mode leader does not know its ISR members' broker epochs (its metadata cache holds none): -1
    assert [(b.broker_id, b.broker_epoch) for b in partition.new_isr_with_epochs] == [(KAFKA_ID, UNKNOWN_EPOCH)]
    assert partition.leader_recovery_state == 0
    peer_lib.capture(frame, "request")


def test_idempotent_producer_makes_the_broker_ask_its_controller_for_producer_ids(controller: Controller) -> None:
    """The produce (acks=all) completes only once broker 1 took our AlterPartition answer: the ISR is then [1]."""
    producer = Producer({"bootstrap.servers": controller.kafka.bootstrap, "enable.idempotence": True,
                         "log_level": 0})
    outcome: list = []
    producer.produce(LED, b"value", on_delivery=lambda error, message: outcome.append(error))
    assert producer.flush(TIMEOUT) == 0
    assert outcome == [None]
    frame = controller.peer.wait_for(ALLOCATE_PRODUCER_IDS, timeout=TIMEOUT)
    assert frame.version == 0
    assert (frame.body.broker_id, frame.body.broker_epoch) == (KAFKA_ID, controller.kafka_epoch)
    peer_lib.capture(frame, "request")


def test_producer_ids_come_from_the_block_the_controller_allocated(controller: Controller) -> None:
    client = peer_lib.WireClient("127.0.0.1", controller.kafka.port, client_id="raw-producer")
    request = messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                             producer_epoch=-1)
    try:
        deadline = time.monotonic() + TIMEOUT
        while (response := client.call(INIT_PRODUCER_ID, 4, request).body).error_code == \
                COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        client.close()
    assert response.error_code == 0
    assert BLOCK_START <= response.producer_id < BLOCK_START + BLOCK_LEN


def test_broker_answers_stop_replica_from_its_controller(controller: Controller) -> None:
    frame = controller.send(STOP_REPLICA, 4, controller.stop_replica(GONE))
    assert (frame.body.error_code, [(p.topic_name, p.partition_index, p.error_code)
                                    for p in frame.body.partition_errors]) == (0, [(GONE, 0, 0)])
    deadline = time.monotonic() + TIMEOUT
    while (controller.kafka.log_dir / f"{GONE}-0").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (controller.kafka.log_dir / f"{GONE}-0").exists()
    peer_lib.capture(frame, "response")


def test_broker_sends_controlled_shutdown_on_sigterm(controller: Controller) -> None:
    """Last in the module: it stops the broker. Our answer (nothing left to move) lets it exit on its own."""
    process = controller.kafka.process
    controller.kafka.stop()  # SIGTERM; kafka_process kills it after 30 s if it hangs
    frame = controller.peer.wait_for(CONTROLLED_SHUTDOWN, timeout=1)
    assert frame.version == 3
    assert (frame.body.broker_id, frame.body.broker_epoch) == (KAFKA_ID, controller.kafka_epoch)
    assert process.returncode != -signal.SIGKILL
    peer_lib.capture(frame, "request")
