"""Committed offsets belong to the group, not to the client that committed them: what one client
library commits, every other reads back (committed() / OffsetFetch), across a broker restart too,
and the commit is a record in the `__consumer_offsets` partition Kafka's formula names,
abs(javaStringHashCode(group.id)) % 50, keyed the way Kafka keys it.

The clients: confluent-kafka (librdkafka), kafka-python, aiokafka and Java kafka-clients (the newest 4.x)
(through compat-tests/java/KafkaHarness.java).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from kbroker.coordinator.hashing import partition_for  # noqa: E402
from kbroker.testing import BrokerProcess  # noqa: E402
from wire import messages  # noqa: E402

from group_clients import CLIENTS, PYTHON_COMMITTERS, Offsets, java_committers, java_harness  # noqa: E402
from settle import create_topic  # noqa: E402

OFFSETS_TOPIC, OFFSETS_PARTITIONS = "__consumer_offsets", 50  # offsets.topic.num.partitions default
WRITERS = [pytest.param(name, marks=pytest.mark.client(name)) for name in CLIENTS]  # as the column


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker of this module's own, so a test may restart it on the same data dir and port."""
    return own_broker("offsets", "group.initial.rebalance.delay.ms=0")


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory):
    return java_harness(tmp_path_factory)


@pytest.fixture
def client(request: pytest.FixtureRequest) -> Callable[[str], tuple[Callable, Callable]]:
    """(commit, committed) of a client by name; the Java harness is compiled only when asked for."""

    def get(name: str) -> tuple[Callable, Callable]:
        return java_committers(request.getfixturevalue("java")) if name == "java" else PYTHON_COMMITTERS[name]

    return get


def _new_topic(bootstrap: str) -> str:
    return create_topic(bootstrap, f"offsets-{uuid.uuid4().hex[:10]}", 3)


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    return _new_topic(broker.bootstrap)


def _offsets_by(writer: str) -> Offsets:
    """Offsets particular to the writer, so a reader cannot pass by reading another group."""
    base = 10 * (CLIENTS.index(writer) + 1)
    return {0: (base, f"committed by {writer}"), 2: (base + 7, f"{writer}, partition 2")}


def _stored(metadata: str) -> str:
    """Metadata as stored: confluent-kafka's Python binding sends the terminating NUL of its C
    string along (its metadata size counts it); Kafka keeps the bytes it is given, and so do we."""
    return metadata.removesuffix("\x00")


def _assert_reads_back(committed: dict, offsets: Offsets, reader: str, writer: str) -> None:
    context = f"{reader} reading what {writer} committed"
    assert {p: o for p, (o, _) in committed.items()} == {0: offsets[0][0], 1: None, 2: offsets[2][0]}, context
    for partition, (_, metadata) in committed.items():
        if metadata is None or partition not in offsets:  # aiokafka does not report metadata
            continue
        if reader == "confluent-kafka":
            # librdkafka reads metadata as a C string: without a NUL of its own (every writer but
            # confluent-kafka) stray bytes may follow it (librdkafka issue #4649)
            assert metadata.startswith(offsets[partition][1]), (context, metadata)
        else:
            assert _stored(metadata) == offsets[partition][1], (context, metadata)


@pytest.fixture(scope="module")
def committed_by_every_client(broker: BrokerProcess, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """(topic, {writer: group}): each client committed its own offsets to a group of its own."""
    topic = _new_topic(broker.bootstrap)
    groups = {}
    for writer in CLIENTS:
        groups[writer] = f"xc-{writer}-{uuid.uuid4().hex[:8]}"
        commit = java_committers(request.getfixturevalue("java"))[0] if writer == "java" else \
            PYTHON_COMMITTERS[writer][0]
        commit(broker.bootstrap, groups[writer], topic, _offsets_by(writer))
    return topic, groups


def _java_reads_every_group(java, bootstrap: str, topic: str, groups: dict[str, str]) -> dict[str, dict]:
    """One JVM for every group's committed offsets (a JVM start costs seconds)."""
    args: list = []
    for group in groups.values():
        args += [*(["--"] if args else []), "committed", bootstrap, group, topic, 0, 1, 2]
    by_group: dict[str, dict] = {group: {} for group in groups.values()}
    for line in java.run(*args):
        if line["type"] == "committed":
            by_group[line["group"]][line["partition"]] = (line["offset"], line["metadata"])
    return {writer: by_group[group] for writer, group in groups.items()}


@pytest.mark.scenario("Cross-client: committed offsets")
@pytest.mark.parametrize("reader", [pytest.param(name, marks=pytest.mark.client(name)) for name in CLIENTS])
def test_offsets_committed_by_every_client_are_read_back(broker, committed_by_every_client, request, reader) -> None:
    topic, groups = committed_by_every_client
    if reader == "java":
        read = _java_reads_every_group(request.getfixturevalue("java"), broker.bootstrap, topic, groups)
    else:
        committed = PYTHON_COMMITTERS[reader][1]
        read = {writer: committed(broker.bootstrap, group, topic, [0, 1, 2]) for writer, group in groups.items()}
    for writer in CLIENTS:
        _assert_reads_back(read[writer], _offsets_by(writer), reader, writer)


@pytest.mark.scenario("Consumer group: resume from committed offsets")
@pytest.mark.parametrize("writer", WRITERS)
def test_committed_offsets_survive_a_broker_restart(broker, client, topic, writer) -> None:
    """confluent-kafka reads first: it waits out a restarted Kafka's loading of __consumer_offsets, which
    aiokafka cannot see (it ignores OffsetFetch's top-level COORDINATOR_LOAD_IN_PROGRESS and reads no offsets)."""
    group = f"restart-{writer}-{uuid.uuid4().hex[:8]}"
    offsets = _offsets_by(writer)
    commit, committed = client(writer)
    commit(broker.bootstrap, group, topic, offsets)
    broker.stop()  # SIGTERM: a clean shutdown
    broker.start()  # same data directory, same port
    _, confluent_committed = client("confluent-kafka")
    _assert_reads_back(confluent_committed(broker.bootstrap, group, topic, [0, 1, 2]), offsets, "confluent-kafka",
                       writer)
    _assert_reads_back(committed(broker.bootstrap, group, topic, [0, 1, 2]), offsets, writer, writer)


def _end_offsets(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), timeout=10)[1]
                for p in range(OFFSETS_PARTITIONS)}
    finally:
        consumer.close()


def _read_offset_commits(bootstrap: str, partition: int, start: int, end: int) -> list[tuple]:
    """(group, topic, partition, offset, metadata) of the offset-commit records in [start, end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-topic-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, start)])
    commits = []
    try:
        position = start
        for _ in range(100):
            if position >= end:
                break
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            position = message.offset() + 1
            key, value = message.key(), message.value()
            key_version = int.from_bytes(key[:2], "big", signed=True)
            if key_version not in (0, 1):  # 2 is group metadata
                continue
            decoded_key, _ = messages.decode("OffsetCommitKey", key_version, key, 2)
            value_version = int.from_bytes(value[:2], "big", signed=True)
            decoded_value, _ = messages.decode("OffsetCommitValue", value_version, value, 2)
            commits.append((decoded_key.group, decoded_key.topic, decoded_key.partition,
                            decoded_value.offset, _stored(decoded_value.metadata)))
    finally:
        consumer.close()
    return commits


@pytest.mark.scenario("Cross-client: committed offsets")
@pytest.mark.parametrize("writer", WRITERS)
def test_commit_is_a_record_in_the_group_partition_of_consumer_offsets(broker, client, topic, writer) -> None:
    group = f"partitioned-{writer}-{uuid.uuid4().hex[:8]}"
    commit, _ = client(writer)
    PYTHON_COMMITTERS["confluent-kafka"][0](broker.bootstrap, group, topic, {0: (1, "")})  # creates the topic
    before = _end_offsets(broker.bootstrap)
    offsets = _offsets_by(writer)
    commit(broker.bootstrap, group, topic, offsets)
    after = _end_offsets(broker.bootstrap)

    expected_partition = partition_for(group, OFFSETS_PARTITIONS)
    assert [p for p in range(OFFSETS_PARTITIONS) if after[p] != before[p]] == [expected_partition]
    records = _read_offset_commits(broker.bootstrap, expected_partition, before[expected_partition],
                                   after[expected_partition])
    assert sorted(records) == sorted((group, topic, p, o, m) for p, (o, m) in offsets.items())
