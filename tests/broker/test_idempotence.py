"""Idempotent produce end to end over a socket: retries, gaps, restarts, DescribeProducers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, DESCRIBE_PRODUCERS = 0, 61
TOPIC = "idempotent"
PID, EPOCH = 7_000_001, 0
P = messages.ProduceRequest
D = messages.DescribeProducersRequest


def _batch(seq: int, count: int = 1, epoch: int = EPOCH) -> bytes:
    now = time.time_ns() // 1_000_000
    records = [Record(i, now, None, b"v%d" % (seq + i), ()) for i in range(count)]
    return build_batch(records, producer_id=PID, producer_epoch=epoch, base_sequence=seq)


def _produce(client: RawClient, records: bytes, partition: int = 0):
    request = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=records)])])
    return client.call(PRODUCE, 9, request).responses[0].partition_responses[0]


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic(TOPIC, 1)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def test_retried_batch_gets_the_same_offset_and_is_stored_once(kafka_broker, client) -> None:
    _produce(client, _batch(0, 2))
    batch = _batch(2, 3)
    first = _produce(client, batch)
    retry = _produce(client, batch)
    assert (first.error_code, retry.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert first.base_offset == retry.base_offset == 2
    assert kafka_broker.broker.partition_log(TOPIC, 0).log_end_offset == 5


def test_sequence_gap_is_out_of_order_sequence_number(client) -> None:
    _produce(client, _batch(0))
    response = _produce(client, _batch(2))
    assert response.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_stale_epoch_is_invalid_producer_epoch(client) -> None:
    _produce(client, _batch(0, epoch=1))
    assert _produce(client, _batch(1, epoch=0)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_duplicate_is_recognised_after_a_broker_restart(tmp_path: Path) -> None:
    batch = _batch(0, 2)
    with running_broker(tmp_path) as broker:
        broker.broker.create_topic(TOPIC, 1)
        first = _call_once(broker.bootstrap_servers, batch)
    with running_broker(tmp_path) as broker:
        retry = _call_once(broker.bootstrap_servers, batch)
        assert broker.broker.partition_log(TOPIC, 0).log_end_offset == 2
    assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, first.base_offset)


def _call_once(bootstrap: str, records: bytes):
    raw = RawClient(bootstrap)
    try:
        return _produce(raw, records)
    finally:
        raw.close()


def test_describe_producers_reports_the_partitions_producers(client) -> None:
    _produce(client, _batch(0, 4))
    request = D(topics=[D.TopicRequest(name=TOPIC, partition_indexes=[0, 5])])
    (topic,) = client.call(DESCRIBE_PRODUCERS, 0, request).topics
    known, missing = topic.partitions
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert known.error_code == ErrorCode.NONE
    (producer,) = known.active_producers
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence) == (PID, EPOCH, 3)
    assert (producer.coordinator_epoch, producer.current_txn_start_offset) == (-1, -1)
    assert producer.last_timestamp > 0


def test_describe_producers_of_an_unknown_topic(client) -> None:
    request = D(topics=[D.TopicRequest(name="nope", partition_indexes=[0])])
    (topic,) = client.call(DESCRIBE_PRODUCERS, 0, request).topics
    assert topic.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
