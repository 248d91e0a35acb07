"""Config and record administration through stock admin clients: confluent-kafka's AdminClient
(librdkafka) and kafka-python's KafkaAdminClient, against the broker under test."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from settle import eventually

TIMEOUT = 15
# the legacy AlterConfigs API is deprecated in the clients, but brokers still serve it and we test it
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
confluent = pytest.mark.client("confluent-kafka")
kafka_python = pytest.mark.client("kafka-python")
describe_alter_configs = pytest.mark.scenario("Describe/alter configs")


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def kp_admin(bootstrap: str):
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


def _describe(admin: AdminClient, restype: str, name: str) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([ConfigResource(restype, name)], request_timeout=TIMEOUT).values()
    return future.result(TIMEOUT)


def _describe_when(admin: AdminClient, topic: str, holds: Callable[[dict[str, ConfigEntry]], bool]
                   ) -> dict[str, ConfigEntry]:
    """The topic's configs once `holds(configs)`: a KRaft broker shows an altered config a moment after the
    alter was answered (settle.py)."""
    return eventually(lambda: _describe(admin, "TOPIC", topic), holds)


def _set(admin: AdminClient, topic: str, **configs: str) -> None:
    """Sets topic configs (retention_ms= for retention.ms) and waits until describe shows them."""
    values = {k.replace("_", "."): v for k, v in configs.items()}
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()]
    [future] = admin.incremental_alter_configs([ConfigResource("TOPIC", topic, incremental_configs=entries)]).values()
    future.result(TIMEOUT)
    _describe_when(admin, topic, lambda described: all(described[k].value == v for k, v in values.items()))


def _error_code(future) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(TIMEOUT)
    return raised.value.args[0].code()


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def _node_id(admin: AdminClient) -> str:
    return str(next(iter(admin.list_topics(timeout=TIMEOUT).brokers)))


# --- confluent-kafka --------------------------------------------------------------------------


@confluent
@describe_alter_configs
def test_describe_configs_reports_an_untouched_topic_config_as_default(admin, new_topic):
    entry = _describe(admin, "TOPIC", new_topic)["cleanup.policy"]
    assert (entry.value, entry.source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)


@confluent
@describe_alter_configs
def test_incremental_set_is_described_as_a_dynamic_topic_config(admin, new_topic):
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    [future] = admin.incremental_alter_configs([ConfigResource("TOPIC", new_topic, incremental_configs=[entry])]
                                               ).values()
    future.result(TIMEOUT)
    entry = _describe_when(admin, new_topic, lambda described: described["retention.ms"].value == "3600000"
                           )["retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


@confluent
@describe_alter_configs
def test_incremental_delete_restores_the_default(admin, new_topic):
    _set(admin, new_topic, retention_ms="3600000")
    delete = ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
    [future] = admin.incremental_alter_configs([ConfigResource("TOPIC", new_topic, incremental_configs=[delete])]
                                               ).values()
    future.result(TIMEOUT)
    described = _describe_when(admin, new_topic, lambda configs: configs["retention.ms"].value != "3600000")
    assert described["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@confluent
@describe_alter_configs
def test_incremental_append_adds_to_a_list_config(admin, new_topic):
    append = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
    [future] = admin.incremental_alter_configs([ConfigResource("TOPIC", new_topic, incremental_configs=[append])]
                                               ).values()
    future.result(TIMEOUT)
    described = _describe_when(admin, new_topic, lambda configs: configs["cleanup.policy"].value != "delete")
    assert set(described["cleanup.policy"].value.split(",")) == {"delete", "compact"}


@confluent
@describe_alter_configs
def test_alter_configs_replaces_every_override(admin, new_topic):
    _set(admin, new_topic, retention_ms="3600000")
    resource = ConfigResource("TOPIC", new_topic, set_config={"max.message.bytes": "2048"})
    [future] = admin.alter_configs([resource]).values()
    future.result(TIMEOUT)
    described = _describe_when(admin, new_topic, lambda configs: configs["max.message.bytes"].value == "2048")
    assert described["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@confluent
@describe_alter_configs
def test_alter_configs_validate_only_changes_nothing(admin, new_topic):
    resource = ConfigResource("TOPIC", new_topic, set_config={"max.message.bytes": "2048"})
    [future] = admin.alter_configs([resource], validate_only=True).values()
    future.result(TIMEOUT)
    assert _describe(admin, "TOPIC", new_topic)["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


@confluent
@describe_alter_configs
def test_an_invalid_config_value_fails_with_invalid_config(admin, new_topic):
    bad = ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
    [future] = admin.incremental_alter_configs([ConfigResource("TOPIC", new_topic, incremental_configs=[bad])]
                                               ).values()
    assert _error_code(future) == KafkaError.INVALID_CONFIG


@confluent
@describe_alter_configs
def test_describe_configs_of_an_unknown_topic_fails(admin, topic_name):
    [future] = admin.describe_configs([ConfigResource("TOPIC", topic_name)], request_timeout=TIMEOUT).values()
    assert _error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART


@confluent
@describe_alter_configs
def test_describe_broker_configs_marks_log_dirs_read_only(admin):
    entry = _describe(admin, "BROKER", _node_id(admin))["log.dirs"]
    assert (entry.is_read_only, entry.source) == (True, ConfigSource.STATIC_BROKER_CONFIG.value)


@confluent
@describe_alter_configs
def test_altering_a_static_broker_config_is_refused(admin):
    resource = ConfigResource("BROKER", _node_id(admin), set_config={"log.dirs": "/elsewhere"})
    [future] = admin.alter_configs([resource]).values()
    assert _error_code(future) == KafkaError.INVALID_REQUEST


@confluent
@pytest.mark.scenario("Delete records")
def test_delete_records_returns_the_new_low_watermark(admin, bootstrap, new_topic):
    _produce(bootstrap, new_topic, 0, 5)
    [future] = admin.delete_records([TopicPartition(new_topic, 0, 3)]).values()
    assert future.result(TIMEOUT).low_watermark == 3


@confluent
@pytest.mark.scenario("Delete records")
def test_delete_records_beyond_the_high_watermark_fails_with_offset_out_of_range(admin, bootstrap, new_topic):
    _produce(bootstrap, new_topic, 0, 2)
    [future] = admin.delete_records([TopicPartition(new_topic, 0, 10)]).values()
    assert _error_code(future) == KafkaError.OFFSET_OUT_OF_RANGE


# --- kafka-python -----------------------------------------------------------------------------


@kafka_python
@describe_alter_configs
def test_kafka_python_alter_configs_then_describe_shows_the_modified_config(kp_admin, new_topic):
    from kafka.admin import ConfigResource as KafkaConfigResource
    from kafka.admin import ConfigResourceType

    result = kp_admin.alter_configs([KafkaConfigResource(ConfigResourceType.TOPIC, new_topic,
                                                         configs={"retention.ms": "3600000"})])
    assert result == {"topic": {new_topic: "OK"}}
    resource = KafkaConfigResource(ConfigResourceType.TOPIC, new_topic)
    described = eventually(lambda: kp_admin.describe_configs([resource]),
                           lambda found: found["topic"][new_topic].get("retention.ms", {}).get("value") == "3600000")
    entry = described["topic"][new_topic]["retention.ms"]
    assert (entry["value"], entry["config_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")


@kafka_python
@describe_alter_configs
def test_kafka_python_legacy_alter_configs_sets_a_config(kp_admin, admin, new_topic):
    from kafka.admin import ConfigResource as KafkaConfigResource
    from kafka.admin import ConfigResourceType

    resource = KafkaConfigResource(ConfigResourceType.TOPIC, new_topic, configs={"segment.ms": "3600000"})
    assert kp_admin.alter_configs([resource], incremental=False) == {"topic": {new_topic: "OK"}}
    described = _describe_when(admin, new_topic, lambda configs: configs["segment.ms"].value == "3600000")
    assert described["segment.ms"].value == "3600000"


@kafka_python
@describe_alter_configs
def test_kafka_python_describe_configs_lists_synonyms(kp_admin, new_topic):
    from kafka.admin import ConfigResource as KafkaConfigResource
    from kafka.admin import ConfigResourceType

    described = kp_admin.describe_configs([KafkaConfigResource(ConfigResourceType.TOPIC, new_topic)],
                                          include_synonyms=True, config_filter="all")
    synonyms = described["topic"][new_topic]["cleanup.policy"]["synonyms"]
    assert "log.cleanup.policy" in [s["name"] for s in synonyms]


@kafka_python
@pytest.mark.scenario("Describe log dirs")
def test_kafka_python_describe_log_dirs_lists_the_topic_partitions(kp_admin, new_topic):
    """Kafka's broker creates a new topic's logs a moment after CreateTopics returns, so this waits for them."""
    wanted = {(new_topic, 0), (new_topic, 1), (new_topic, 2)}
    deadline = time.monotonic() + 15
    while True:
        [broker] = kp_admin.describe_log_dirs({new_topic: [0, 1, 2]})
        partitions = {(t["name"], p["partition_index"])
                      for d in broker["log_dirs"] for t in d["topics"] for p in t["partitions"]}
        if partitions == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert partitions == wanted


@kafka_python
@pytest.mark.scenario("Delete records")
def test_kafka_python_delete_records_reports_the_low_watermark(kp_admin, bootstrap, new_topic):
    from kafka import TopicPartition as KafkaTopicPartition

    _produce(bootstrap, new_topic, 1, 4)
    result = kp_admin.delete_records({KafkaTopicPartition(new_topic, 1): -1})
    assert result[KafkaTopicPartition(new_topic, 1)]["low_watermark"] == 4
