"""Answers that the wire differential against Apache Kafka (compat-tests/test_wire_differential.py) found
differing, pinned here so they stay as Kafka gives them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from wire import headers, messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, FETCH = 0, 1
F = messages.FetchRequest


@pytest.fixture
def client(kafka_broker) -> Iterator[RawClient]:
    with contextlib.closing(RawClient(kafka_broker.bootstrap_servers)) as raw:
        yield raw


def _fetch(client: RawClient, topic: str, offset: int):
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def test_fetch_out_of_range_reports_no_offsets(client):
    """Kafka answers OFFSET_OUT_OF_RANGE with high watermark, last stable and log start offsets -1."""
    C, P = messages.CreateTopicsRequest, messages.ProduceRequest
    client.call(19, 5, C(topics=[C.CreatableTopic(name="t", num_partitions=1, replication_factor=1)], timeout_ms=5000))
    records = build_batch([Record(0, 1, None, b"v")])
    client.call(PRODUCE, 9, P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="t", partition_data=[P.PartitionProduceData(index=0, records=records)])]))
    answer = _fetch(client, "t", 100)
    offsets = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
    assert (answer.error_code, offsets) == (ErrorCode.OFFSET_OUT_OF_RANGE, (-1, -1, -1))


def test_fetch_of_an_unknown_topic_has_an_empty_aborted_transactions_list(client):
    """Kafka refuses unknown topics before reading, with an empty (not null) aborted transactions list."""
    answer = _fetch(client, "never-created", 0)
    assert (answer.error_code, answer.aborted_transactions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_served_api_at_an_unserved_version_closes_the_connection(client):
    """Kafka closes the connection on a Fetch (or any served API) at a version outside its range."""
    client.correlation_id += 1
    header = messages.RequestHeader(request_api_key=FETCH, request_api_version=3,
                                    correlation_id=client.correlation_id, client_id="t")
    body = messages.encode(F(replica_id=-1, topics=[]), 4, headers.encode_request_header(header))
    client.send_frame(bytes(body))
    assert client.is_closed_by_peer()


def test_unserved_version_frame_is_not_answered(client):
    """Nothing is written back before the close (no UNSUPPORTED_VERSION frame)."""
    client.correlation_id += 1
    header = messages.RequestHeader(request_api_key=PRODUCE, request_api_version=2,
                                    correlation_id=client.correlation_id, client_id="t")
    body = messages.encode(messages.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 3,
                           headers.encode_request_header(header))
    client.send_frame(bytes(body))
    assert client.sock.recv(4) == b""


def test_consumer_group_member_without_regex_is_described_with_an_empty_regex(client):
    """Kafka describes a KIP-848 member that subscribed by names with subscribed_topic_regex "" (not null)."""
    H, D = messages.ConsumerGroupHeartbeatRequest, messages.ConsumerGroupDescribeRequest
    joined = client.call(68, 0, H(group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                                  subscribed_topic_names=["t"], topic_partitions=[]))
    assert joined.error_code == ErrorCode.NONE
    described = client.call(69, 0, D(group_ids=["g"]))
    assert described.groups[0].members[0].subscribed_topic_regex == ""
