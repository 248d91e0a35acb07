"""Long-polling fetches (max_wait_ms / min_bytes) are woken by appends to their own partitions,
as in Kafka's fetch purgatory, and by nothing else."""

from __future__ import annotations

import time

import pytest

from wire import headers, messages
from wire.records import Record, build_batch

from raw_client import RawClient

FETCH, PRODUCE, DELETE_TOPICS, FETCH_VERSION = 1, 0, 20, 12
F = messages.FetchRequest
P = messages.ProduceRequest


@pytest.fixture
def topic(kafka_broker) -> str:
    kafka_broker.broker.create_topic("polled", 2)
    return "polled"


@pytest.fixture
def fetcher(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


@pytest.fixture
def producer(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _start_fetch(client: RawClient, topic: str, partition: int, max_wait_ms: int) -> float:
    request = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[
                    F.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[])
    client.send_frame(client.request_bytes(FETCH, FETCH_VERSION, request))
    return time.monotonic()


def _finish_fetch(client: RawClient, started: float) -> tuple[float, int]:
    """(seconds the fetch took, bytes of records it returned)."""
    frame = client.read_frame()
    took = time.monotonic() - started
    _, at = headers.decode_response_header(frame, FETCH, FETCH_VERSION)
    response, _ = messages.decode("FetchResponse", FETCH_VERSION, frame, at)
    return took, sum(len(p.records or b"") for t in response.responses for p in t.partitions)


def _produce(client: RawClient, topic: str, partition: int) -> None:
    batch = build_batch([Record(0, 1_000, None, b"v", [])])
    response = client.call(PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]))
    assert response.responses[0].partition_responses[0].error_code == 0


def test_an_append_to_its_partition_answers_a_waiting_fetch_at_once(fetcher, producer, topic):
    started = _start_fetch(fetcher, topic, 0, max_wait_ms=10_000)
    time.sleep(0.2)
    _produce(producer, topic, 0)
    took, returned = _finish_fetch(fetcher, started)
    assert returned > 0
    assert took < 5


def test_an_append_to_another_partition_leaves_a_waiting_fetch_waiting(fetcher, producer, topic):
    started = _start_fetch(fetcher, topic, 0, max_wait_ms=800)
    time.sleep(0.1)
    _produce(producer, topic, 1)
    took, returned = _finish_fetch(fetcher, started)
    assert returned == 0
    assert took >= 0.75


def test_deleting_the_topic_answers_a_waiting_fetch_at_once(fetcher, producer, topic):
    started = _start_fetch(fetcher, topic, 0, max_wait_ms=10_000)
    time.sleep(0.2)
    deleted = producer.call(DELETE_TOPICS, 4, messages.DeleteTopicsRequest(topic_names=[topic], timeout_ms=5000))
    assert deleted.responses[0].error_code == 0
    took, _ = _finish_fetch(fetcher, started)
    assert took < 5
