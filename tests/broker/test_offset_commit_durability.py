"""Group commit through a real connection: commits that arrive together are written together,
and none is acknowledged before it is in `__consumer_offsets`."""

from __future__ import annotations

import struct

import pytest

from kbroker.coordinator.offsets import OFFSETS_TOPIC, decode_key, decode_value
from wire import headers, messages
from wire.errors import ErrorCode
from wire.records import iter_batches, iter_records

from raw_client import RawClient

OFFSET_COMMIT = 8
VERSION = 8


@pytest.fixture
def client(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _commit_frame(client: RawClient, group: str, offset: int) -> bytes:
    R = messages.OffsetCommitRequest
    body = client.request_bytes(OFFSET_COMMIT, VERSION, R(group_id=group, topics=[R.OffsetCommitRequestTopic(
        name="t", partitions=[R.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]))
    return struct.pack(">i", len(body)) + body


def _error_code(frame: bytes) -> int:
    _, at = headers.decode_response_header(frame, OFFSET_COMMIT, VERSION)
    response, _ = messages.decode("OffsetCommitResponse", VERSION, frame, at)
    return response.topics[0].partitions[0].error_code


def _stored(broker, group: str) -> list[tuple[tuple[str, str, int], int]]:
    store = broker.coordinator.offsets
    data = broker.partition_log(OFFSETS_TOPIC, store.partition_for(group)).read(0, 1 << 30).read_bytes()
    return [(decode_key(r.key), decode_value(r.value).offset)
            for at, _ in iter_batches(data) for r in iter_records(data, at)]


def test_pipelined_commits_are_in_the_log_when_their_answers_arrive(client, kafka_broker):
    kafka_broker.broker.create_topic("t", 1)
    client.sock.sendall(b"".join(_commit_frame(client, "pipelined", offset) for offset in range(50)))
    assert [_error_code(client.read_frame()) for _ in range(50)] == [ErrorCode.NONE] * 50
    assert _stored(kafka_broker.broker, "pipelined") == [(("pipelined", "t", 0), offset) for offset in range(50)]


def test_commits_arriving_together_share_one_batch(client, kafka_broker):
    kafka_broker.broker.create_topic("t", 1)
    client.sock.sendall(b"".join(_commit_frame(client, "together", offset) for offset in range(20)))
    for _ in range(20):
        client.read_frame()
    store = kafka_broker.broker.coordinator.offsets
    data = kafka_broker.broker.partition_log(OFFSETS_TOPIC, store.partition_for("together")).read(0, 1 << 30)
    assert len(list(iter_batches(data.read_bytes()))) < 20
