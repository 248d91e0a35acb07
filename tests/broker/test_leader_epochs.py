"""Leader epochs on a single node: every partition is at epoch 0, stored batches carry it, and
requests naming another epoch get Kafka's answer."""

from __future__ import annotations

import pytest

from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch, read_batch_header

from raw_client import RawClient

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
F = messages.FetchRequest
L = messages.ListOffsetsRequest
P = messages.ProduceRequest


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic("epochs", 1)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _produce(client: RawClient) -> None:
    batch = build_batch([Record(0, 1_000, b"k", b"v", [])])  # the client writes epoch -1
    request = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="epochs", partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    assert client.call(PRODUCE, 9, request).responses[0].partition_responses[0].error_code == 0


def _fetch(client: RawClient, current_leader_epoch: int):
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic="epochs", partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=current_leader_epoch, fetch_offset=0,
                    partition_max_bytes=1 << 20)])], forgotten_topics_data=[])
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def _list_offsets(client: RawClient, current_leader_epoch: int):
    request = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="epochs", partitions=[
        L.ListOffsetsPartition(partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=-1)])])
    return client.call(LIST_OFFSETS, 7, request).topics[0].partitions[0]


def test_stored_batches_carry_the_partition_leader_epoch(client, kafka_broker):
    _produce(client)
    records = bytes(kafka_broker.broker.partition_log("epochs", 0).read(0, 1 << 20, 1).read_bytes())
    assert read_batch_header(records, 0).partition_leader_epoch == 0


def test_metadata_reports_leader_epoch_zero(client):
    request = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="epochs")],
                                       allow_auto_topic_creation=False)
    assert client.call(METADATA, 9, request).topics[0].partitions[0].leader_epoch == 0


def test_fetch_with_the_current_leader_epoch_reads_records(client):
    _produce(client)
    partition = _fetch(client, 0)
    assert partition.error_code == ErrorCode.NONE
    assert partition.high_watermark == 1


def test_fetch_naming_a_newer_leader_epoch_is_unknown_leader_epoch(client):
    assert _fetch(client, 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_list_offsets_naming_a_newer_leader_epoch_is_unknown_leader_epoch(client):
    assert _list_offsets(client, 3).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_list_offsets_reports_the_leader_epoch(client):
    _produce(client)
    partition = _list_offsets(client, -1)
    assert (partition.error_code, partition.offset, partition.leader_epoch) == (ErrorCode.NONE, 1, 0)
