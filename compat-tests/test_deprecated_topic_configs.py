"""Topic configs Kafka 3.x deprecated and Kafka 4.0 removed, in raw CreateTopics / AlterConfigs /
DescribeConfigs requests.

Kafka 3.9 still takes `message.format.version`, `message.downconversion.enable` and
`message.timestamp.difference.max.ms`: it checks their values, reports them in DescribeConfigs with
their broker defaults, and ignores the first two (records are always format v2). Kafka 4 answers
INVALID_CONFIG "Unknown topic config name". kbroker follows 3.9 here, since 3.9 tools and scripts
still send them: on kbroker and Kafka 3.9 these tests expect 3.9's answers, on Kafka 4 its refusal
(docs/compatibility.md, "Differences from Kafka").
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from wire.errors import ErrorCode
from wire.records import Record, build_batch

import differential as wd
from settle import eventually

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Topic configs Kafka 3.9 deprecates")]

TOPIC, DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 2, 1, 5
HOUR = 3_600_000
DEPRECATED = [  # (config, a value Kafka 3.9 takes, its type id, Kafka 3.9's default)
    ("message.format.version", "2.8", 2, "3.0-IV1"),
    ("message.downconversion.enable", "false", 1, "true"),
    ("message.timestamp.difference.max.ms", "60000", 5, str(2**63 - 1)),
]
CONFIGS = [pytest.param(*entry, id=entry[0]) for entry in DEPRECATED]


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


@pytest.fixture
def kafka_4(request: pytest.FixtureRequest) -> bool:
    """Whether the broker under test is Apache Kafka 4, which no longer knows these configs."""
    config = request.config
    return config.getoption("--target") == "kafka" and config.getoption("--kafka-version") == "4"


def _unknown(name: str) -> tuple[int, str]:
    return ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}"


def _create(conn: wd.Connection, configs: dict[str, str], validate_only: bool = False):
    """The CreateTopics v5 result for a new one-partition topic with `configs`."""
    name = f"deprecated-{uuid.uuid4().hex[:10]}"
    request = wd.build("CreateTopicsRequest", 5, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": key, "value": value} for key, value in configs.items()]}],
        "timeout_ms": 30000, "validate_only": validate_only})
    [result] = conn.call(19, 5, request).topics
    return result


def _created(conn: wd.Connection, configs: dict[str, str] | None = None) -> str:
    """A new topic with `configs`, once DescribeConfigs knows it (Kafka's broker learns of it a moment later)."""
    result = _create(conn, configs or {})
    assert result.error_code == 0, result.error_message
    described = eventually(lambda: _describe(conn, result.name), lambda found: found.error_code == 0)
    assert described.error_code == 0, described.error_message
    return result.name


def _describe(conn: wd.Connection, topic: str):
    request = wd.build("DescribeConfigsRequest", 4, {"resources": [
        {"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False})
    [result] = conn.call(32, 4, request).results
    return result


def _described(conn: wd.Connection, topic: str) -> dict[str, object]:
    """The topic's described configs by name (DescribeConfigs v4, with synonyms)."""
    result = _describe(conn, topic)
    assert result.error_code == 0, result.error_message
    return {entry.name: entry for entry in result.configs}


def _synonyms(entry) -> list[tuple[str, str, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


@pytest.mark.parametrize(("name", "value", "kind", "default"), CONFIGS)
def test_create_topics_takes_a_config_kafka_3_9_deprecates(conn, kafka_4, name, value, kind, default):
    result = _create(conn, {name: value})
    if kafka_4:
        assert (result.error_code, result.error_message) == _unknown(name)
        return
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    [entry] = [c for c in result.configs if c.name == name]
    assert (entry.value, entry.config_source) == (value, DYNAMIC_TOPIC_CONFIG)


@pytest.mark.parametrize(("name", "value", "kind", "default"), CONFIGS)
def test_a_deprecated_config_set_at_creation_is_described_above_its_broker_default(
        conn, kafka_4, name, value, kind, default):
    if kafka_4:
        pytest.skip("Kafka 4 refuses these configs at creation (the test above checks that answer)")
    topic = _created(conn, {name: value})
    entry = eventually(lambda: _described(conn, topic), lambda found: found[name].value == value)[name]
    assert (entry.value, entry.config_source, entry.config_type, entry.read_only) == (value, DYNAMIC_TOPIC_CONFIG,
                                                                                      kind, False)
    assert _synonyms(entry) == [(name, value, DYNAMIC_TOPIC_CONFIG), (f"log.{name}", default, DEFAULT_CONFIG)]


def test_an_untouched_topic_describes_the_deprecated_configs_with_kafka_3_9s_defaults(conn, kafka_4):
    described = _described(conn, _created(conn))
    if kafka_4:
        assert not {name for name, *_ in DEPRECATED} & described.keys()
        return
    for name, _, kind, default in DEPRECATED:
        entry = described[name]
        assert (entry.value, entry.config_source, entry.config_type) == (default, DEFAULT_CONFIG, kind), name
        assert _synonyms(entry) == [(f"log.{name}", default, DEFAULT_CONFIG)], name


def _alter_configs(conn: wd.Connection, topic: str, name: str, value: str):
    request = wd.build("AlterConfigsRequest", 2, {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                                                                "configs": [{"name": name, "value": value}]}],
                                                 "validate_only": False})
    return conn.call(33, 2, request).responses[0]


def _incremental_set(conn: wd.Connection, topic: str, name: str, value: str):
    request = wd.build("IncrementalAlterConfigsRequest", 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic,
        "configs": [{"name": name, "config_operation": 0, "value": value}]}], "validate_only": False})
    return conn.call(44, 1, request).responses[0]


@pytest.mark.parametrize("alter", [_alter_configs, _incremental_set], ids=["AlterConfigs", "IncrementalAlterConfigs"])
@pytest.mark.parametrize(("name", "value", "kind", "default"), CONFIGS)
def test_altering_a_topic_sets_a_config_kafka_3_9_deprecates(conn, kafka_4, alter, name, value, kind, default):
    topic = _created(conn)
    answer = alter(conn, topic, name, value)
    if kafka_4:
        assert (answer.error_code, answer.error_message) == _unknown(name)
        return
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, None)
    entry = eventually(lambda: _described(conn, topic), lambda found: found[name].value == value)[name]
    assert (entry.value, entry.config_source) == (value, DYNAMIC_TOPIC_CONFIG)


@pytest.mark.parametrize("version", ["2.8.1", "0.10.0-IV1", "0.8.2.2", "3.0-IV1", "3.9", "4.0-IV1", " 2.8"])
def test_message_format_version_takes_kafka_3_9s_version_names(conn, kafka_4, version):
    """Only the first two dot-separated parts count (three for 0.x names); the value is trimmed first;
    4.0's internal versions exist in 3.9 under their full names only."""
    result = _create(conn, {"message.format.version": version}, validate_only=True)
    expected = _unknown("message.format.version") if kafka_4 else (ErrorCode.NONE, None)
    assert (result.error_code, result.error_message) == expected


@pytest.mark.parametrize("version", ["4.0", "3.10", "0.10", "0.9.0-IV0", "2.8-iv1", "foo", ""])
def test_message_format_version_refuses_what_kafka_3_9_does_not_know(conn, kafka_4, version):
    result = _create(conn, {"message.format.version": version}, validate_only=True)
    expected = _unknown("message.format.version") if kafka_4 else (
        ErrorCode.INVALID_CONFIG,
        f"Invalid value {version} for configuration message.format.version: Version {version} is not a valid version")
    assert (result.error_code, result.error_message) == expected


def test_timestamp_difference_max_ms_bounds_record_timestamps(conn, kafka_4):
    """Kafka 3.9 bounds both sides by difference.max.ms while before/after.max.ms are at Long.MAX_VALUE;
    kbroker's after.max.ms defaults to an hour (Kafka 4's default), which is also the bound here."""
    if kafka_4:
        pytest.skip("Kafka 4 refuses the config at creation (test_create_topics_takes_a_config_kafka_3_9_deprecates)")
    topic = _created(conn, {"message.timestamp.difference.max.ms": str(HOUR)})
    now = time.time_ns() // 1_000_000
    data = {"acks": -1, "timeout_ms": 30000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": build_batch([Record(0, now, b"k", b"v"), Record(1, now - 2 * HOUR, b"k", b"v")])}]}]}

    def produce():
        return conn.call(0, 9, wd.build("ProduceRequest", 9, data)).responses[0].partition_responses[0]

    answer = eventually(produce, lambda found: found.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    [(index, message)] = [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors]
    found = re.fullmatch(r"Timestamp (\d+) of message with offset 1 is out of range\. "
                         r"The timestamp should be within \[(\d+), (\d+)\]", message)
    assert index == 1 and found, message
    assert int(found[1]) == now - 2 * HOUR and int(found[3]) - int(found[2]) == 2 * HOUR
