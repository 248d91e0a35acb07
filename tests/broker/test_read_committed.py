"""READ_COMMITTED over the wire: Fetch stops at the last stable offset and lists the aborted transactions of
what it returns, ListOffsets' "latest" is the LSO; every Fetch answer reports the real LSO (Kafka 3.9)."""

from __future__ import annotations

import time

import pytest

from kbroker.testing import running_broker
from wire import messages
from wire.records import Record, build_batch, build_end_txn_batch, iter_batches

from raw_client import RawClient

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TOPIC = "committed"
PID = 5150
F = messages.FetchRequest
P = messages.ProduceRequest
L = messages.ListOffsetsRequest


@pytest.fixture
def kafka_broker(tmp_path):
    """Transactional batches go straight to the partition here, with a transactional id on the request and no
    coordinator: Kafka takes them unverified with transaction.partition.verification.enable=false."""
    with running_broker(tmp_path / "data", **{"transaction.partition.verification.enable": "false"}) as broker:
        yield broker


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic(TOPIC, 1)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _now() -> int:
    return time.time_ns() // 1_000_000


def _produce(client: RawClient, batch: bytes, transactional_id: str | None = None) -> int:
    response = client.call(PRODUCE, 9, P(acks=-1, timeout_ms=5000, transactional_id=transactional_id, topic_data=[
        P.TopicProduceData(name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == 0
    return partition.base_offset


def _plain(client: RawClient, timestamp: int | None = None) -> int:
    return _produce(client, build_batch([Record(0, timestamp or _now(), None, b"plain", ())]))


def _transactional(client: RawClient, sequence: int, timestamp: int | None = None) -> int:
    return _produce(client, build_batch([Record(0, timestamp or _now(), None, b"in-txn", ())], producer_id=PID,
                                        producer_epoch=0, base_sequence=sequence, is_transactional=True),
                    transactional_id="read-committed")


def _marker(kafka_broker, commit: bool) -> None:
    """Append a COMMIT/ABORT marker as the partition's leader, as the transaction coordinator does."""
    broker = kafka_broker.broker

    async def write() -> None:
        batch = build_end_txn_batch(commit, producer_id=PID, producer_epoch=0, coordinator_epoch=0, timestamp=_now())
        broker.replicas.get(TOPIC, 0).append_as_leader(batch, _now(), -1, coordinator=True)
        broker.notify_appended(TOPIC, 0)

    kafka_broker._call(write())


def _fetch(client: RawClient, isolation_level: int, offset: int = 0, version: int = 12):
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation_level,
                session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=TOPIC, partitions=[
                    F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[])
    return client.call(FETCH, version, request).responses[0].partitions[0]


def _batches(data) -> list[int]:
    return [header.base_offset for _, header in iter_batches(bytes(data.records or b""))]


def _list_offset(client: RawClient, isolation_level: int, timestamp: int = -1, version: int = 7):
    request = L(replica_id=-1, isolation_level=isolation_level, topics=[L.ListOffsetsTopic(name=TOPIC, partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
    answer = client.call(LIST_OFFSETS, version, request).topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.timestamp, answer.offset


def test_read_committed_fetch_stops_at_an_open_transactions_first_offset(client) -> None:
    _plain(client)
    _transactional(client, 0)
    _plain(client)
    committed = _fetch(client, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (3, 1)
    assert _batches(committed) == [0]
    assert committed.aborted_transactions == []


def test_read_uncommitted_fetch_reads_to_the_high_watermark_and_reports_the_lso(client) -> None:
    _plain(client)
    _transactional(client, 0)
    _plain(client)
    uncommitted = _fetch(client, READ_UNCOMMITTED)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (3, 1)
    assert _batches(uncommitted) == [0, 1, 2]
    assert uncommitted.aborted_transactions is None  # null for READ_UNCOMMITTED, as Kafka


def test_read_committed_fetch_lists_the_aborted_transactions_of_its_range(client, kafka_broker) -> None:
    _plain(client)
    _transactional(client, 0)
    _transactional(client, 1)
    _marker(kafka_broker, commit=False)  # offset 3
    _plain(client)
    committed = _fetch(client, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 5)
    assert _batches(committed) == [0, 1, 2, 3, 4]
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(PID, 1)]
    assert _fetch(client, READ_COMMITTED, offset=4).aborted_transactions == []  # past the transaction
    assert _fetch(client, READ_UNCOMMITTED).aborted_transactions is None


def test_committed_transaction_is_not_listed_as_aborted(client, kafka_broker) -> None:
    _transactional(client, 0)
    _marker(kafka_broker, commit=True)
    committed = _fetch(client, READ_COMMITTED)
    assert (_batches(committed), committed.last_stable_offset, committed.aborted_transactions) == ([0, 1], 2, [])


def test_list_offsets_read_committed_latest_is_the_lso(client) -> None:
    _plain(client)
    _transactional(client, 0)
    _plain(client)
    assert _list_offset(client, READ_COMMITTED) == (-1, 1)
    assert _list_offset(client, READ_UNCOMMITTED) == (-1, 3)


def test_list_offsets_by_timestamp_is_bounded_by_the_lso_for_read_committed(client, kafka_broker) -> None:
    base = _now() - 60_000
    _plain(client, base)
    _transactional(client, 0, base + 20_000)
    _plain(client, base + 10_000)
    assert _list_offset(client, READ_UNCOMMITTED, base + 5_000) == (base + 20_000, 1)
    assert _list_offset(client, READ_COMMITTED, base + 5_000) == (-1, -1)  # found at or past the LSO
    assert _list_offset(client, READ_COMMITTED, base) == (base, 0)
    _marker(kafka_broker, commit=True)
    assert _list_offset(client, READ_COMMITTED, base + 5_000) == (base + 20_000, 1)
    assert _list_offset(client, READ_COMMITTED) == (-1, 4)
