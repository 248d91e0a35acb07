"""The topic configs Kafka 4.4 has beyond the ones kbroker's log applies, in raw CreateTopics / DescribeConfigs
requests: compression levels, preallocation, segment jitter, replication throttles, tiered storage and the
dead-letter queue switch.

kbroker takes, checks and reports them as Kafka 4.4 does (a single node without tiered storage uses none
of them), so CreateTopics v5+ and DescribeConfigs list the same configs as Kafka 4.4. Kafka 3.9 lacks four
of them and answers INVALID_CONFIG "Unknown topic config name" for those; on a 3.9 target these tests expect
that answer (docs/compatibility.md, "Differences from Kafka"). Kafka 3.9 in ZooKeeper mode also refuses to turn
on the two remote-log switches, which need KRaft there.
"""

from __future__ import annotations

import uuid

import pytest

from wire.errors import ErrorCode

import differential as wd
from settle import eventually

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Kafka 4 topic configs")]

TOPIC, DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG = 2, 5, 1
BOOLEAN, INT, LONG, LIST = 1, 3, 5, 7
NOT_IN_3_9 = {"errors.deadletterqueue.group.enable", "max.decompressed.message.bytes", "remote.copy.lag.bytes",
              "remote.copy.lag.ms"}
CONFIGS = [  # (config, Kafka 4.4's default, its type id, a value it takes)
    ("compression.gzip.level", "-1", INT, "5"),
    ("compression.lz4.level", "9", INT, "10"),
    ("compression.zstd.level", "3", INT, "-5"),
    ("errors.deadletterqueue.group.enable", "false", BOOLEAN, "true"),
    ("follower.replication.throttled.replicas", "", LIST, "0:1,1:2"),
    ("leader.replication.throttled.replicas", "", LIST, "*"),
    ("local.retention.bytes", "-2", LONG, "5"),
    ("local.retention.ms", "-2", LONG, "100"),
    ("max.decompressed.message.bytes", "2147483639", INT, "1048588"),
    ("preallocate", "false", BOOLEAN, "true"),
    ("remote.copy.lag.bytes", "-1", LONG, "0"),
    ("remote.copy.lag.ms", "0", LONG, "-1"),
    ("remote.log.copy.disable", "false", BOOLEAN, "true"),
    ("remote.log.delete.on.disable", "false", BOOLEAN, "true"),
    ("remote.storage.enable", "false", BOOLEAN, "false"),
    ("segment.jitter.ms", "0", LONG, "100"),
]
REFUSED = [  # (config, value, Kafka's reason after "Invalid value <value> for configuration <config>: ")
    ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "x", "Not a number of type INT"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.zstd.level", "-131073", "Value must be at least -131072"),
    ("errors.deadletterqueue.group.enable", "maybe", "Expected value to be either true or false"),
    ("local.retention.bytes", "-3", "Value must be at least -2"),
    ("max.decompressed.message.bytes", "0", "Value must be at least 1"),
    ("max.decompressed.message.bytes", "2147483647", "Value must be no more than 2147483639"),
    ("preallocate", "x", "Expected value to be either true or false"),
    ("remote.copy.lag.ms", "-2", "Value must be at least -1"),
    ("segment.jitter.ms", "-1", "Value must be at least 0"),
]
ZOOKEEPER_REFUSED = {"remote.log.copy.disable", "remote.log.delete.on.disable"}  # set to true
ZOOKEEPER_MESSAGE = ("It is invalid to set `remote.log.delete.on.disable` or `remote.log.copy.disable` under "
                     "Zookeeper's mode.")
THROTTLE_FORMAT = ("must be the literal '*' or a list of replicas in the following format: "
                   "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


@pytest.fixture
def kafka_3_9(request: pytest.FixtureRequest) -> bool:
    """Whether the broker under test is Apache Kafka 3.9 (KRaft or ZooKeeper)."""
    config = request.config
    return config.getoption("--target") == "kafka-zk" or (
        config.getoption("--target") == "kafka" and config.getoption("--kafka-version") == "3.9")


@pytest.fixture
def zookeeper_mode(request: pytest.FixtureRequest) -> bool:
    """Whether the broker under test is Apache Kafka 3.9 in ZooKeeper mode."""
    return request.config.getoption("--target") == "kafka-zk"


def _unknown(name: str) -> tuple[int, str]:
    return ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}"


def _create(conn: wd.Connection, configs: dict[str, str], validate_only: bool = False):
    """The CreateTopics v5 result for a new one-partition topic with `configs`."""
    request = wd.build("CreateTopicsRequest", 5, {"topics": [{
        "name": f"kafka4-configs-{uuid.uuid4().hex[:10]}", "num_partitions": 1, "replication_factor": 1,
        "assignments": [], "configs": [{"name": key, "value": value} for key, value in configs.items()]}],
        "timeout_ms": 30000, "validate_only": validate_only})
    [result] = conn.call(19, 5, request).topics
    return result


def _described(conn: wd.Connection, topic: str) -> dict[str, object]:
    """The topic's described configs by name (DescribeConfigs v4), once the broker knows the topic."""
    request = wd.build("DescribeConfigsRequest", 4, {"resources": [
        {"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    [result] = eventually(lambda: conn.call(32, 4, request).results, lambda found: found[0].error_code == 0)
    return {entry.name: entry for entry in result.configs}


def _outcome(result) -> tuple[int, str | None]:
    return result.error_code, result.error_message


@pytest.mark.parametrize(("name", "default", "kind", "value"), [pytest.param(*c, id=c[0]) for c in CONFIGS])
def test_an_untouched_topic_describes_the_config_with_kafkas_default(conn, kafka_3_9, name, default, kind, value):
    created = _create(conn, {})
    assert created.error_code == ErrorCode.NONE, created.error_message
    described = _described(conn, created.name)
    if kafka_3_9 and name in NOT_IN_3_9:
        assert name not in described
        return
    entry = described[name]
    assert (entry.value, entry.config_source, entry.config_type, entry.read_only) == (default, DEFAULT_CONFIG, kind,
                                                                                      False)


@pytest.mark.parametrize(("name", "default", "kind", "value"), [pytest.param(*c, id=c[0]) for c in CONFIGS])
def test_create_topics_takes_the_config_and_reports_it_as_set(conn, kafka_3_9, zookeeper_mode, name, default, kind,
                                                              value):
    result = _create(conn, {name: value})
    if kafka_3_9 and name in NOT_IN_3_9:
        assert _outcome(result) == _unknown(name)
        return
    if zookeeper_mode and name in ZOOKEEPER_REFUSED:
        assert _outcome(result) == (ErrorCode.INVALID_CONFIG, ZOOKEEPER_MESSAGE)
        return
    assert _outcome(result) == (ErrorCode.NONE, None)
    [entry] = [c for c in result.configs if c.name == name]
    assert (entry.value, entry.config_source) == (value, DYNAMIC_TOPIC_CONFIG)


@pytest.mark.parametrize(("name", "value", "reason"), [pytest.param(*r, id=f"{r[0]}={r[1]}") for r in REFUSED])
def test_a_value_kafka_refuses_gets_its_message(conn, kafka_3_9, name, value, reason):
    result = _create(conn, {name: value}, validate_only=True)
    if kafka_3_9 and name in NOT_IN_3_9:
        assert _outcome(result) == _unknown(name)
        return
    assert _outcome(result) == (ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {reason}")


@pytest.mark.parametrize("value", ["x", "0:1,1:x", "0:1:2", " 0 : 1 "])
def test_a_throttled_replica_list_must_be_a_star_or_partition_broker_pairs(conn, value):
    name = "leader.replication.throttled.replicas"
    shown = "[" + ", ".join(item.strip() for item in value.strip().split(",")) + "]"
    assert _outcome(_create(conn, {name: value}, validate_only=True)) == (
        ErrorCode.INVALID_CONFIG, f"Invalid value {shown} for configuration {name}: {name} {THROTTLE_FORMAT}")


def test_remote_storage_cannot_be_enabled_on_a_broker_without_tiered_storage(conn):
    assert _outcome(_create(conn, {"remote.storage.enable": "true"}, validate_only=True)) == (
        ErrorCode.INVALID_CONFIG,
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
