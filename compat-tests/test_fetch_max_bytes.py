"""A Fetch's `max_bytes` across partitions (KIP-74), in raw Fetch requests: the same bytes to any broker.

Only the first partition that returns data may go past the request's `max_bytes`, and only by one whole
batch (so that a consumer always progresses); every later partition stops at what is left of the budget.
Kafka cuts a later partition's records at the budget, ending in a partial batch that clients drop; kbroker
returns whole batches only, so such a partition is empty there. Either way no later partition holds a
complete batch past the budget, and the response stays within a client's fetch.max.bytes (librdkafka
refuses a larger one: "Invalid response size").
"""

from __future__ import annotations

import uuid

import pytest

from wire.records import Record, build_batch, iter_batches

import differential as wd

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Fetch: max_bytes across partitions (KIP-74)")]

FETCH_VERSION = 12  # the newest that names topics (v13+ use ids); Kafka 3.9 and 4.x serve it
PARTITIONS = 4
VALUE_SIZE = 3000
# one record per batch, an explicit timestamp: every batch has the same size on every broker
BIG_BATCH = build_batch([Record(0, wd.TIMESTAMP, None, b"x" * VALUE_SIZE)])
BATCH_SIZE = len(BIG_BATCH)
PARTITION_MAX_BYTES = 1 << 20  # far above a batch: only the request's max_bytes limits


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


def _topic(conn: wd.Connection, filled: range) -> str:
    """A fresh topic of PARTITIONS partitions with one big batch in each of `filled`."""
    topic = f"fetch-budget-{uuid.uuid4().hex[:10]}"
    ctx = wd.Ctx(conn, FETCH_VERSION, topic)
    wd.create_topic(ctx, topic, PARTITIONS)
    for partition in filled:  # a new topic's leader may refuse a first write for a moment
        wd.wait_for(lambda p=partition: wd.produce(ctx, topic, BIG_BATCH, p) == 0, f"a write to {topic}-{partition}")
    # and a fetch of a partition nobody wrote to (Kafka answers NOT_LEADER_OR_FOLLOWER until its leader is ready)
    wd.wait_for(lambda: not any(_errors(conn, topic, PARTITION_MAX_BYTES).values()), f"every partition of {topic}")
    return topic


def _fetch(conn: wd.Connection, topic: str, max_bytes: int) -> dict[int, bytes]:
    """Records per partition of one sessionless Fetch of every partition from offset 0."""
    found = _partitions(conn, topic, max_bytes)
    for data in found.values():
        assert data.error_code == 0, data
    return {index: bytes(data.records or b"") for index, data in found.items()}


def _errors(conn: wd.Connection, topic: str, max_bytes: int) -> dict[int, int]:
    return {index: data.error_code for index, data in _partitions(conn, topic, max_bytes).items()}


def _partitions(conn: wd.Connection, topic: str, max_bytes: int) -> dict:
    """Each partition's answer to one sessionless Fetch of every partition from offset 0."""
    request = wd.build("FetchRequest", FETCH_VERSION, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": PARTITION_MAX_BYTES, "last_fetched_epoch": -1} for p in range(PARTITIONS)]}]})
    response = conn.call(1, FETCH_VERSION, request)
    assert response.error_code == 0, response
    return {data.partition_index: data for data in response.responses[0].partitions}


def _complete_batches(records: bytes) -> int:
    return sum(1 for _ in iter_batches(records))


def test_only_the_first_partition_may_return_a_batch_larger_than_max_bytes(conn):
    topic = _topic(conn, range(PARTITIONS))
    found = _fetch(conn, topic, max_bytes=BATCH_SIZE // 3)
    assert {p: len(records) for p, records in found.items()} == {0: BATCH_SIZE, 1: 0, 2: 0, 3: 0}
    assert _complete_batches(found[0]) == 1


def test_the_first_partition_with_data_not_the_first_asked_is_the_one_that_may_exceed(conn):
    topic = _topic(conn, range(1, PARTITIONS))
    found = _fetch(conn, topic, max_bytes=BATCH_SIZE // 3)
    assert {p: len(records) for p, records in found.items()} == {0: 0, 1: BATCH_SIZE, 2: 0, 3: 0}


def test_later_partitions_hold_no_complete_batch_past_what_is_left_of_max_bytes(conn):
    topic = _topic(conn, range(PARTITIONS))
    max_bytes = BATCH_SIZE + BATCH_SIZE // 2  # room for one batch and a half
    found = _fetch(conn, topic, max_bytes)
    assert [_complete_batches(found[p]) for p in range(PARTITIONS)] == [1, 0, 0, 0]
    assert sum(map(len, found.values())) <= max_bytes
