"""Where a consumer starts reading, and an idempotent producer that rides out a broker restart.

- "Consume from earliest" / "Consume from latest": a fresh group (nothing committed) assigned a
  partition starts where `auto.offset.reset` says.
- "Offset out of range: auto.offset.reset": after DeleteRecords moved the log start past the
  consumer's position (an explicit seek, or the group's committed offset), the broker answers
  OFFSET_OUT_OF_RANGE and the client resets: earliest reads from the new log start, latest reads
  only records produced afterwards.
- "Idempotent producer: retries across a broker restart": librdkafka with enable.idempotence keeps
  producing while its broker is stopped (SIGTERM) and started again on the same data dir and port;
  every record lands exactly once, in order.

Consumers use assign(), never subscribe(), so no group rebalance delay slows the tests.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Callable

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_STORED, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from confluent_client import consume, produce  # noqa: E402
from group_clients import PYTHON_COMMITTERS  # noqa: E402

CONSUMERS = [pytest.param(name, marks=pytest.mark.client(name)) for name in PYTHON_COMMITTERS]
PARTITION, RECORDS, DELETED_BEFORE, STALE_OFFSET = 0, 10, 6, 2
READ_TIMEOUT = 20.0
Received = list[tuple[int, bytes]]  # (offset, value)
OnIdle = Callable[[], None]


# ---- reading one partition from wherever the client's reset policy puts it ------------------------

def _read_confluent(bootstrap: str, topic: str, group: str, policy: str, offset: int | None, want: int,
                    on_idle: OnIdle) -> Received:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": policy,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, PARTITION, OFFSET_STORED if offset is None else offset)])
    received: Received = []
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        while len(received) < want and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or (message.error() and message.error().retriable()):
                on_idle()  # e.g. NOT_COORDINATOR while Kafka creates __consumer_offsets: the client retries
            elif message.error():
                raise AssertionError(message.error())
            else:
                received.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return received


def _read_kafka_python(bootstrap: str, topic: str, group: str, policy: str, offset: int | None, want: int,
                       on_idle: OnIdle) -> Received:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset=policy,
                             enable_auto_commit=False, fetch_max_wait_ms=50, request_timeout_ms=15000)
    tp = KafkaTopicPartition(topic, PARTITION)
    consumer.assign([tp])
    if offset is not None:
        consumer.seek(tp, offset)
    received: Received = []
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        while len(received) < want and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200).get(tp, [])
            received += [(record.offset, record.value) for record in batch]
            if not batch:
                on_idle()
    finally:
        consumer.close(autocommit=False)
    return received


def _read_aiokafka(bootstrap: str, topic: str, group: str, policy: str, offset: int | None, want: int,
                   on_idle: OnIdle) -> Received:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def read() -> Received:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset=policy,
                                    enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        tp = AioTopicPartition(topic, PARTITION)
        received: Received = []
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            consumer.assign([tp])
            if offset is not None:
                consumer.seek(tp, offset)
            while len(received) < want and time.monotonic() < deadline:
                batch = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
                received += [(record.offset, record.value) for record in batch]
                if not batch:
                    on_idle()
        finally:
            await consumer.stop()
        return received

    return asyncio.run(read())


READERS: dict[str, Callable[..., Received]] = {
    "confluent-kafka": _read_confluent,
    "kafka-python": _read_kafka_python,
    "aiokafka": _read_aiokafka,
}


def _nothing() -> None:
    pass


class NewRecords:
    """Produces one "new" record each time the consumer finds nothing, so a consumer that reset to
    latest (at a moment the test cannot see) is sure to be handed records produced after it."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.sent = 0

    def __call__(self) -> None:
        self.producer.produce(self.topic, value=f"new-{self.sent}".encode(), partition=PARTITION)
        assert self.producer.flush(10) == 0
        self.sent += 1


def _fill(bootstrap: str, topic: str) -> None:
    produce(bootstrap, topic, [{"value": f"v{i}".encode(), "partition": PARTITION} for i in range(RECORDS)])


def _delete_records_before(bootstrap: str, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, PARTITION, offset)]).values()
    assert future.result(15).low_watermark == offset


def _group() -> str:
    return f"reset-{uuid.uuid4().hex[:10]}"


def _assert_only_new_records(received: Received, first_new_offset: int) -> None:
    """Latest: nothing from before the reset, then consecutive offsets of records produced after it."""
    assert received, "the consumer received nothing though new records kept arriving"
    offsets = [offset for offset, _ in received]
    assert offsets[0] >= first_new_offset, received
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), received
    assert all(value.startswith(b"new-") for _, value in received), received


# ---- Consume from earliest / latest ------------------------------------------------------------

@pytest.mark.scenario("Consume from earliest")
@pytest.mark.parametrize("client", CONSUMERS)
def test_fresh_group_with_earliest_reads_the_partition_from_offset_zero(bootstrap, new_topic, client):
    _fill(bootstrap, new_topic)
    received = READERS[client](bootstrap, new_topic, _group(), "earliest", None, RECORDS, _nothing)
    assert received == [(i, f"v{i}".encode()) for i in range(RECORDS)]


@pytest.mark.scenario("Consume from latest")
@pytest.mark.parametrize("client", CONSUMERS)
def test_fresh_group_with_latest_reads_only_records_produced_after_it_started(bootstrap, new_topic, client):
    _fill(bootstrap, new_topic)
    received = READERS[client](bootstrap, new_topic, _group(), "latest", None, 3, NewRecords(bootstrap, new_topic))
    _assert_only_new_records(received, RECORDS)


# ---- Offset out of range: auto.offset.reset ----------------------------------------------------

def _stale_position(client: str, bootstrap: str, topic: str, group: str, stale_by: str) -> int | None:
    """The offset to assign with: an explicit one, or None with the group's commit standing in."""
    if stale_by == "seek":
        return STALE_OFFSET
    commit, committed = PYTHON_COMMITTERS[client]
    commit(bootstrap, group, topic, {PARTITION: (STALE_OFFSET, "before DeleteRecords")})
    assert committed(bootstrap, group, topic, [PARTITION])[PARTITION][0] == STALE_OFFSET
    return None


@pytest.mark.scenario("Offset out of range: auto.offset.reset")
@pytest.mark.parametrize("stale_by", ["seek", "committed"])
@pytest.mark.parametrize("client", CONSUMERS)
def test_out_of_range_position_resets_to_the_new_log_start_with_earliest(bootstrap, new_topic, client, stale_by):
    _fill(bootstrap, new_topic)
    group = _group()
    offset = _stale_position(client, bootstrap, new_topic, group, stale_by)
    _delete_records_before(bootstrap, new_topic, DELETED_BEFORE)
    received = READERS[client](bootstrap, new_topic, group, "earliest", offset, RECORDS - DELETED_BEFORE, _nothing)
    assert received == [(i, f"v{i}".encode()) for i in range(DELETED_BEFORE, RECORDS)]


@pytest.mark.scenario("Offset out of range: auto.offset.reset")
@pytest.mark.parametrize("stale_by", ["seek", "committed"])
@pytest.mark.parametrize("client", CONSUMERS)
def test_out_of_range_position_resets_to_the_end_with_latest(bootstrap, new_topic, client, stale_by):
    _fill(bootstrap, new_topic)
    group = _group()
    offset = _stale_position(client, bootstrap, new_topic, group, stale_by)
    _delete_records_before(bootstrap, new_topic, DELETED_BEFORE)
    received = READERS[client](bootstrap, new_topic, group, "latest", offset, 3, NewRecords(bootstrap, new_topic))
    _assert_only_new_records(received, RECORDS)


# ---- Idempotent producer: retries across a broker restart ----------------------------------------

RESTART_RECORDS, RESTART_PARTITIONS = 600, 2
DOWN_FOR = 1.0


@pytest.fixture(scope="module")
def restartable_broker(own_broker):
    """A broker of this module's own, so the test may stop and start it on the same data dir and port."""
    return own_broker("restart")


class SteadyProducer(threading.Thread):
    """An idempotent librdkafka producer sending numbered records at a steady pace from its own thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="steady-producer", daemon=True)
        self.topic = topic
        # a periodic metadata refresh: once (Kafka 4.4 restarting on a loaded CI machine) librdkafka kept a
        # partition's restarted leader "not found in cache" until the records timed out a minute later
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 60000, "retry.backoff.ms": 50,
                                  "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.acknowledged = 0
        self.failures: list[str] = []

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.failures.append(f"{message.partition()}/{message.value()!r}: {error}")
        else:
            self.acknowledged += 1

    def run(self) -> None:
        for i in range(RESTART_RECORDS):
            self.producer.produce(self.topic, value=f"{i:04d}".encode(), partition=i % RESTART_PARTITIONS,
                                  on_delivery=self._on_delivery)
            self.producer.poll(0.005)

    def wait_acknowledged(self, count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.acknowledged >= count, f"only {self.acknowledged} of {count} records acknowledged"


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Idempotent producer: retries across a broker restart")
@pytest.mark.parametrize("stop_signal", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                         pytest.param(signal.SIGKILL, id="SIGKILL")])
def test_idempotent_producer_writes_every_record_once_in_order_across_a_broker_restart(restartable_broker,
                                                                                      stop_signal):
    topic = f"restart-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": restartable_broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=RESTART_PARTITIONS, replication_factor=1)])[topic].result(15)
    sender = SteadyProducer(restartable_broker.bootstrap, topic)
    sender.start()
    sender.wait_acknowledged(RESTART_RECORDS // 4)
    restartable_broker.stop(stop_signal)  # a clean shutdown or a crash, while records are in flight
    time.sleep(DOWN_FOR)  # the producer keeps producing into its queue and retrying
    restartable_broker.start()
    sender.join(30)
    assert not sender.is_alive()
    assert sender.producer.flush(60) == 0
    assert sender.failures == []
    assert sender.acknowledged == RESTART_RECORDS
    for partition in range(RESTART_PARTITIONS):
        expected = [f"{i:04d}".encode() for i in range(partition, RESTART_RECORDS, RESTART_PARTITIONS)]
        received = consume(restartable_broker.bootstrap, topic, partition, len(expected))
        assert [message.value() for message in received] == expected
        assert [message.offset() for message in received] == list(range(len(expected)))
        assert _high_watermark(restartable_broker.bootstrap, topic, partition) == len(expected)  # no duplicates


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
    finally:
        consumer.close()
