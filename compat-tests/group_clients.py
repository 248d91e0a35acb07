"""Commit and read back a group's offsets with each client library, outside any group generation
(a "simple" commit, as assign()-based consumers and tools do), for the cross-client tests.

Every committer takes {partition: (offset, metadata)}; every reader answers {partition: (offset,
metadata)}, with offset None when nothing is committed and metadata None when the client does
not report it (aiokafka's committed() gives the offset only).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest

from java_harness import JavaHarness, compile_harness

Offsets = dict[int, tuple[int, str]]
Committed = dict[int, tuple[int | None, str | None]]
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "java")
T = TypeVar("T")


def once_coordinator_ready(call: Callable[[], T], timeout: float = 30) -> T:
    """`call()`, retried while confluent-kafka raises a coordinator-not-ready error: Kafka creates
    __consumer_offsets on the first FindCoordinator and loads its partitions (also after a restart) in the
    background, answering NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS until done; librdkafka does not
    retry those for a commit or committed() outside a group generation."""
    from confluent_kafka import KafkaError, KafkaException

    not_ready = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                 KafkaError.COORDINATOR_NOT_AVAILABLE}
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as error:
            if error.args[0].code() not in not_ready or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


HEARTBEAT_KEY = 68  # ConsumerGroupHeartbeat


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """{api key: (lowest, highest)} from the broker's ApiVersions v0 answer, read off a plain socket (kafka-python
    2.x/3.x cannot parse the answer of a broker with API keys it does not know, such as Kafka 4.4's)."""
    host, port = bootstrap.rsplit(":", 1)
    client = b"compat-tests"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(struct.pack(">i", len(body)) + body)
        reader = connection.makefile("rb")
        (size,) = struct.unpack(">i", reader.read(4))
        answer = reader.read(size)
    _, error, count = struct.unpack_from(">ihi", answer)
    assert error == 0, f"ApiVersions answered error {error}"
    keys = (struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count))
    return {key: (lowest, highest) for key, lowest, highest in keys}


UNSUPPORTED_VERSION = 35


def skip_without_consumer_protocol(bootstrap: str) -> None:
    """Skips unless the broker runs KIP-848's coordinator: Kafka 3.9 in ZooKeeper mode lists
    ConsumerGroupHeartbeat in ApiVersions but answers it UNSUPPORTED_VERSION, and so refuses any consumer with
    group.protocol=consumer. Asked with a leave (epoch -1) of an unknown member, which creates nothing."""
    from differential import Connection, build

    if HEARTBEAT_KEY not in api_versions(bootstrap):
        pytest.skip("the broker does not serve ConsumerGroupHeartbeat: no consumer protocol")
    connection = Connection(bootstrap)
    try:
        leave = build("ConsumerGroupHeartbeatRequest", 0, {
            "group_id": f"probe-{uuid.uuid4().hex}", "member_id": uuid.uuid4().hex, "member_epoch": -1,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
            "server_assignor": None, "topic_partitions": None})
        answer = connection.call(HEARTBEAT_KEY, 0, leave)
    finally:
        connection.close()
    if getattr(answer, "error_code", None) == UNSUPPORTED_VERSION:
        pytest.skip("the broker answers ConsumerGroupHeartbeat UNSUPPORTED_VERSION (Kafka in ZooKeeper mode): "
                    "no consumer protocol")


def skip_without_heartbeat_v1(bootstrap: str) -> None:
    """Skips unless the broker serves ConsumerGroupHeartbeat v1 (asked with ApiVersions): librdkafka's consumer
    protocol (GA in 2.12) sends v1 (KIP-1082, the member id chosen by the client), which Kafka serves from 4.0;
    Kafka 3.9 has v0 only, its KIP-848 preview, and a librdkafka member never gets an assignment there."""
    highest = api_versions(bootstrap).get(HEARTBEAT_KEY, (0, -1))[1]
    if highest < 1:
        pytest.skip(f"the broker serves ConsumerGroupHeartbeat up to v{highest}; librdkafka's consumer protocol "
                    "needs v1 (Kafka 4.0+)")


# ---- confluent-kafka --------------------------------------------------------------------------

def _confluent_consumer(bootstrap: str, group: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def commit_confluent(bootstrap: str, group: str, topic: str, offsets: Offsets) -> None:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, group)
    try:
        wanted = [TopicPartition(topic, p, o, metadata=m) for p, (o, m) in offsets.items()]
        results = once_coordinator_ready(lambda: consumer.commit(offsets=wanted, asynchronous=False))
        assert all(tp.error is None for tp in results), results
    finally:
        consumer.close()


def committed_confluent(bootstrap: str, group: str, topic: str, partitions: list[int]) -> Committed:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, group)
    try:
        found = once_coordinator_ready(lambda: consumer.committed([TopicPartition(topic, p) for p in partitions],
                                                                  timeout=15))
    finally:
        consumer.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None, _confluent_metadata(tp)) for tp in found}


def _confluent_metadata(tp) -> str | None:
    """The metadata as confluent-kafka reads it, or None when it cannot: the binding reads it as
    a C string, so without a NUL of its own (every writer but confluent-kafka) the bytes after it
    are whatever follows in memory and may not decode (librdkafka issue #4649)."""
    try:
        return tp.metadata
    except UnicodeDecodeError:
        return None


# ---- kafka-python -----------------------------------------------------------------------------

def _kafka_python_consumer(bootstrap: str, group: str):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         request_timeout_ms=15000)


def commit_kafka_python(bootstrap: str, group: str, topic: str, offsets: Offsets) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = _kafka_python_consumer(bootstrap, group)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, m, -1) for p, (o, m) in offsets.items()})
    finally:
        consumer.close(autocommit=False)


def committed_kafka_python(bootstrap: str, group: str, topic: str, partitions: list[int]) -> Committed:
    from kafka import TopicPartition

    consumer = _kafka_python_consumer(bootstrap, group)
    try:
        found = {p: consumer.committed(TopicPartition(topic, p), metadata=True) for p in partitions}
    finally:
        consumer.close(autocommit=False)
    return {p: (c.offset, c.metadata) if c is not None else (None, None) for p, c in found.items()}


# ---- aiokafka ---------------------------------------------------------------------------------

async def _with_aiokafka(bootstrap: str, group: str, work):
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await work(consumer)
    finally:
        await consumer.stop()


def commit_aiokafka(bootstrap: str, group: str, topic: str, offsets: Offsets) -> None:
    from aiokafka import TopicPartition

    async def work(consumer):
        consumer.assign([TopicPartition(topic, p) for p in offsets])  # aiokafka commits for assigned partitions
        await consumer.commit({TopicPartition(topic, p): (o, m) for p, (o, m) in offsets.items()})

    asyncio.run(_with_aiokafka(bootstrap, group, work))


def committed_aiokafka(bootstrap: str, group: str, topic: str, partitions: list[int]) -> Committed:
    from aiokafka import TopicPartition

    async def work(consumer):
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}

    found = asyncio.run(_with_aiokafka(bootstrap, group, work))
    return {p: (offset, None) for p, offset in found.items()}


# ---- Java kafka-clients (compat-tests/java/KafkaHarness.java) -----------------------------------

def java_harness(tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    """KafkaHarness.java on the newest kafka-clients (skips without a JDK locally, fails in CI)."""
    return compile_harness(tmp_path_factory.mktemp("java-harness-groups"))


def java_committers(harness: JavaHarness) -> tuple[Callable, Callable]:
    """(commit, committed) through the Java harness, with the same signatures as the others."""

    def commit(bootstrap: str, group: str, topic: str, offsets: Offsets) -> None:
        harness.run("commit", bootstrap, group, topic, *(f"{p}:{o}:{m}" for p, (o, m) in offsets.items()))

    def committed(bootstrap: str, group: str, topic: str, partitions: list[int]) -> Committed:
        lines = harness.run("committed", bootstrap, group, topic, *partitions)
        return {line["partition"]: (line["offset"], line["metadata"]) for line in lines if line["type"] == "committed"}

    return commit, committed


PYTHON_COMMITTERS: dict[str, tuple[Callable, Callable]] = {
    "confluent-kafka": (commit_confluent, committed_confluent),
    "kafka-python": (commit_kafka_python, committed_kafka_python),
    "aiokafka": (commit_aiokafka, committed_aiokafka),
}
