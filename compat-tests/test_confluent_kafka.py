"""confluent-kafka (librdkafka) against the broker under test."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from confluent_client import RECENT_TIMESTAMP, consume, produce
from matrix import codec_params
from settle import eventually, partition_count

pytestmark = pytest.mark.client("confluent-kafka")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.scenario("Metadata and broker discovery")
def test_metadata_lists_the_broker_and_the_topic(bootstrap, new_topic):
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert len(metadata.brokers) == 1
    assert sorted(metadata.topics[new_topic].partitions) == [0, 1, 2]


@pytest.mark.parametrize("codec", codec_params(CODECS, "Produce and consume: keys, null keys, null values", "Headers",
                                                "Explicit timestamps"))
def test_records_round_trip_with_keys_headers_and_timestamps(bootstrap, new_topic, codec):
    records = [{"key": f"k{i}".encode(), "value": f"value-{i}".encode() * (i + 1), "partition": 1,
                "headers": [("h", f"{i}".encode()), ("empty", None)], "timestamp": RECENT_TIMESTAMP + i}
               for i in range(50)]
    produce(bootstrap, new_topic, records, **{"compression.type": codec})
    received = consume(bootstrap, new_topic, 1, 50)
    assert [m.key() for m in received] == [r["key"] for r in records]
    assert [m.value() for m in received] == [r["value"] for r in records]
    assert [m.headers() for m in received] == [r["headers"] for r in records]
    assert [m.timestamp()[1] for m in received] == [r["timestamp"] for r in records]
    assert [m.offset() for m in received] == list(range(50))


@pytest.mark.scenario("Produce and consume: keys, null keys, null values")
def test_null_key_and_null_value_round_trip(bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"key": None, "value": None, "partition": 0}])
    (message,) = consume(bootstrap, new_topic, 0, 1)
    assert (message.key(), message.value()) == (None, None)


@pytest.mark.scenario("Watermarks: earliest and latest offsets")
def test_watermarks_follow_the_produced_records(bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": b"x", "partition": 2} for _ in range(7)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(new_topic, 2), timeout=10) == (0, 7)
    finally:
        consumer.close()


@pytest.mark.scenario("Consume by timestamp")
def test_offsets_for_times_finds_the_first_record_at_or_after(bootstrap, new_topic):
    records = [{"value": b"t", "partition": 0, "timestamp": 1_000_000 + 1000 * i} for i in range(10)]
    produce(bootstrap, new_topic, records)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
    try:
        (found,) = consumer.offsets_for_times([TopicPartition(new_topic, 0, 1_004_500)], timeout=10)
    finally:
        consumer.close()
    assert found.offset == 5


@pytest.mark.scenario("Consume from explicit offset")
def test_consume_from_an_explicit_offset(bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": f"{i}".encode(), "partition": 0} for i in range(10)])
    received = consume(bootstrap, new_topic, 0, 3, offset=7)
    assert [m.value() for m in received] == [b"7", b"8", b"9"]


@pytest.mark.scenario("Idempotent producer")
def test_idempotent_producer_delivers_in_order(bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": f"{i}".encode(), "partition": 0} for i in range(100)],
             **{"enable.idempotence": True})
    received = consume(bootstrap, new_topic, 0, 100)
    assert [m.value() for m in received] == [f"{i}".encode() for i in range(100)]


@pytest.mark.scenario("Error: message too large")
def test_message_larger_than_max_message_bytes_is_refused(bootstrap, new_topic):
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 3_000_000})
    errors = []
    producer.produce(new_topic, value=b"x" * 2_000_000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert errors and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


@pytest.mark.scenario("Error: topic already exists")
def test_create_existing_topic_fails_with_topic_already_exists(bootstrap, new_topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(new_topic, num_partitions=1, replication_factor=1)])[new_topic]
    with pytest.raises(Exception) as failure:
        future.result(10)
    assert failure.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.scenario("Error: invalid replication factor")
def test_replication_factor_above_broker_count_is_refused(bootstrap, topic_name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=3)])[topic_name]
    with pytest.raises(Exception) as failure:
        future.result(10)
    assert failure.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


@pytest.mark.scenario("Error: invalid topic name")
def test_invalid_topic_name_is_refused(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic("bad/name", num_partitions=1, replication_factor=1)])["bad/name"]
    with pytest.raises(Exception) as failure:
        future.result(10)
    assert failure.value.args[0].code() == KafkaError.TOPIC_EXCEPTION


@pytest.mark.scenario("Create partitions")
@pytest.mark.scenario("Create/describe/delete topics")
def test_create_partitions_then_delete_topic(bootstrap, new_topic):
    """The broker's metadata shows each change a moment after the answer (settle.py), so the test waits for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(new_topic, 5)])[new_topic].result(10)
    assert eventually(lambda: partition_count(admin, new_topic), lambda count: count == 5) == 5
    admin.delete_topics([new_topic])[new_topic].result(10)
    assert not eventually(lambda: new_topic in admin.list_topics(timeout=10).topics, lambda listed: not listed)
