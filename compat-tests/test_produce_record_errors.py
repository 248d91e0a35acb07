"""Produce: records refused one by one (KIP-467), in raw Produce v9 requests.

Kafka's LogValidator checks every record of a produced batch: a compacted topic needs a key on each,
a CreateTime topic bounds each timestamp by message.timestamp.before.max.ms / after.max.ms, a
LogAppendTime topic refuses batches the producer marked LogAppendTime. One bad record refuses its whole
batch; the partition's answer lists every bad record as (batch_index, message) in `record_errors` and
sums them up in `error_message`, which clients print. Other partitions of the request are untouched.
The messages here are Kafka's own, the same in 3.9 and 4.4.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from wire.errors import ErrorCode
from wire.records import LOG_APPEND_TIME, Record, build_batch

import differential as wd

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Produce: per-record errors (KIP-467)")]

HOUR = 3_600_000
LONG_MAX = 2**63 - 1
PRODUCE_VERSION = 9  # record_errors and error_message exist from v8; 3.9 and 4.4 both serve v9
CODECS = [pytest.param(0, id="none"), pytest.param(1, id="gzip")]
NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-0"
INVALID_TIMESTAMP_SUMMARY = "One or more records have been rejected due to invalid timestamp"
OUT_OF_RANGE = re.compile(r"Timestamp (-?\d+) of message with offset (\d+) is out of range\. "
                          r"The timestamp should be within \[(-?\d+), (-?\d+)\]")


def _now() -> int:
    return time.time_ns() // 1_000_000


def _is_kafka_4(config: pytest.Config) -> bool:
    return config.getoption("--target") == "kafka" and config.getoption("--kafka-version") == "4"


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


def _produce(conn: wd.Connection, *parts: tuple[str, bytes]) -> list:
    """The partition answers of one acks=-1 Produce v9 writing `records` to partition 0 of each topic."""
    data = {"acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]} for topic, records in parts]}
    response = conn.call(0, PRODUCE_VERSION, wd.build("ProduceRequest", PRODUCE_VERSION, data))
    by_topic = {t.name: t.partition_responses[0] for t in response.responses}
    return [by_topic[topic] for topic, _ in parts]


def _topic(conn: wd.Connection, configs: dict[str, str] | None = None, first_timestamp: int | None = None) -> str:
    """A new one-partition topic with `configs`, once a first keyed record (stamped now unless
    `first_timestamp` is given) is in: Kafka's new leader may refuse writes for a moment."""
    name = f"record-errors-{uuid.uuid4().hex[:10]}"
    request = wd.build("CreateTopicsRequest", 5, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": key, "value": value} for key, value in (configs or {}).items()]}],
        "timeout_ms": 30000})
    [created] = conn.call(19, 5, request).topics
    assert created.error_code == 0, created.error_message
    first = build_batch([Record(0, _now() if first_timestamp is None else first_timestamp, b"k", b"v")])
    wd.wait_for(lambda: _produce(conn, (name, first))[0].error_code == 0, f"a first write to {name}")
    return name


def _errors(answer) -> list[tuple[int, str]]:
    return [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors]


def _record_errors_summary(errors: list[tuple[int, str]]) -> str:
    shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')" for index, message in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]")


def _out_of_range(message: str, now: int) -> tuple[int, int, int, int]:
    """(timestamp, offset, lower bound, upper bound) of Kafka's out-of-range message."""
    found = OUT_OF_RANGE.fullmatch(message)
    assert found, message
    timestamp, offset, low, high = map(int, found.groups())
    return timestamp, offset, low, high


@pytest.mark.parametrize("codec", CODECS)
def test_keyless_records_on_a_compacted_topic_are_each_named_in_record_errors(conn, codec):
    topic = _topic(conn, {"cleanup.policy": "compact"})
    now = _now()
    records = [Record(0, now, b"k", b"v"), Record(1, now, None, b"v"), Record(2, now, None, b"v")]
    [answer] = _produce(conn, (topic, build_batch(records, codec=codec)))
    expected = [(1, NO_KEY.format(topic)), (2, NO_KEY.format(topic))]
    assert (answer.error_code, answer.base_offset) == (ErrorCode.INVALID_RECORD, -1)
    assert _errors(answer) == expected
    assert answer.error_message == _record_errors_summary(expected)


def test_the_error_message_shows_only_the_first_three_of_the_record_errors(conn):
    topic = _topic(conn, {"cleanup.policy": "compact"})
    [answer] = _produce(conn, (topic, build_batch([Record(i, _now(), None, b"v") for i in range(5)])))
    assert [index for index, _ in _errors(answer)] == [0, 1, 2, 3, 4]
    assert answer.error_message == _record_errors_summary(_errors(answer))
    assert "5 record errors in total" in answer.error_message and "batchIndex=3" not in answer.error_message


def test_a_partition_refused_for_its_records_leaves_the_rest_of_the_request_appended(conn):
    compacted, plain = _topic(conn, {"cleanup.policy": "compact"}), _topic(conn)
    now = _now()
    refused, appended = _produce(conn, (compacted, build_batch([Record(0, now, None, b"v")])),
                                 (plain, build_batch([Record(0, now, b"k", b"v")])))
    assert refused.error_code == ErrorCode.INVALID_RECORD and len(refused.record_errors) == 1
    assert (appended.error_code, appended.base_offset, appended.error_message) == (ErrorCode.NONE, 1, None)
    assert appended.record_errors == []
    [next_write] = _produce(conn, (compacted, build_batch([Record(0, now, b"k", b"v")])))
    assert next_write.base_offset == 1, "nothing of the refused batch was appended"


@pytest.mark.parametrize("codec", CODECS)
def test_records_outside_the_topic_timestamp_bounds_are_refused_with_invalid_timestamp(conn, codec):
    topic = _topic(conn, {"message.timestamp.before.max.ms": str(HOUR), "message.timestamp.after.max.ms": str(HOUR)})
    now = _now()
    records = [Record(0, now, b"k", b"v"), Record(1, now - 2 * HOUR, b"k", b"v"), Record(2, now + 2 * HOUR, b"k", b"v")]
    [answer] = _produce(conn, (topic, build_batch(records, codec=codec)))
    assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_SUMMARY)
    assert [index for index, _ in _errors(answer)] == [1, 2]
    for (index, message), record in zip(_errors(answer), records[1:], strict=True):
        timestamp, offset, low, high = _out_of_range(message, now)
        assert (timestamp, offset) == (record.timestamp, index)
        assert high - low == 2 * HOUR and now - HOUR <= low <= _now() - HOUR  # [broker's now - 1 h, now + 1 h]


def test_a_record_without_a_timestamp_is_never_out_of_bounds(conn):
    topic = _topic(conn, {"message.timestamp.before.max.ms": "0", "message.timestamp.after.max.ms": "0"},
                   first_timestamp=-1)
    [answer] = _produce(conn, (topic, build_batch([Record(0, -1, b"k", b"v")])))
    assert (answer.error_code, answer.record_errors) == (ErrorCode.NONE, [])


def test_a_missing_key_and_a_bad_timestamp_in_one_batch_answer_invalid_timestamp_naming_both(conn):
    """One error per record, its key's first; any timestamp error makes the answer INVALID_TIMESTAMP."""
    topic = _topic(conn, {"cleanup.policy": "compact", "message.timestamp.before.max.ms": str(HOUR)})
    now = _now()
    records = [Record(0, now - 2 * HOUR, b"k", b"v"), Record(1, now, None, b"v"), Record(2, now - 2 * HOUR, None, b"v")]
    [answer] = _produce(conn, (topic, build_batch(records)))
    assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_SUMMARY)
    [(first, too_old), *missing_keys] = _errors(answer)
    assert first == 0 and _out_of_range(too_old, now)[:2] == (now - 2 * HOUR, 0)
    assert missing_keys == [(1, NO_KEY.format(topic)), (2, NO_KEY.format(topic))]


def test_a_batch_marked_log_append_time_is_refused_by_a_log_append_time_topic(conn):
    topic = _topic(conn, {"message.timestamp.type": "LogAppendTime"})
    now = _now()
    batch = build_batch([Record(0, now, b"k", b"value"), Record(1, now, None, b"v")], timestamp_type=LOG_APPEND_TIME)
    [answer] = _produce(conn, (topic, batch))
    assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_SUMMARY)
    assert _errors(answer) == [
        (index, f"Invalid timestamp type in message DefaultRecord(offset={index}, timestamp={now}, key={key} bytes, "
                f"value={value} bytes). Producer should not set timestamp type to LogAppendTime.")
        for index, key, value in ((0, 1, 5), (1, 0, 1))]


def test_a_batch_marked_log_append_time_is_taken_by_a_create_time_topic(conn):
    topic = _topic(conn)
    [answer] = _produce(conn, (topic, build_batch([Record(0, _now(), b"k", b"v")], timestamp_type=LOG_APPEND_TIME)))
    assert (answer.error_code, answer.record_errors) == (ErrorCode.NONE, [])


def test_the_default_future_bound_is_an_hour_as_in_kafka_4_and_none_in_kafka_3_9(conn, request):
    """Kafka 4.0 set log.message.timestamp.after.max.ms to one hour (3.x: Long.MAX_VALUE); kbroker has 4.x's."""
    on_kafka_3 = request.config.getoption("--target") in ("kafka", "kafka-zk") and not _is_kafka_4(request.config)
    topic = _topic(conn)
    now = _now()
    [answer] = _produce(conn, (topic, build_batch([Record(0, now + 2 * HOUR, b"k", b"v")])))
    if on_kafka_3:
        assert (answer.error_code, answer.record_errors) == (ErrorCode.NONE, [])
        return
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    [(index, message)] = _errors(answer)
    timestamp, _, low, high = _out_of_range(message, now)
    assert (index, timestamp) == (0, now + 2 * HOUR)
    assert low == high - HOUR - LONG_MAX  # the past unbounded: before.max.ms is Long.MAX_VALUE
    assert now + HOUR <= high <= _now() + HOUR
