"""Fetch sessions (KIP-227): full fetch opens a session, incremental fetches report changes only."""

from __future__ import annotations

import contextlib

import pytest

from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

FETCH, PRODUCE = 1, 0
F = messages.FetchRequest
P = messages.ProduceRequest


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic("sessions", 2)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _produce(client: RawClient, partition: int, value: bytes) -> None:
    batch = build_batch([Record(0, 1_000, None, value, [])])
    request = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="sessions", partition_data=[P.PartitionProduceData(index=partition, records=batch)])])
    response = client.call(PRODUCE, 9, request)
    assert response.responses[0].partition_responses[0].error_code == 0


def _fetch(client: RawClient, session_id: int, epoch: int, offsets: dict[int, int], forgotten=()):
    topics = [F.FetchTopic(topic="sessions", partitions=[
        F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items()])]
    if not offsets:
        topics = []
    forgotten_topics = [F.ForgottenTopic(topic="sessions", partitions=list(forgotten))] if forgotten else []
    request = F(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, session_id=session_id,
                session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten_topics)
    return client.call(FETCH, 12, request)


def _reported(response) -> set[int]:
    return {p.partition_index for t in response.responses for p in t.partitions}


def test_full_fetch_with_epoch_0_opens_a_session_and_reports_every_partition(client):
    response = _fetch(client, 0, 0, {0: 0, 1: 0})
    assert response.session_id > 0
    assert _reported(response) == {0, 1}


def test_incremental_fetch_without_changes_reports_nothing(client):
    session = _fetch(client, 0, 0, {0: 0, 1: 0}).session_id
    assert _reported(_fetch(client, session, 1, {})) == set()


def test_incremental_fetch_reports_only_the_partition_with_new_records(client):
    session = _fetch(client, 0, 0, {0: 0, 1: 0}).session_id
    _produce(client, 1, b"new")
    response = _fetch(client, session, 1, {})
    assert _reported(response) == {1}
    assert response.responses[0].partitions[0].high_watermark == 1


def test_forgotten_partitions_leave_the_session(client):
    session = _fetch(client, 0, 0, {0: 0, 1: 0}).session_id
    _fetch(client, session, 1, {}, forgotten=[0])
    _produce(client, 0, b"unseen")
    assert _reported(_fetch(client, session, 2, {})) == set()


def test_wrong_epoch_is_invalid_fetch_session_epoch(client):
    session = _fetch(client, 0, 0, {0: 0}).session_id
    assert _fetch(client, session, 5, {}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_unknown_session_is_fetch_session_id_not_found(client):
    assert _fetch(client, 424242, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_epoch_minus_one_is_a_sessionless_full_fetch(client):
    response = _fetch(client, 0, -1, {0: 0, 1: 0})
    assert response.session_id == 0 and _reported(response) == {0, 1}


def test_a_session_from_before_a_restart_is_not_found_after_another_client_opened_one(tmp_path):
    """Session ids are random, as Kafka's: ids counted from 1 again after a restart handed a consumer that still
    held its old session (Spark's executors do) another client's session, and its partition was never served."""
    with running_broker(tmp_path) as broker:
        broker.broker.create_topic("sessions", 2)
        with contextlib.closing(RawClient(broker.bootstrap_servers)) as before:
            old_session = _fetch(before, 0, 0, {0: 0}).session_id
    with running_broker(tmp_path) as broker, contextlib.closing(RawClient(broker.bootstrap_servers)) as other, \
            contextlib.closing(RawClient(broker.bootstrap_servers)) as returning:
        _fetch(other, 0, 0, {0: 0, 1: 0})
        assert _fetch(returning, old_session, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
