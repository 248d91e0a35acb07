"""Produce requests Kafka refuses before appending anything (ProduceRequest.validateRecords and KafkaApis' check for
transactional records): one magic-2 batch per partition, no zstd before v7, no transactional batch without a
transactional id. Each refusal here is the answer real Kafka gives (compat-tests' wire differential, Produce)."""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator

import pytest

from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, LIST_OFFSETS, CREATE_TOPICS = 0, 2, 19
P = messages.ProduceRequest
TOPIC = "validated"
BATCH = build_batch([Record(0, 1, b"k", b"v")])
ZSTD = 4


@pytest.fixture
def client(kafka_broker) -> Iterator[RawClient]:
    with contextlib.closing(RawClient(kafka_broker.bootstrap_servers)) as raw:
        C = messages.CreateTopicsRequest
        raw.call(CREATE_TOPICS, 5, C(topics=[C.CreatableTopic(name=TOPIC, num_partitions=2, replication_factor=1)],
                                     timeout_ms=5000))
        yield raw


def _produce(client: RawClient, records_by_partition: dict[int, bytes], version: int = 9,
             transactional_id: str | None = None, acks: int = -1) -> list:
    request = P(acks=acks, timeout_ms=5000, transactional_id=transactional_id, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=index, records=records)
                                    for index, records in records_by_partition.items()])])
    return client.call(PRODUCE, version, request).responses[0].partition_responses


def _end_offset(client: RawClient, partition: int) -> int:
    L = messages.ListOffsetsRequest
    request = L(replica_id=-1, topics=[L.ListOffsetsTopic(name=TOPIC, partitions=[
        L.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
    return client.call(LIST_OFFSETS, 5, request).topics[0].partitions[0].offset


def _magic_1_message() -> bytes:
    body = struct.pack(">bbqii", 1, 0, 1, -1, 1) + b"v"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_two_batches_for_one_partition_are_refused_as_an_invalid_record_and_none_is_written(client):
    (answer,) = _produce(client, {0: BATCH + BATCH})
    assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_RECORD, None)
    assert _end_offset(client, 0) == 0


def test_a_partition_without_a_batch_is_refused_as_an_invalid_record(client):
    (answer,) = _produce(client, {0: b""})
    assert answer.error_code == ErrorCode.INVALID_RECORD


def test_a_magic_1_message_set_is_refused_as_an_invalid_record(client):
    (answer,) = _produce(client, {0: _magic_1_message()})
    assert answer.error_code == ErrorCode.INVALID_RECORD


def test_a_zstd_batch_before_produce_v7_is_refused_as_an_unsupported_compression_type(client):
    (answer,) = _produce(client, {0: build_batch([Record(0, 1, b"k", b"v" * 40)], codec=ZSTD)}, version=6)
    assert answer.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert _end_offset(client, 0) == 0


def test_a_zstd_batch_from_produce_v7_is_written(client):
    (answer,) = _produce(client, {0: build_batch([Record(0, 1, b"k", b"v" * 40)], codec=ZSTD)}, version=7)
    assert answer.error_code == ErrorCode.NONE
    assert _end_offset(client, 0) == 1


def test_only_the_partition_with_invalid_records_is_refused(client):
    answers = _produce(client, {0: BATCH + BATCH, 1: BATCH})
    assert [(a.index, a.error_code) for a in answers] == [(0, ErrorCode.INVALID_RECORD), (1, ErrorCode.NONE)]


def test_an_unknown_partition_is_answered_as_unknown_before_its_records_are_looked_at(client):
    (answer,) = _produce(client, {7: BATCH + BATCH})
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_transactional_batch_without_a_transactional_id_fails_the_whole_request(client):
    transactional = build_batch([Record(0, 1, b"k", b"v")], producer_id=4242, producer_epoch=0, base_sequence=0,
                                is_transactional=True)
    answers = _produce(client, {0: transactional, 1: BATCH})
    assert [(a.index, a.error_code) for a in answers] == [
        (0, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), (1, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert answers[0].error_message is None  # Kafka's ApiError drops a message that is the error's own text
    assert (_end_offset(client, 0), _end_offset(client, 1)) == (0, 0)


def test_invalid_records_keep_their_answer_when_acks_is_invalid_too(client):
    answers = _produce(client, {0: BATCH + BATCH, 1: BATCH}, acks=2)
    assert [(a.index, a.error_code) for a in answers] == [(0, ErrorCode.INVALID_RECORD),
                                                          (1, ErrorCode.INVALID_REQUIRED_ACKS)]


def test_a_first_batch_size_below_the_minimum_fails_the_whole_request_as_corrupt(client):
    corrupt = BATCH[:8] + struct.pack(">i", 5) + BATCH[12:]
    answers = _produce(client, {0: corrupt, 1: BATCH})
    assert [(a.index, a.error_code) for a in answers] == [(0, ErrorCode.CORRUPT_MESSAGE),
                                                          (1, ErrorCode.CORRUPT_MESSAGE)]
    assert answers[0].error_message == "Record size 5 is less than the minimum record overhead (14)"
    assert _end_offset(client, 1) == 0


def test_a_corrupt_second_batch_is_refused_as_corrupt_for_its_partition_only(client):
    answers = _produce(client, {0: BATCH + BATCH[:8] + struct.pack(">i", 3), 1: BATCH})
    assert [(a.index, a.error_code) for a in answers] == [(0, ErrorCode.CORRUPT_MESSAGE), (1, ErrorCode.NONE)]
