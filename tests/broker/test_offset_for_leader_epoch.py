"""OffsetForLeaderEpoch (23) over the wire, answered as Kafka's partition leader answers it.

A single node leads every partition at epoch 0; where a test needs later epochs in the log, it
appends to the partition log at those epochs, as a leader elected later would have.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, DELETE_RECORDS, API_VERSIONS, OFFSET_FOR_LEADER_EPOCH = 0, 21, 18, 23
NO_CHECK = -1  # current_leader_epoch: the client makes no claim
TOPIC = "epochs"
Q = messages.OffsetForLeaderEpochRequest
P = messages.ProduceRequest
D = messages.DeleteRecordsRequest


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic(TOPIC, 2)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _produce(client: RawClient, count: int, partition: int = 0) -> None:
    batch = build_batch([Record(i, 1_000, b"k", b"v", []) for i in range(count)])
    request = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=batch)])])
    assert client.call(PRODUCE, 9, request).responses[0].partition_responses[0].error_code == 0


def _ask(client: RawClient, leader_epoch: int, current_leader_epoch: int = NO_CHECK, *, topic: str = TOPIC,
         partition: int = 0, version: int = 4, replica_id: int = -1):
    request = Q(replica_id=replica_id, topics=[Q.OffsetForLeaderTopic(topic=topic, partitions=[
        Q.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current_leader_epoch,
                                   leader_epoch=leader_epoch)])])
    response = client.call(OFFSET_FOR_LEADER_EPOCH, version, request)
    (found,) = response.topics[0].partitions
    assert (response.topics[0].topic, found.partition) == (topic, partition)
    return found


def _answer(found) -> tuple[int, int, int]:
    return found.error_code, found.leader_epoch, found.end_offset


def _append_at_epoch(kafka_broker, epoch: int, count: int) -> None:
    log = kafka_broker.broker.partition_log(TOPIC, 0)
    log.append(build_batch([Record(i, 1_000, None, b"v", []) for i in range(count)]), leader_epoch=epoch)
    log.update_high_watermark(log.log_end_offset)


def test_api_versions_advertises_every_version_of_offset_for_leader_epoch(client):
    response = client.call(API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                        client_software_version="1"))
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed[OFFSET_FOR_LEADER_EPOCH] == (2, 4)


def test_latest_epoch_ends_at_the_log_end_offset(client):
    _produce(client, 5)
    assert _answer(_ask(client, 0)) == (ErrorCode.NONE, 0, 5)


def test_empty_partition_reports_its_epoch_ending_at_offset_zero(client):
    assert _answer(_ask(client, 0)) == (ErrorCode.NONE, 0, 0)


def test_older_epoch_ends_where_the_next_epoch_starts(client, kafka_broker):
    _produce(client, 3)
    _append_at_epoch(kafka_broker, 2, 4)
    assert _answer(_ask(client, 0)) == (ErrorCode.NONE, 0, 3)


def test_epoch_older_than_every_kept_epoch_ends_at_the_log_start_offset(client, kafka_broker):
    _produce(client, 3)
    _append_at_epoch(kafka_broker, 2, 4)
    request = D(timeout_ms=5000, topics=[D.DeleteRecordsTopic(name=TOPIC, partitions=[
        D.DeleteRecordsPartition(partition_index=0, offset=5)])])
    assert client.call(DELETE_RECORDS, 2, request).topics[0].partitions[0].error_code == 0
    assert _answer(_ask(client, 0)) == (ErrorCode.NONE, 0, 5)


def test_epoch_newer_than_the_latest_is_undefined(client):
    _produce(client, 2)
    assert _answer(_ask(client, 1)) == (ErrorCode.NONE, -1, -1)


def test_undefined_epoch_is_undefined(client):
    _produce(client, 2)
    assert _answer(_ask(client, -1)) == (ErrorCode.NONE, -1, -1)


def test_current_leader_epoch_matching_ours_is_answered(client):
    _produce(client, 2)
    assert _answer(_ask(client, 0, current_leader_epoch=0)) == (ErrorCode.NONE, 0, 2)


def test_current_leader_epoch_newer_than_ours_is_unknown_leader_epoch(client):
    assert _answer(_ask(client, 0, current_leader_epoch=1)) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)


def test_current_leader_epoch_older_than_ours_is_fenced(client):
    # only -1 means "no claim"; any other value below ours (0) is a fenced, older leader
    assert _answer(_ask(client, 0, current_leader_epoch=-2)) == (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)


def test_unknown_topic_is_unknown_topic_or_partition(client):
    assert _answer(_ask(client, 0, topic="nope")) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


def test_unknown_partition_is_unknown_topic_or_partition(client):
    assert _answer(_ask(client, 0, partition=2)) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


@pytest.mark.parametrize(("version", "replica_id"), [(2, -1), (3, -1), (3, 1), (4, -1), (4, 1)])
def test_consumers_and_followers_of_every_version_get_the_leaders_answer(client, version, replica_id):
    _produce(client, 4)
    assert _answer(_ask(client, 0, 0, version=version, replica_id=replica_id)) == (ErrorCode.NONE, 0, 4)


def test_partitions_of_one_request_are_answered_each_in_order(client):
    _produce(client, 3, partition=1)
    request = Q(replica_id=-1, topics=[
        Q.OffsetForLeaderTopic(topic=TOPIC, partitions=[
            Q.OffsetForLeaderPartition(partition=1, current_leader_epoch=0, leader_epoch=0),
            Q.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)]),
        Q.OffsetForLeaderTopic(topic="nope", partitions=[
            Q.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)])])
    response = client.call(OFFSET_FOR_LEADER_EPOCH, 4, request)
    answers = [(t.topic, p.partition, p.error_code, p.end_offset) for t in response.topics for p in t.partitions]
    assert answers == [(TOPIC, 1, 0, 3), (TOPIC, 0, 0, 0), ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]


def test_epochs_and_their_checkpoint_file_survive_a_restart(tmp_path: Path):
    with running_broker(tmp_path) as broker:
        broker.broker.create_topic(TOPIC, 1)
        client = RawClient(broker.bootstrap_servers)
        _produce(client, 6)
        client.close()
    assert (tmp_path / f"{TOPIC}-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
    with running_broker(tmp_path) as broker:
        client = RawClient(broker.bootstrap_servers)
        try:
            assert _answer(_ask(client, 0, 0)) == (ErrorCode.NONE, 0, 6)
        finally:
            client.close()
