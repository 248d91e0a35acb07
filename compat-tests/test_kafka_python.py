"""kafka-python against the broker under test."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from confluent_client import RECENT_TIMESTAMP
from matrix import codec_params

pytestmark = pytest.mark.client("kafka-python")
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _consume(bootstrap: str, topic: str, partition: int, count: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    received = []
    for message in consumer:
        received.append(message)
        if len(received) == count:
            break
    consumer.close()
    return received


@pytest.mark.parametrize("codec", codec_params(CODECS, "Headers", "Explicit timestamps"))
def test_records_round_trip_with_keys_headers_and_timestamps(bootstrap, new_topic, codec):
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
    for i in range(30):
        producer.send(new_topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0,
                      headers=[("h", f"{i}".encode())], timestamp_ms=RECENT_TIMESTAMP + i)
    producer.flush(20)
    producer.close()
    received = _consume(bootstrap, new_topic, 0, 30)
    assert [(m.key, m.value, m.headers, m.timestamp, m.offset) for m in received] == [
        (f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())], RECENT_TIMESTAMP + i, i)
        for i in range(30)]


def _produce_timestamped(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for timestamp in timestamps:
        producer.send(topic, value=b"x", partition=partition, timestamp_ms=timestamp)
    producer.flush(20)
    producer.close()


@pytest.mark.scenario("Watermarks: earliest and latest offsets")
def test_beginning_and_end_offsets(bootstrap, new_topic):
    _produce_timestamped(bootstrap, new_topic, 2, [10_000 + i * 10 for i in range(5)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(new_topic, 2)
    assert consumer.end_offsets([tp])[tp] == 5
    assert consumer.beginning_offsets([tp])[tp] == 0
    consumer.close()


@pytest.mark.scenario("Consume by timestamp")
def test_offsets_for_times_finds_the_first_record_at_or_after(bootstrap, new_topic):
    _produce_timestamped(bootstrap, new_topic, 2, [10_000 + i * 10 for i in range(5)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(new_topic, 2)
    assert consumer.offsets_for_times({tp: 10_025})[tp].offset == 3
    consumer.close()


@pytest.mark.scenario("Create/describe/delete topics")
def test_admin_creates_and_deletes_a_topic(bootstrap, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])
    assert topic_name in admin.list_topics()
    admin.delete_topics([topic_name])
    assert topic_name not in admin.list_topics()
    admin.close()
