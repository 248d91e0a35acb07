"""A data directory moves between Apache Kafka and kbroker, both ways (docs/operations.md, "Moving a data
directory between Kafka and kbroker").

One broker writes a log dir: a topic in lz4 with keys, headers and explicit timestamps, a compacted topic,
committed offsets with metadata, committed and aborted transactions. What clients read from it is the expected
answer. It stops, the other broker starts over the same directory, and clients must read the same records at the
same offsets and timestamps, the same commits, the same topic ids and configs, the same read_committed records and
transactional id state, and new records go after the old ones.
- Kafka 4.x (KRaft) -> kbroker: kbroker adopts the topics it finds, ids and configs from Kafka's metadata log.
- kbroker -> Kafka 3.9 in ZooKeeper mode: the topics are registered in ZooKeeper from kbroker-topics.json.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from kbroker.log.checkpoints import uuid_text
from kbroker.testing import BrokerProcess
from wire import messages

import differential
import group_clients
import java_harness
import kafka_process
import settle

pytestmark = [pytest.mark.client("confluent-kafka"),
              pytest.mark.scenario("Data directory moved between Kafka and kbroker")]
LZ4, COMPACTED, GROUP = "lz4-headers", "compacted", "swap-group"
TRANSACTIONAL, TRANSACTIONAL_ID = "transactional", "swap-txn"
DESCRIBE_TRANSACTIONS = 65
COMMITS = {0: (7, "seven"), 1: (3, "three")}
TIMEOUT = 30
Seen = list[tuple[int, int, bytes | None, bytes | None, list]]


@dataclass
class Moved:
    """What clients saw on the broker that wrote the directory, and on the one that took it over."""

    before: Observed
    after: Observed
    bootstrap: str  # the broker now serving the directory


@dataclass
class Observed:
    """What a client sees of the data directory on one broker."""

    records: dict[tuple[str, int], Seen]
    committed: dict
    topic_ids: dict[str, str]
    compacted_policy: str
    read_committed: list[bytes]
    transaction: tuple[str, int, int]  # the transactional id's state, producer id and epoch


def write_transactions(bootstrap: str) -> None:
    """Committed, aborted, committed: a .txnindex entry, markers, and the id's state in __transaction_state."""
    settle.create_topic(bootstrap, TRANSACTIONAL, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID})
    producer.init_transactions(TIMEOUT)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(TRANSACTIONAL, value, partition=0)
        producer.flush(TIMEOUT)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)


def read_committed(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(TRANSACTIONAL, 0, 0)])
    values = []
    try:
        while (message := consumer.poll(TIMEOUT)) is not None and not message.error():
            values.append(message.value())
    finally:
        consumer.close()
    return values


def describe_transaction(bootstrap: str) -> tuple[str, int, int]:
    """DescribeTransactions of TRANSACTIONAL_ID, once its coordinator has loaded it."""
    connection = differential.Connection(bootstrap)
    request = messages.DescribeTransactionsRequest(transactional_ids=[TRANSACTIONAL_ID])
    try:
        state = settle.eventually(lambda: connection.call(DESCRIBE_TRANSACTIONS, 0, request).transaction_states[0],
                                  lambda found: found.error_code == 0)
    finally:
        connection.close()
    return state.transaction_state, state.producer_id, state.producer_epoch


def write_workload(bootstrap: str) -> None:
    settle.create_topic(bootstrap, LZ4, 2)
    settle.create_topic(bootstrap, COMPACTED, 1, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for index in range(40):
        producer.produce(LZ4, key=f"k{index}", value=f"value-{index}", partition=index % 2,
                         timestamp=1_700_000_000_000 + index * 1000, headers=[("index", str(index).encode()),
                                                                               ("empty", None)])
        producer.produce(COMPACTED, key=f"key-{index % 4}", value=f"round-{index // 4}")
    assert producer.flush(TIMEOUT) == 0
    group_clients.commit_confluent(bootstrap, GROUP, LZ4, COMMITS)
    write_transactions(bootstrap)


def read_partition(bootstrap: str, topic: str, partition: int) -> Seen:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen = []
    try:
        while (message := consumer.poll(TIMEOUT)) is not None and not message.error():
            seen.append((message.offset(), message.timestamp()[1], message.key(), message.value(),
                         message.headers() or []))
        assert message is not None, f"{topic}-{partition}: no end of partition within {TIMEOUT} s"
    finally:
        consumer.close()
    return seen


def observe(bootstrap: str) -> Observed:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.describe_topics(TopicCollection([LZ4, COMPACTED]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, COMPACTED)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return Observed(
        records={(topic, partition): read_partition(bootstrap, topic, partition)
                 for topic, partition in ((LZ4, 0), (LZ4, 1), (COMPACTED, 0))},
        committed=group_clients.committed_confluent(bootstrap, GROUP, LZ4, [0, 1]),
        topic_ids={name: str(future.result(TIMEOUT).topic_id) for name, future in topics.items()},
        compacted_policy=configs["cleanup.policy"].value,
        read_committed=read_committed(bootstrap),
        transaction=describe_transaction(bootstrap),
    )


@pytest.fixture(scope="module")
def kafka_to_kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moved]:
    """Kafka 4.x (KRaft) writes the log dir; kbroker serves it, as node.id 1 like Kafka's meta.properties."""
    workdir = tmp_path_factory.mktemp("kafka-to-kbroker")
    kafka = kafka_process.KafkaProcess(workdir, "4")
    with kafka_started(kafka):
        write_workload(kafka.bootstrap)
        on_kafka = observe(kafka.bootstrap)
    with contextlib.ExitStack() as stack:
        broker = BrokerProcess(kafka.log_dir, f"node.id={kafka.node_id}")
        stack.callback(broker.stop)
        broker.start()
        yield Moved(on_kafka, observe(broker.bootstrap), broker.bootstrap)


@pytest.fixture(scope="module")
def kbroker_to_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moved]:
    """kbroker writes the log dir; Kafka 3.9 in ZooKeeper mode serves it, once ZooKeeper holds the topics
    as kbroker-topics.json names them (Kafka's KRaft mode would need its metadata log instead)."""
    workdir = tmp_path_factory.mktemp("kbroker-to-kafka")
    data = workdir / "kbroker-data"
    broker = BrokerProcess(data).start()
    try:
        write_workload(broker.bootstrap)
        on_kbroker = observe(broker.bootstrap)
    finally:
        assert broker.stop() == 0
    with contextlib.ExitStack() as stack:
        zookeeper = kafka_process.ZooKeeperProcess(workdir)
        stack.enter_context(kafka_started(zookeeper))
        register_in_zookeeper(data, zookeeper.connect)
        kafka = kafka_process.KafkaProcess(workdir, "3.9", zookeeper.connect, {"log.dirs": str(data)}, node_id=0)
        stack.enter_context(kafka_started(kafka))
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for topic in json.loads((data / "kbroker-topics.json").read_text())["topics"]:
            settle.wait_for_partitions(admin, topic["name"], topic["partitions"])  # the controller elects leaders
        yield Moved(on_kbroker, observe(kafka.bootstrap), kafka.bootstrap)


@contextlib.contextmanager
def kafka_started(process: kafka_process.KafkaProcess | kafka_process.ZooKeeperProcess) -> Iterator[None]:
    try:
        process.start()
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"cannot start Apache Kafka: {error}")
    try:
        yield
    finally:
        process.stop()


def register_in_zookeeper(data: Path, connect: str) -> None:
    """What Kafka's ZooKeeper mode reads a topic from, written from kbroker-topics.json: the cluster id (it
    must match meta.properties), each topic's assignment with its topic id (it must match partition.metadata)
    on broker 0, and its configs. The controller then elects the leaders and creates the partition states."""
    from kazoo.client import KazooClient

    state = json.loads((data / "kbroker-topics.json").read_text())
    client = KazooClient(hosts=connect)
    client.start()
    try:
        client.create("/cluster/id", json.dumps({"version": "1", "id": state["cluster_id"]}).encode(), makepath=True)
        for topic in state["topics"]:
            assignment = {"version": 3, "topic_id": uuid_text(uuid.UUID(topic["id"])), "adding_replicas": {},
                          "removing_replicas": {}, "partitions": {str(p): [0] for p in range(topic["partitions"])}}
            client.create(f"/brokers/topics/{topic['name']}", json.dumps(assignment).encode(), makepath=True)
            configs = {"version": 1, "config": topic["configs"]}
            client.create(f"/config/topics/{topic['name']}", json.dumps(configs).encode(), makepath=True)
    finally:
        client.stop()


@pytest.fixture(params=["kafka-to-kbroker", "kbroker-to-kafka"])
def moved(request: pytest.FixtureRequest) -> Moved:
    return request.getfixturevalue(request.param.replace("-", "_"))


def test_records_read_back_with_the_same_offsets_timestamps_and_headers(moved: Moved) -> None:
    assert sum(len(seen) for seen in moved.before.records.values()) >= 40 + 4
    assert moved.after.records == moved.before.records


def test_committed_offsets_read_back(moved: Moved) -> None:
    assert moved.before.committed == COMMITS
    assert moved.after.committed == moved.before.committed


def test_topics_keep_their_ids_and_configs(moved: Moved) -> None:
    """Topic ids and the compacted topic's cleanup.policy live in Kafka's metadata log (KRaft), in ZooKeeper
    (ZooKeeper mode) or in kbroker-topics.json: the move carries them over."""
    assert moved.after.topic_ids == moved.before.topic_ids
    assert moved.after.compacted_policy == moved.before.compacted_policy == "compact"


def test_the_new_broker_appends_after_the_last_offset(moved: Moved) -> None:
    producer = Producer({"bootstrap.servers": moved.bootstrap})
    delivered = []
    producer.produce(LZ4, value=b"after the move", partition=0, on_delivery=lambda _, message: delivered.append(
        message.offset()))
    assert producer.flush(TIMEOUT) == 0
    assert delivered == [len(moved.before.records[(LZ4, 0)])]


def test_transactions_read_back_and_the_transactional_id_keeps_its_producer_id_and_epoch(moved: Moved) -> None:
    """The other broker reads the aborted transaction from the .txnindex and the id's state from
    __transaction_state, each written in the first broker's format."""
    assert moved.before.read_committed == [b"c1", b"c2", b"c3"]
    assert moved.after.read_committed == moved.before.read_committed
    assert moved.before.transaction[0] == "CompleteCommit"
    assert moved.after.transaction == moved.before.transaction
