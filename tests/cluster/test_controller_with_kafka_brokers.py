"""kbroker as the controller of Apache Kafka 3.9 brokers (ZooKeeper mode): the proof that cluster/controller.py,
its channel and its request handlers do what Kafka's own controller does, judged by real Kafka brokers.

A kbroker node (tests/cluster/controller_node.py) takes /controller first; then three Kafka 3.9 brokers join the
same chroot with Kafka's defaults (controlled shutdown on, ZooKeeper session 6 s). Everything Kafka's brokers know
of the cluster comes from kbroker: who is live (UpdateMetadata: a Kafka broker reports itself ready only once it
is in a Metadata answer), which partitions they lead or follow (LeaderAndIsr), which to drop (StopReplica),
producer id blocks (AllocateProducerIds), ISR changes (AlterPartition) and controlled shutdown.

The first tests need no Kafka broker: the controller's own lifecycle on ZooKeeper (session expiry, another broker
taking /controller, NOT_CONTROLLER from a standby). Then the kbroker node registers only an INTERNAL listener, which
the Kafka brokers use between brokers (inter.broker.listener.name) while clients bootstrap on PLAINTEXT, so clients
are never sent to the kbroker node (its broker side is not what these tests judge). The Kafka tests run in file
order on one cluster (they build on each other: the topic created early is the one a broker is killed under); one
Kafka JVM is restarted after its kill -9.
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition
from kazoo.client import KazooClient

from kbroker.cluster.model import PartitionState, ReplicaAssignment, TopicAssignment
from kbroker.cluster.placement import BrokerMetadata, assign_replicas_to_brokers
from kbroker.cluster.zk import ZkClient, encode_controller
from kbroker.testing import free_port
from wire import messages
from wire.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib
from controller_node import ControllerNode

import kafka_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("kafka-zk-cluster")]

CONTROLLER_ID = 10
KAFKA_IDS = (1, 2, 3)
SESSION_TIMEOUT_S = 6  # kafka_process's zookeeper.session.timeout.ms for Kafka brokers
TOPIC = "orders"
TIMEOUT = 60
REBALANCE_INTERVAL_S = 5
CONTROLLED_SHUTDOWN, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS, API_VERSIONS = 7, 56, 67, 18


@dataclass
class Cluster:
    connect: str
    node: ControllerNode
    kafkas: dict[int, kafka_process.KafkaProcess]
    zk: ZkClient  # the test's own session, as an admin tool would have

    def live_kafkas(self) -> list[kafka_process.KafkaProcess]:
        return [k for k in self.kafkas.values() if k.process is not None]

    def bootstrap(self) -> str:
        return ",".join(k.bootstrap for k in self.live_kafkas())

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.zk.partition_state(topic, partition)

    def states(self, topic: str) -> dict[int, PartitionState]:
        assignment = self.zk.topic_assignment(topic)
        assert assignment is not None, topic
        found = {p: self.state(topic, p) for p in assignment.partitions}
        return {p: s for p, s in found.items() if s is not None}

    def metadata_leaders(self, kafka: kafka_process.KafkaProcess, topic: str) -> dict[int, int]:
        """Partition -> leader as this Kafka broker's Metadata answer has it (its cache, fed by kbroker)."""
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None:
            return {}
        return {p: info.leader for p, info in found.partitions.items()}

    def create_topic(self, name: str, partitions: dict[int, tuple[int, ...]]) -> TopicAssignment:
        """As AdminZkClient.createTopicWithAssignment: the znodes only; the controller does the rest."""
        assignment = TopicAssignment(name, uuid.uuid4(), {p: ReplicaAssignment(r) for p, r in partitions.items()})
        self.zk.create_topic(assignment)
        return assignment


def wait_until(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


def kafka_broker(workdir: Path, connect: str, node_id: int) -> kafka_process.KafkaProcess:
    """A Kafka 3.9 broker with a PLAINTEXT listener for clients and an INTERNAL one between brokers."""
    kafka = kafka_process.KafkaProcess(workdir, version="3.9", zookeeper=connect, node_id=node_id)
    listeners = f"PLAINTEXT://127.0.0.1:{kafka.port},INTERNAL://127.0.0.1:{free_port()}"
    kafka.overrides = {"listeners": listeners, "advertised.listeners": listeners,
                       "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                       "inter.broker.listener.name": "INTERNAL"}
    return kafka


def start_kafka(kafka: kafka_process.KafkaProcess) -> None:
    try:
        kafka.start()
    except kafka_process.KafkaUnavailable as error:
        kafka.stop()
        pytest.fail(f"cannot start Kafka 3.9: {error}", pytrace=False)
    except BaseException:
        kafka.stop()
        raise


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    connect = f"{zookeeper_server.connect}/kbroker-controller-{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("kbroker-controller")
    # a short rebalance interval, so the auto-rebalance check runs while the tests look
    node = ControllerNode(workdir / "kbroker", connect, CONTROLLER_ID,
                          overrides={"leader.imbalance.check.interval.seconds": str(REBALANCE_INTERVAL_S)})
    kafkas = {i: kafka_broker(workdir, connect, i) for i in KAFKA_IDS}
    zk = ZkClient(connect, session_timeout_ms=10_000)
    try:
        node.start()
        zk.start()
        wait_until(node.is_active, "kbroker becomes the controller")
        for kafka in kafkas.values():
            start_kafka(kafka)
        yield Cluster(connect, node, kafkas, zk)
    finally:
        for kafka in kafkas.values():
            kafka.stop(signal.SIGKILL)
        zk.close()
        node.stop()


def produce(bootstrap: str, topic: str, values: list[bytes], **settings: object) -> list[tuple[int, int]]:
    """Produce with acks=all; the (partition, offset) of each record, raising on any delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, **settings})
    delivered: list[tuple[int, int]] = []
    errors = []

    def report(error, message) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append((message.partition(), message.offset()))

    for value in values:
        producer.produce(topic, value, on_delivery=report)
    assert producer.flush(TIMEOUT) == 0, "records still undelivered"
    assert not errors, errors
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    """Read every partition from the start, without a group (no __consumer_offsets on these brokers)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(values) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                values.extend(record.value for record in batch)
        return values
    finally:
        consumer.close()


def leaders_settled(cluster: Cluster, topic: str) -> dict[int, int] | None:
    """Partition -> leader once every live Kafka broker's Metadata agrees with the partition state znodes."""
    expected = {p: s.leader_and_isr.leader for p, s in cluster.states(topic).items()}
    if not expected:
        return None
    for kafka in cluster.live_kafkas():
        if cluster.metadata_leaders(kafka, topic) != expected:
            return None
    return expected


# ---------------------------------------------------------------------------------------------- lifecycle


@pytest.fixture
def node(zookeeper: str, tmp_path: Path) -> Iterator[ControllerNode]:
    started = ControllerNode(tmp_path, zookeeper, CONTROLLER_ID).start()
    try:
        wait_until(started.is_active, "kbroker becomes the controller")
        yield started
    finally:
        started.stop()


@pytest.fixture
def observer(zookeeper: str, node: ControllerNode) -> Iterator[ZkClient]:
    with ZkClient(zookeeper, session_timeout_ms=6000) as client:
        yield client


def controller_epoch(zk: ZkClient) -> int:
    found = zk.controller_epoch()
    assert found is not None
    return found.epoch


def take_controller_from(node: ControllerNode, rival: ZkClient, rival_id: int) -> None:
    """Another broker becomes controller in one step, as if it had won the race: /controller rewritten as its
    own (ephemeral) and the epoch bumped."""
    epoch = rival.controller_epoch()
    assert epoch is not None
    transaction = rival.kazoo.transaction()
    transaction.delete("/controller")
    transaction.create("/controller", encode_controller(rival_id), ephemeral=True)
    transaction.set_data("/controller_epoch", str(epoch.epoch + 1).encode(), epoch.zk_version)
    assert not [result for result in transaction.commit() if isinstance(result, Exception)]


def call(node: ControllerNode, api_key: int, version: int, request) -> object:
    client = peer_lib.WireClient("127.0.0.1", node.running.port, client_id="broker-1")
    try:
        return client.call(api_key, version, request).body
    finally:
        client.close()


def test_a_controller_whose_session_expires_is_elected_again_at_a_new_epoch(zookeeper_server, node, observer):
    first = controller_epoch(observer)
    session_id, password = node.zk.kazoo.client_id
    thief = KazooClient(hosts=zookeeper_server.connect, client_id=(session_id, password))
    thief.start()
    thief.stop()  # closing the session from elsewhere expires it for the node
    thief.close()
    wait_until(lambda: controller_epoch(observer) > first and observer.controller_id() == CONTROLLER_ID
               and node.is_active(), "the node is controller again under its new session")


def test_a_controller_resigns_when_another_broker_holds_the_controller_znode(node, observer):
    take_controller_from(node, observer, 99)
    wait_until(lambda: not node.is_active(), "the node resigns")
    assert observer.controller_id() == 99


def test_a_resigned_controller_races_again_when_the_controller_znode_goes(zookeeper, node, observer):
    with ZkClient(zookeeper, session_timeout_ms=6000) as rival:
        take_controller_from(node, rival, 99)
        wait_until(lambda: not node.is_active(), "the node resigns")
        taken = controller_epoch(observer)
    wait_until(node.is_active, "the node wins /controller once the rival's session ends")
    assert observer.controller_id() == CONTROLLER_ID
    assert controller_epoch(observer) == taken + 1


def test_a_standby_answers_controller_requests_with_not_controller(node, observer):
    take_controller_from(node, observer, 99)
    wait_until(lambda: not node.is_active(), "the node resigns")
    shutdown = call(node, CONTROLLED_SHUTDOWN, 3, messages.ControlledShutdownRequest(broker_id=1, broker_epoch=5))
    producer_ids = call(node, ALLOCATE_PRODUCER_IDS, 0,
                        messages.AllocateProducerIdsRequest(broker_id=1, broker_epoch=5))
    alter = call(node, ALTER_PARTITION, 3, messages.AlterPartitionRequest(broker_id=1, broker_epoch=5, topics=[]))
    assert [shutdown.error_code, producer_ids.error_code, alter.error_code] == [ErrorCode.NOT_CONTROLLER] * 3


def test_a_cluster_mode_broker_advertises_the_controller_apis(node):
    answer = call(node, API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="test",
                                                                     client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert {key: ranges.get(key) for key in (CONTROLLED_SHUTDOWN, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS)} == {
        CONTROLLED_SHUTDOWN: (0, 3), ALTER_PARTITION: (0, 3), ALLOCATE_PRODUCER_IDS: (0, 0)}


# ---------------------------------------------------------------------------------------------- Kafka brokers, in order


def test_kafka_brokers_take_kbroker_as_their_controller(cluster):
    assert cluster.zk.controller_id() == CONTROLLER_ID
    for kafka in cluster.kafkas.values():
        metadata = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0}).list_topics(timeout=10)
        assert metadata.controller_id == CONTROLLER_ID
        assert sorted(metadata.brokers) == list(KAFKA_IDS)  # kbroker's node has no client listener


def test_a_topic_created_in_zookeeper_is_led_where_the_controller_elected(cluster):
    replicas = assign_replicas_to_brokers([BrokerMetadata(i) for i in KAFKA_IDS], 3, 3, start_index=0)
    cluster.create_topic(TOPIC, replicas)
    wait_until(lambda: len(cluster.states(TOPIC)) == 3, "partition states for the new topic")
    epoch = cluster.zk.controller_epoch()
    assert epoch is not None
    for partition, state in cluster.states(TOPIC).items():
        lai = state.leader_and_isr
        assert (lai.leader, lai.leader_epoch, lai.isr) == (replicas[partition][0], 0, replicas[partition])
        assert state.controller_epoch == epoch.epoch
    leaders = wait_until(lambda: leaders_settled(cluster, TOPIC), "every Kafka broker serves the new leaders")
    assert leaders == {p: r[0] for p, r in replicas.items()}


def test_records_produced_to_the_kafka_brokers_are_read_back(cluster):
    values = [f"record-{i}".encode() for i in range(30)]
    produce(cluster.bootstrap(), TOPIC, values)
    assert sorted(consume_all(cluster.bootstrap(), TOPIC, 3, len(values))) == sorted(values)


def test_an_idempotent_producer_gets_its_producer_id_block_from_the_kbroker_controller(cluster):
    assert cluster.zk.producer_id_block() is None
    # a Kafka 3.9 broker at IBP 3.9 cannot write the block itself: it asks the controller (AllocateProducerIds)
    produce(cluster.bootstrap(), TOPIC, [b"idempotent"], **{"enable.idempotence": True})
    block = cluster.zk.producer_id_block()
    assert block is not None
    assert block.broker_id in KAFKA_IDS
    assert (block.first_producer_id, block.size) == (0, 1000)


def test_deleting_a_topic_makes_the_kafka_brokers_delete_its_logs(cluster):
    cluster.create_topic("doomed", {0: (1, 2), 1: (2, 3)})
    wait_until(lambda: leaders_settled(cluster, "doomed"), "the doomed topic is served")
    produce(cluster.bootstrap(), "doomed", [b"soon gone"] * 4)
    replica_dirs = [cluster.kafkas[b].log_dir / "doomed-0" for b in (1, 2)] + \
                   [cluster.kafkas[b].log_dir / "doomed-1" for b in (2, 3)]
    wait_until(lambda: all(d.is_dir() for d in replica_dirs), "every replica has its log")
    cluster.zk.mark_topic_for_deletion("doomed")
    # the znodes go only once every replica answered StopReplica (delete) to kbroker's controller
    # Kafka deletes the topic's znode, then its config, then the deletion mark: wait for the last
    wait_until(lambda: cluster.zk.topics_marked_for_deletion() == [], "the deletion mark is gone")
    assert not cluster.zk.exists("/brokers/topics/doomed")
    assert not cluster.zk.exists("/config/topics/doomed")
    assert [d for d in replica_dirs if d.exists()] == []  # Kafka renamed them for deletion (or deleted them)


def test_create_topics_sent_to_the_kbroker_controller_places_the_topic_over_the_kafka_brokers(cluster):
    client = peer_lib.WireClient("127.0.0.1", cluster.node.running.port)
    try:
        created = peer_lib.create_topic(client, "placed", partitions=3, replication_factor=3)
        again = peer_lib.create_topic(client, "placed", partitions=3, replication_factor=3)
    finally:
        client.close()
    # answered once every partition has a leader, as Kafka's DelayedCreatePartitions
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 3, 3)
    assignment = cluster.zk.topic_assignment("placed")
    assert assignment.topic_id == created.topic_id
    registered = {*KAFKA_IDS, CONTROLLER_ID}  # the controller's own broker is a broker like the others
    assert all(len(set(a.replicas)) == 3 and set(a.replicas) <= registered for a in assignment.partitions.values())
    assert (again.error_code, again.error_message) == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'placed' already exists.")
    states = cluster.states("placed")
    assert {p: s.leader_and_isr.leader for p, s in states.items()} == \
        {p: a.replicas[0] for p, a in assignment.partitions.items()}


def test_create_partitions_sent_to_the_kbroker_controller_adds_led_partitions(cluster):
    R = messages.CreatePartitionsRequest
    request = R(topics=[R.CreatePartitionsTopic(name="placed", count=5, assignments=None)], timeout_ms=30_000,
                validate_only=False)
    client = peer_lib.WireClient("127.0.0.1", cluster.node.running.port)
    try:
        result = client.call(37, 3, request).body.results[0]
    finally:
        client.close()
    assert (result.error_code, result.error_message) == (0, None)
    partitions = cluster.zk.topic_assignment("placed").partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4] and all(len(a.replicas) == 3 for a in partitions.values())
    assert all(cluster.states("placed")[p].leader_and_isr.leader == partitions[p].replicas[0] for p in (3, 4))


def test_delete_topics_sent_to_the_kbroker_controller_answers_once_the_topic_is_gone(cluster):
    client = peer_lib.WireClient("127.0.0.1", cluster.node.running.port)
    try:
        deleted = peer_lib.delete_topic(client, "placed")
        unknown = peer_lib.delete_topic(client, "placed")
    finally:
        client.close()
    # answered once the brokers' metadata drops the topic; its znodes go after every replica's log is deleted
    assert (deleted.error_code, unknown.error_code) == (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    wait_until(lambda: not cluster.zk.exists("/brokers/topics/placed"), "the topic's znodes are deleted")


def test_a_kafka_broker_that_is_not_the_controller_refuses_create_topics(cluster):
    client = peer_lib.WireClient("127.0.0.1", cluster.live_kafkas()[0].port)
    try:
        refused = peer_lib.create_topic(client, "elsewhere", partitions=1, replication_factor=1)
    finally:
        client.close()
    # kbroker's non-controller answers the same: test_broker_with_kafka_controller.py
    assert refused.error_code == ErrorCode.NOT_CONTROLLER


def test_a_killed_leaders_partitions_get_new_leaders_from_the_isr(cluster):
    before = cluster.states(TOPIC)
    victim = before[0].leader_and_isr.leader
    led = [p for p, s in before.items() if s.leader_and_isr.leader == victim]
    cluster.kafkas[victim].stop(signal.SIGKILL)
    killed_at = time.monotonic()

    def moved() -> bool:
        now = cluster.states(TOPIC)
        return all(s.leader_and_isr.leader != victim and victim not in s.leader_and_isr.isr for s in now.values())

    wait_until(moved, "the killed broker's partitions have other leaders", timeout=SESSION_TIMEOUT_S + 20)
    assert time.monotonic() - killed_at < SESSION_TIMEOUT_S + 10
    after = cluster.states(TOPIC)
    for partition in led:
        old, new = before[partition].leader_and_isr, after[partition].leader_and_isr
        assert new.leader in old.isr
        assert new.leader_epoch == old.leader_epoch + 1
        assert new.isr == tuple(b for b in old.isr if b != victim)
    wait_until(lambda: leaders_settled(cluster, TOPIC), "the surviving brokers serve the new leaders")
    produce(cluster.bootstrap(), TOPIC, [b"after the kill"])


def test_a_restarted_broker_rejoins_the_isr_through_alter_partition(cluster):
    (victim,) = [i for i, k in cluster.kafkas.items() if k.process is None]
    start_kafka(cluster.kafkas[victim])
    # only the partition leaders can add it back, by AlterPartition to kbroker's controller
    wait_until(lambda: all(victim in s.leader_and_isr.isr for s in cluster.states(TOPIC).values()),
               "the restarted broker is back in every ISR")
    assert cluster.zk.controller_id() == CONTROLLER_ID


def test_auto_rebalance_gives_a_partition_back_to_its_preferred_leader(cluster):
    preferred = {p: a.replicas[0] for p, a in cluster.zk.topic_assignment(TOPIC).partitions.items()}
    # the restarted broker leads nothing now; the next periodic check gives it its preferred partitions back
    wait_until(lambda: {p: s.leader_and_isr.leader for p, s in cluster.states(TOPIC).items()} == preferred,
               "every partition is led by its preferred replica", timeout=REBALANCE_INTERVAL_S * 4 + TIMEOUT)
    wait_until(lambda: leaders_settled(cluster, TOPIC), "the Kafka brokers serve the preferred leaders")


def test_sigterm_moves_leadership_away_before_the_broker_exits(cluster):
    live = [b for b in KAFKA_IDS if cluster.kafkas[b].process is not None]

    def movable_leader() -> tuple[int, list[int]] | None:
        """A live leader none of whose partitions has it alone in the ISR (Kafka could not move those): earlier
        tests stopped brokers, so wait until the ISRs have grown back."""
        states = cluster.states(TOPIC)
        for broker in live:
            led = [p for p, s in states.items() if s.leader_and_isr.leader == broker]
            if led and all(len(states[p].leader_and_isr.isr) > 1 for p in led):
                return broker, led
        return None

    leaving, led = wait_until(movable_leader, "a leader whose partitions all have another in-sync replica"
                              f" (live {live}, states {cluster.states(TOPIC)})")
    kafka = cluster.kafkas[leaving]
    kafka.stop(signal.SIGTERM)
    log = (kafka.workdir / "server.log").read_text()
    assert "Controlled shutdown request returned successfully" in log
    after = cluster.states(TOPIC)
    for partition in led:
        lai = after[partition].leader_and_isr
        assert lai.leader != leaving
        assert leaving not in lai.isr
    wait_until(lambda: leaders_settled(cluster, TOPIC), "the remaining brokers serve the moved leaders")
