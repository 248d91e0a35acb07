"""Transactions with confluent-kafka (librdkafka) against the broker under test: commit and abort seen by
read_committed and read_uncommitted consumers, fencing of a second producer with the same transactional id,
and offsets sent to a transaction in a consume-transform-produce loop."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

pytestmark = pytest.mark.client("confluent-kafka")
TIMEOUT_S = 30


def _transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _in_transaction(producer: Producer, topic: str, values: list[bytes], commit: bool, partition: int = 0) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=partition)
    producer.flush(TIMEOUT_S)  # the records reach the log before the end, so an abort has something to hide
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)


def _read_all(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    """Every record of the partition a consumer of `isolation` gets, up to what it may read (partition EOF)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    return values
                raise AssertionError(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {TIMEOUT_S} s; read {values}")


@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_read_committed_consumers_see_committed_records_once_and_aborted_ones_never(bootstrap, new_topic):
    producer = _transactional_producer(bootstrap, f"txn-{new_topic}")
    _in_transaction(producer, new_topic, [b"c1", b"c2"], commit=True)
    _in_transaction(producer, new_topic, [b"a1", b"a2"], commit=False)
    _in_transaction(producer, new_topic, [b"c3"], commit=True)
    assert _read_all(bootstrap, new_topic, "read_committed") == [b"c1", b"c2", b"c3"]


@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_read_uncommitted_consumers_also_see_aborted_records(bootstrap, new_topic):
    producer = _transactional_producer(bootstrap, f"txn-{new_topic}")
    _in_transaction(producer, new_topic, [b"a1"], commit=False)
    _in_transaction(producer, new_topic, [b"c1"], commit=True)
    assert _read_all(bootstrap, new_topic, "read_uncommitted") == [b"a1", b"c1"]


@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_read_committed_consumers_stop_before_an_open_transaction(bootstrap, new_topic):
    producer = _transactional_producer(bootstrap, f"txn-{new_topic}")
    _in_transaction(producer, new_topic, [b"c1"], commit=True)
    producer.begin_transaction()
    producer.produce(new_topic, b"open", partition=0)
    producer.flush(TIMEOUT_S)
    try:
        assert _read_all(bootstrap, new_topic, "read_committed") == [b"c1"]
    finally:
        producer.abort_transaction(TIMEOUT_S)


@pytest.mark.scenario("Transactions: fencing")
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(bootstrap, new_topic):
    transactional_id = f"txn-{new_topic}"
    zombie = _transactional_producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(new_topic, b"zombie", partition=0)
    zombie.flush(TIMEOUT_S)
    successor = _transactional_producer(bootstrap, transactional_id)  # aborts the zombie's open transaction
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal()
    _in_transaction(successor, new_topic, [b"successor"], commit=True)
    assert _read_all(bootstrap, new_topic, "read_committed") == [b"successor"]


@pytest.mark.scenario("Transactions: offsets in a transaction")
def test_offsets_sent_to_a_committed_transaction_are_the_groups_committed_offsets(bootstrap, new_topic):
    group = f"txn-group-{new_topic}"
    producer = _transactional_producer(bootstrap, f"txn-{new_topic}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        producer.begin_transaction()
        producer.produce(new_topic, b"out", partition=1)
        producer.send_offsets_to_transaction([TopicPartition(new_topic, 0, 7)], consumer.consumer_group_metadata(),
                                             TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        (committed,) = consumer.committed([TopicPartition(new_topic, 0)], TIMEOUT_S)
        assert committed.offset == 7
    finally:
        consumer.close()


@pytest.mark.scenario("Transactions: offsets in a transaction")
def test_offsets_sent_to_an_aborted_transaction_are_never_committed(bootstrap, new_topic):
    group = f"txn-group-{new_topic}"
    producer = _transactional_producer(bootstrap, f"txn-{new_topic}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(new_topic, 0, 3)], asynchronous=False)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(new_topic, 0, 9)], consumer.consumer_group_metadata(),
                                             TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)
        (committed,) = consumer.committed([TopicPartition(new_topic, 0)], TIMEOUT_S)
        assert committed.offset == 3
    finally:
        consumer.close()


def _committed_and_aborted(bootstrap: str, topic: str) -> None:
    """c1 c2 committed, a1 a2 aborted, c3 committed: what every read_committed consumer below must see as c1 c2 c3."""
    producer = _transactional_producer(bootstrap, f"txn-{topic}")
    _in_transaction(producer, topic, [b"c1", b"c2"], commit=True)
    _in_transaction(producer, topic, [b"a1", b"a2"], commit=False)
    _in_transaction(producer, topic, [b"c3"], commit=True)


@pytest.mark.client("kafka-python")
@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_a_kafka_python_read_committed_consumer_skips_aborted_records(bootstrap, new_topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition

    _committed_and_aborted(bootstrap, new_topic)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([KafkaPythonPartition(new_topic, 0)])
        consumer.seek_to_beginning()
        values = [message.value for message in consumer]
    finally:
        consumer.close()
    assert values == [b"c1", b"c2", b"c3"]


@pytest.mark.client("aiokafka")
@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_an_aiokafka_read_committed_consumer_skips_aborted_records(bootstrap, new_topic):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioPartition

    _committed_and_aborted(bootstrap, new_topic)

    async def read() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partition = AioPartition(new_topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            end = (await consumer.end_offsets([partition]))[partition]  # read_committed: the last stable offset
            values = []
            while await consumer.position(partition) < end:
                batches = await consumer.getmany(partition, timeout_ms=1000)
                values += [message.value for message in batches.get(partition, [])]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(read(), TIMEOUT_S)) == [b"c1", b"c2", b"c3"]
