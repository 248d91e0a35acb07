"""Record sizes up to the topic limit and the broker's size and unknown-topic errors, across clients.

Sizes: a topic created with Kafka's default max.message.bytes (1048588 = 1 MiB + 12 bytes of log
overhead) must take and give back, byte for byte, values from 1 byte to within a few hundred bytes
of that limit. Errors: the broker, not the client, must refuse a batch above the topic's limit
(each client's own limit is raised well above it), and a broker with auto.create.topics.enable=false
must answer UNKNOWN_TOPIC_OR_PARTITION and create nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from confluent_client import consume

KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
NEAR_MAX_VALUE = 1_048_000  # a single-record batch of this value is ~1,048,080 bytes: under the limit by ~500
SIZES = [1, 1024, 100 * 1024, NEAR_MAX_VALUE]
CLIENT_LIMIT = 4_000_000  # every client's own request/message/fetch limit, far above the topic's
SMALL_LIMIT = 10_000
TOO_LARGE_VALUE = 20_000
UNKNOWN_TOPIC_DEADLINE = 15.0  # seconds within which a produce to a missing topic must have failed


def _client(name: str) -> pytest.param:
    return pytest.param(name, marks=pytest.mark.client(name), id=name)


def _create_topic(bootstrap: str, name: str, max_message_bytes: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=1,
                     config={"max.message.bytes": str(max_message_bytes)})
    admin.create_topics([topic])[name].result(15)
    return name


def _values(sizes: list[int]) -> list[bytes]:
    """Random bytes, so every byte value (newlines, NULs, high bit) must survive."""
    return [os.urandom(size) for size in sizes]


# ---- message sizes ---------------------------------------------------------------------------

def _round_trip_confluent(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": CLIENT_LIMIT})
    errors: list = []
    for value in values:  # one record per request, so no batch holds two of the large ones
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
        assert producer.flush(20) == 0
    assert errors == []
    return [message.value() for message in consume(bootstrap, topic, 0, len(values))]


def _round_trip_kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=CLIENT_LIMIT)
    try:
        for value in values:
            producer.send(topic, value=value, partition=0).get(timeout=20)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000,
                             max_partition_fetch_bytes=CLIENT_LIMIT, fetch_max_bytes=CLIENT_LIMIT)
    try:
        partition = KafkaTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        received = []
        for message in consumer:
            received.append(message.value)
            if len(received) == len(values):
                break
        return received
    finally:
        consumer.close()


async def _round_trip_aiokafka_async(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=CLIENT_LIMIT)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value=value, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=CLIENT_LIMIT, fetch_max_bytes=CLIENT_LIMIT)
    await consumer.start()
    try:
        partition = AioTopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        received: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(received) < len(values) and time.monotonic() < deadline:
            batch = await consumer.getmany(partition, timeout_ms=500)
            received += [message.value for message in batch.get(partition, [])]
        return received
    finally:
        await consumer.stop()


def _round_trip_aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    return asyncio.run(_round_trip_aiokafka_async(bootstrap, topic, values))


ROUND_TRIPS = {"confluent-kafka": _round_trip_confluent, "kafka-python": _round_trip_kafka_python,
               "aiokafka": _round_trip_aiokafka}


@pytest.mark.scenario("Message sizes: 1 byte to near max.message.bytes")
@pytest.mark.parametrize("client", [_client(name) for name in ROUND_TRIPS])
def test_values_from_one_byte_to_near_the_topic_limit_round_trip_byte_identical(bootstrap, topic_name, client):
    topic = _create_topic(bootstrap, topic_name, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
    values = _values(SIZES)
    received = ROUND_TRIPS[client](bootstrap, topic, values)
    assert [len(value) for value in received] == SIZES
    assert received == values


def _kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["kcat", "-b", bootstrap, "-X", f"message.max.bytes={CLIENT_LIMIT}", *args],
                          input=stdin, capture_output=True, timeout=30, check=True)
    return done.stdout


@pytest.mark.client("kcat")
@pytest.mark.scenario("Message sizes: 1 byte to near max.message.bytes")
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt install kcat)")
def test_kcat_values_from_one_byte_to_near_the_topic_limit_round_trip(bootstrap, topic_name):
    """kcat delimits records by newline, so these values are letters (no newline) rather than random bytes."""
    topic = _create_topic(bootstrap, topic_name, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
    values = [bytes(ord("a") + (i + size) % 26 for i in range(size)) for size in SIZES]
    for value in values:  # one kcat run per record, so the large ones travel in batches of their own
        _kcat(bootstrap, "-P", "-t", topic, "-p", "0", stdin=value + b"\n")
    out = _kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(values)), "-e",
                "-f", "%s\n")
    assert out.split(b"\n")[:-1] == values


# ---- error: message too large ----------------------------------------------------------------

@pytest.fixture
def small_limit_topic(bootstrap: str, topic_name: str) -> str:
    return _create_topic(bootstrap, topic_name, SMALL_LIMIT)


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


@pytest.mark.client("kafka-python")
@pytest.mark.scenario("Error: message too large")
def test_kafka_python_gets_message_size_too_large_from_the_broker(bootstrap, small_limit_topic):
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    roomy_topic = _create_topic(bootstrap, f"{small_limit_topic}-roomy", KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=CLIENT_LIMIT, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(small_limit_topic, value=b"x" * TOO_LARGE_VALUE, partition=0).get(timeout=20)
        # the same producer sends the same value to a topic with room: the refusal was the broker's
        producer.send(roomy_topic, value=b"x" * TOO_LARGE_VALUE, partition=0).get(timeout=20)
    finally:
        producer.close(5)
    assert _end_offset(bootstrap, small_limit_topic) == 0


async def _aiokafka_send_too_large(bootstrap: str, small_limit_topic: str, roomy_topic: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import MessageSizeTooLargeError

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=CLIENT_LIMIT)
    await producer.start()
    try:
        with pytest.raises(MessageSizeTooLargeError):
            await asyncio.wait_for(
                producer.send_and_wait(small_limit_topic, value=b"x" * TOO_LARGE_VALUE, partition=0), 20)
        # the same producer sends the same value to a topic with room: the refusal was the broker's
        await asyncio.wait_for(producer.send_and_wait(roomy_topic, value=b"x" * TOO_LARGE_VALUE, partition=0), 20)
    finally:
        await producer.stop()


@pytest.mark.client("aiokafka")
@pytest.mark.scenario("Error: message too large")
def test_aiokafka_gets_message_size_too_large_from_the_broker(bootstrap, small_limit_topic):
    roomy_topic = _create_topic(bootstrap, f"{small_limit_topic}-roomy", KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
    asyncio.run(_aiokafka_send_too_large(bootstrap, small_limit_topic, roomy_topic))
    assert _end_offset(bootstrap, small_limit_topic) == 0


# ---- error: unknown topic with auto-create off -----------------------------------------------

def _topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return topic in admin.list_topics(timeout=10).topics


def _produce_unknown_confluent(bootstrap: str, topic: str) -> None:
    """librdkafka asks for auto-creation in its Metadata request; the broker must refuse it."""
    producer = Producer({"bootstrap.servers": bootstrap, "topic.metadata.propagation.max.ms": 1000,
                         "message.timeout.ms": 10000})
    errors: list = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(UNKNOWN_TOPIC_DEADLINE) == 0
    assert [error.code() for error in errors] in ([KafkaError._UNKNOWN_TOPIC], [KafkaError.UNKNOWN_TOPIC_OR_PART])


def _produce_unknown_kafka_python(bootstrap: str, topic: str) -> None:
    """kafka-python waits for the topic to appear in metadata and gives up after max_block_ms."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=3000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send(topic, value=b"x").get(timeout=UNKNOWN_TOPIC_DEADLINE)
    finally:
        producer.close(5)


async def _produce_unknown_aiokafka_async(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    await producer.start()
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, value=b"x"), UNKNOWN_TOPIC_DEADLINE)
    finally:
        await producer.stop()


def _produce_unknown_aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka.errors import UnknownTopicOrPartitionError

    with pytest.raises(UnknownTopicOrPartitionError):
        asyncio.run(_produce_unknown_aiokafka_async(bootstrap, topic))


UNKNOWN_TOPIC_PRODUCERS = {"confluent-kafka": _produce_unknown_confluent,
                           "kafka-python": _produce_unknown_kafka_python, "aiokafka": _produce_unknown_aiokafka}


@pytest.mark.scenario("Error: unknown topic with auto-create off")
@pytest.mark.parametrize("client", [_client(name) for name in UNKNOWN_TOPIC_PRODUCERS])
def test_producing_to_an_unknown_topic_fails_and_creates_nothing(broker_without_auto_create, client):
    topic = f"compat-missing-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    UNKNOWN_TOPIC_PRODUCERS[client](broker_without_auto_create, topic)
    assert time.monotonic() - started < UNKNOWN_TOPIC_DEADLINE + 5
    assert not _topic_exists(broker_without_auto_create, topic)
