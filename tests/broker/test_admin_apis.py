"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DeleteRecords and DescribeLogDirs over
a real socket, checked against Kafka's answers."""

from __future__ import annotations

import pytest

from kbroker.testing import running_broker
from kbroker.topic_configs import TOPIC_CONFIGS
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch

from raw_client import RawClient

PRODUCE, LIST_OFFSETS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS = 0, 2, 21, 32, 33, 35
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC, BROKER, GROUP = 2, 4, 32
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DC = messages.DescribeConfigsRequest
AC = messages.AlterConfigsRequest
IAC = messages.IncrementalAlterConfigsRequest
DR = messages.DeleteRecordsRequest
DLD = messages.DescribeLogDirsRequest


@pytest.fixture
def client(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


@pytest.fixture
def topic(kafka_broker) -> str:
    kafka_broker.broker.create_topic("admin", 2, {"retention.ms": "1000"})
    return "admin"


def _describe(client: RawClient, resource_type: int, name: str, keys=None, version: int = 4, *,
              synonyms: bool = False, documentation: bool = False):
    request = DC(resources=[DC.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                                        configuration_keys=keys)],
                 include_synonyms=synonyms, include_documentation=documentation if version >= 3 else False)
    return client.call(DESCRIBE_CONFIGS, version, request).results[0]


def _entries(result) -> dict:
    return {c.name: c for c in result.configs}


def _alter(client: RawClient, resource_type: int, name: str, configs: dict, validate_only: bool = False):
    request = AC(resources=[AC.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[
        AC.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=validate_only)
    return client.call(ALTER_CONFIGS, 2, request).responses[0]


def _incremental(client: RawClient, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                 validate_only: bool = False):
    request = IAC(resources=[IAC.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])],
        validate_only=validate_only)
    return client.call(INCREMENTAL_ALTER_CONFIGS, 1, request).responses[0]


def _produce(client: RawClient, topic: str, partition: int, count: int) -> None:
    P = messages.ProduceRequest
    batch = build_batch([Record(i, 1_000, None, b"v%d" % i, []) for i in range(count)])
    request = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])])
    assert client.call(PRODUCE, 9, request).responses[0].partition_responses[0].error_code == 0


def _delete_records(client: RawClient, topic: str, partition: int, offset: int):
    request = DR(topics=[DR.DeleteRecordsTopic(name=topic, partitions=[
        DR.DeleteRecordsPartition(partition_index=partition, offset=offset)])], timeout_ms=5000)
    return client.call(DELETE_RECORDS, 2, request).topics[0].partitions[0]


def _describe_log_dirs(client: RawClient, topics, version: int = 4):
    return client.call(DESCRIBE_LOG_DIRS, version, DLD(topics=topics))


def _sizes(response) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_size
            for r in response.results for t in r.topics for p in t.partitions}


# --- DescribeConfigs: topics ---------------------------------------------------------------


def test_describe_topic_lists_every_topic_config_kbroker_knows(client, topic):
    result = _describe(client, TOPIC, topic)
    assert result.error_code == 0
    assert set(_entries(result)) == set(TOPIC_CONFIGS)


def test_describe_topic_override_is_reported_as_dynamic_topic_config(client, topic):
    entry = _entries(_describe(client, TOPIC, topic))["retention.ms"]
    assert (entry.value, entry.config_source, entry.read_only) == ("1000", DYNAMIC_TOPIC_CONFIG, False)


def test_describe_topic_unset_config_has_the_broker_default_as_default_config(client, topic):
    entry = _entries(_describe(client, TOPIC, topic))["segment.bytes"]
    assert (entry.value, entry.config_source) == ("1073741824", DEFAULT_CONFIG)


def test_describe_topic_config_falls_back_to_a_static_broker_property(tmp_path):
    with running_broker(tmp_path, **{"log.segment.bytes": "2000000"}) as broker:
        broker.broker.create_topic("t", 1)
        raw = RawClient(broker.bootstrap_servers)
        try:
            entry = _entries(_describe(raw, TOPIC, "t", synonyms=True))["segment.bytes"]
        finally:
            raw.close()
    assert (entry.value, entry.config_source) == ("2000000", STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.segment.bytes", "2000000", STATIC_BROKER_CONFIG), ("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]


def test_describe_topic_synonyms_list_the_override_then_the_broker_default(client, kafka_broker):
    kafka_broker.broker.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    entry = _entries(_describe(client, TOPIC, "compacted", synonyms=True))["cleanup.policy"]
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("cleanup.policy", "compact", DYNAMIC_TOPIC_CONFIG), ("log.cleanup.policy", "delete", DEFAULT_CONFIG)]


def test_describe_retention_ms_default_has_no_synonym_as_in_kafka(client, kafka_broker):
    # Kafka lists broker synonyms from log.retention.ms on; it has no default, so none are listed
    kafka_broker.broker.create_topic("plain", 1)
    entry = _entries(_describe(client, TOPIC, "plain", synonyms=True))["retention.ms"]
    assert (entry.value, entry.config_source, entry.synonyms) == ("604800000", DEFAULT_CONFIG, [])


def test_describe_without_include_synonyms_sends_no_synonyms(client, topic):
    assert all(c.synonyms == [] for c in _describe(client, TOPIC, topic).configs)


def test_describe_configuration_keys_limit_the_answer(client, topic):
    result = _describe(client, TOPIC, topic, keys=["retention.ms", "cleanup.policy", "no.such.key"])
    assert set(_entries(result)) == {"retention.ms", "cleanup.policy"}


def test_describe_v3_reports_config_types(client, topic):
    entries = _entries(_describe(client, TOPIC, topic, version=3))
    types = [entries[name].config_type
             for name in ("retention.ms", "segment.bytes", "cleanup.policy", "unclean.leader.election.enable")]
    assert types == [5, 3, 7, 1]  # LONG, INT, LIST, BOOLEAN


def test_describe_documentation_only_when_asked(client, topic):
    plain = _entries(_describe(client, TOPIC, topic))["retention.ms"]
    documented = _entries(_describe(client, TOPIC, topic, documentation=True))["retention.ms"]
    assert plain.documentation is None
    assert "deleted" in documented.documentation


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_answers_every_version(client, topic, version):
    assert _entries(_describe(client, TOPIC, topic, version=version))["retention.ms"].value == "1000"


def test_describe_unknown_topic_is_unknown_topic_or_partition(client):
    result = _describe(client, TOPIC, "missing")
    assert (result.error_code, result.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_describe_illegal_topic_name_is_invalid_topic_exception(client):
    assert _describe(client, TOPIC, "bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


# --- DescribeConfigs: the broker -----------------------------------------------------------


def test_describe_broker_reports_set_properties_as_static_and_the_rest_as_default(client, kafka_broker):
    entries = _entries(_describe(client, BROKER, str(kafka_broker.broker.node_id)))
    assert entries["log.dirs"].config_source == STATIC_BROKER_CONFIG  # the fixture sets it
    assert (entries["num.partitions"].value, entries["num.partitions"].config_source) == ("1", DEFAULT_CONFIG)


def test_describe_broker_marks_only_kafkas_dynamic_configs_writable(client, kafka_broker):
    entries = _entries(_describe(client, BROKER, str(kafka_broker.broker.node_id)))
    writable = {name for name in ("log.dirs", "num.partitions", "log.retention.hours", "message.max.bytes",
                                  "log.retention.ms", "num.io.threads") if not entries[name].read_only}
    assert writable == {"message.max.bytes", "log.retention.ms", "num.io.threads"}


def test_describe_broker_empty_name_has_no_dynamic_cluster_defaults(client):
    result = _describe(client, BROKER, "")
    assert (result.error_code, result.configs) == (0, [])


def test_describe_another_broker_id_is_invalid_request(client, kafka_broker):
    result = _describe(client, BROKER, str(kafka_broker.broker.node_id + 1))
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert "Unexpected broker id" in result.error_message


def test_describe_non_numeric_broker_name_is_invalid_request(client):
    result = _describe(client, BROKER, "one")
    assert (result.error_code, result.error_message) == (ErrorCode.INVALID_REQUEST,
                                                         "Broker id must be an integer, but it is: one")


def test_describe_unsupported_resource_type_is_invalid_request(client):
    assert _describe(client, GROUP, "some-group").error_code == ErrorCode.INVALID_REQUEST


# --- AlterConfigs ----------------------------------------------------------------------------


def test_alter_configs_replaces_the_whole_override_set(client, kafka_broker, topic):
    assert _alter(client, TOPIC, topic, {"segment.ms": "60000"}).error_code == 0
    assert kafka_broker.broker.topics[topic].configs == {"segment.ms": "60000"}


def test_altered_config_reaches_the_partition_logs(client, kafka_broker, topic):
    _alter(client, TOPIC, topic, {"retention.ms": "5000"})
    assert kafka_broker.broker.logs.get(topic, 1).config.retention_ms == 5000


def test_altered_config_survives_a_restart(tmp_path):
    with running_broker(tmp_path) as broker:
        broker.broker.create_topic("t", 1)
        raw = RawClient(broker.bootstrap_servers)
        _alter(raw, TOPIC, "t", {"max.message.bytes": "2048"})
        raw.close()
    with running_broker(tmp_path) as broker:
        raw = RawClient(broker.bootstrap_servers)
        value = _entries(_describe(raw, TOPIC, "t"))["max.message.bytes"].value
        raw.close()
    assert value == "2048"


def test_alter_configs_validate_only_changes_nothing(client, kafka_broker, topic):
    assert _alter(client, TOPIC, topic, {"segment.ms": "60000"}, validate_only=True).error_code == 0
    assert kafka_broker.broker.topics[topic].configs == {"retention.ms": "1000"}


def test_alter_configs_unknown_config_name_is_invalid_config(client, topic):
    response = _alter(client, TOPIC, topic, {"retention.fortnights": "2"})
    assert (response.error_code, response.error_message) == (ErrorCode.INVALID_CONFIG,
                                                             "Unknown topic config name: retention.fortnights")


def test_alter_configs_malformed_value_is_invalid_config(client, kafka_broker, topic):
    response = _alter(client, TOPIC, topic, {"retention.ms": "soon"})
    assert response.error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in response.error_message
    assert kafka_broker.broker.topics[topic].configs == {"retention.ms": "1000"}


def test_alter_configs_value_below_kafkas_minimum_is_invalid_config(client, topic):
    response = _alter(client, TOPIC, topic, {"segment.bytes": "0"})
    assert (response.error_code, response.error_message) == (
        ErrorCode.INVALID_CONFIG, "Invalid value 0 for configuration segment.bytes: Value must be at least 14")


def test_alter_configs_unknown_topic_is_unknown_topic_or_partition(client):
    assert _alter(client, TOPIC, "missing", {"retention.ms": "1"}).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_null_value_is_invalid_request(client, topic):
    response = _alter(client, TOPIC, topic, {"retention.ms": None})
    assert (response.error_code, response.error_message) == (ErrorCode.INVALID_REQUEST,
                                                             "Null value not supported for : retention.ms")


def test_alter_configs_same_resource_twice_is_invalid_request(client, topic):
    resource = AC.AlterConfigsResource(resource_type=TOPIC, resource_name=topic, configs=[])
    response = client.call(ALTER_CONFIGS, 2, AC(resources=[resource, resource], validate_only=False))
    assert [r.error_code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 2


def test_alter_configs_on_the_broker_refuses_a_read_only_config(client, kafka_broker):
    response = _alter(client, BROKER, str(kafka_broker.broker.node_id), {"log.dirs": "/elsewhere"})
    assert (response.error_code, response.error_message) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: [log.dirs]")


def test_alter_configs_on_another_broker_id_is_invalid_request(client, kafka_broker):
    response = _alter(client, BROKER, str(kafka_broker.broker.node_id + 1), {})
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert "Unexpected broker id" in response.error_message


# --- IncrementalAlterConfigs ----------------------------------------------------------------


def test_incremental_set_keeps_the_other_overrides(client, kafka_broker, topic):
    assert _incremental(client, TOPIC, topic, [("segment.ms", SET, "60000")]).error_code == 0
    assert kafka_broker.broker.topics[topic].configs == {"retention.ms": "1000", "segment.ms": "60000"}


def test_incremental_delete_returns_the_config_to_its_default(client, topic):
    assert _incremental(client, TOPIC, topic, [("retention.ms", DELETE, None)]).error_code == 0
    entry = _entries(_describe(client, TOPIC, topic))["retention.ms"]
    assert (entry.value, entry.config_source) == ("604800000", DEFAULT_CONFIG)


def test_incremental_append_to_an_unset_list_starts_from_its_default(client, kafka_broker, topic):
    assert _incremental(client, TOPIC, topic, [("cleanup.policy", APPEND, "compact")]).error_code == 0
    assert kafka_broker.broker.topics[topic].configs["cleanup.policy"] == "delete,compact"


def test_incremental_subtract_removes_list_items(client, kafka_broker):
    kafka_broker.broker.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
    assert _incremental(client, TOPIC, "both", [("cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert kafka_broker.broker.topics["both"].configs["cleanup.policy"] == "compact"


def test_incremental_append_to_a_non_list_config_is_invalid_config(client, topic):
    response = _incremental(client, TOPIC, topic, [("retention.ms", APPEND, "5")])
    assert (response.error_code, response.error_message) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")


def test_incremental_unknown_operation_is_invalid_request(client, topic):
    assert _incremental(client, TOPIC, topic, [("retention.ms", 9, "5")]).error_code == ErrorCode.INVALID_REQUEST


def test_incremental_validate_only_changes_nothing(client, kafka_broker, topic):
    assert _incremental(client, TOPIC, topic, [("retention.ms", SET, "5")], validate_only=True).error_code == 0
    assert kafka_broker.broker.topics[topic].configs == {"retention.ms": "1000"}


def test_incremental_failure_leaves_the_whole_resource_unchanged(client, kafka_broker, topic):
    response = _incremental(client, TOPIC, topic, [("segment.ms", SET, "60000"), ("retention.ms", SET, "x")])
    assert response.error_code == ErrorCode.INVALID_CONFIG
    assert kafka_broker.broker.topics[topic].configs == {"retention.ms": "1000"}


def test_incremental_set_with_null_value_is_invalid_request(client, topic):
    assert _incremental(client, TOPIC, topic, [("retention.ms", SET, None)]).error_code == ErrorCode.INVALID_REQUEST


def test_incremental_duplicate_keys_are_invalid_request(client, topic):
    response = _incremental(client, TOPIC, topic, [("retention.ms", SET, "5"), ("retention.ms", DELETE, None)])
    assert (response.error_code, response.error_message) == (ErrorCode.INVALID_REQUEST,
                                                             "Error due to duplicate config keys")


def test_incremental_on_the_broker_is_refused_as_static(client):
    response = _incremental(client, BROKER, "", [("num.partitions", SET, "3")])
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert response.error_message.startswith("Cannot update these configs dynamically")


# --- DeleteRecords ---------------------------------------------------------------------------


def test_delete_records_moves_the_low_watermark(client, topic):
    _produce(client, topic, 0, 5)
    result = _delete_records(client, topic, 0, 3)
    assert (result.error_code, result.low_watermark) == (0, 3)


def test_deleted_records_are_gone_for_list_offsets_earliest(client, topic):
    _produce(client, topic, 0, 5)
    _delete_records(client, topic, 0, 3)
    LO = messages.ListOffsetsRequest
    request = LO(replica_id=-1, isolation_level=0, topics=[LO.ListOffsetsTopic(name=topic, partitions=[
        LO.ListOffsetsPartition(partition_index=0, timestamp=-2)])])
    assert client.call(LIST_OFFSETS, 7, request).topics[0].partitions[0].offset == 3


def test_delete_records_minus_one_means_the_high_watermark(client, topic):
    _produce(client, topic, 1, 4)
    result = _delete_records(client, topic, 1, -1)
    assert (result.error_code, result.low_watermark) == (0, 4)


def test_delete_records_beyond_the_high_watermark_is_offset_out_of_range(client, topic):
    _produce(client, topic, 0, 2)
    result = _delete_records(client, topic, 0, 3)
    assert (result.error_code, result.low_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)


def test_delete_records_of_a_missing_partition_is_unknown_topic_or_partition(client, topic):
    assert _delete_records(client, topic, 7, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _delete_records(client, "missing", 0, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_records_on_a_compact_only_topic_is_policy_violation(client, kafka_broker):
    kafka_broker.broker.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    assert _delete_records(client, "compacted", 0, 0).error_code == ErrorCode.POLICY_VIOLATION


# --- DescribeLogDirs -------------------------------------------------------------------------


def test_describe_log_dirs_reports_each_partition_size(client, kafka_broker, topic):
    _produce(client, topic, 0, 3)
    sizes = _sizes(_describe_log_dirs(client, None))
    assert sizes[(topic, 0)] == kafka_broker.broker.logs.get(topic, 0).size > 0
    assert sizes[(topic, 1)] == 0


def test_describe_log_dirs_null_topics_means_every_partition(client, kafka_broker, topic):
    kafka_broker.broker.create_topic("other", 1)
    assert set(_sizes(_describe_log_dirs(client, None))) == set(dict(kafka_broker.broker.logs.items()))


def test_describe_log_dirs_answers_only_the_partitions_asked_for(client, kafka_broker, topic):
    kafka_broker.broker.create_topic("other", 1)
    response = _describe_log_dirs(client, [DLD.DescribableLogDirTopic(topic=topic, partitions=[1])])
    assert set(_sizes(response)) == {(topic, 1)}


def test_describe_log_dirs_gives_the_absolute_log_dir(client, kafka_broker):
    [result] = _describe_log_dirs(client, None).results
    assert result.log_dir == str(kafka_broker.broker.log_dirs[0].absolute())


def test_describe_log_dirs_v4_reports_the_volume_size(client):
    [result] = _describe_log_dirs(client, None, version=4).results
    assert result.total_bytes >= result.usable_bytes > 0


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_describe_log_dirs_answers_every_version(client, topic, version):
    assert (topic, 0) in _sizes(_describe_log_dirs(client, None, version=version))


def test_describe_log_dirs_lists_every_log_dir_with_its_own_partitions(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    with running_broker(tmp_path / "a", **{"log.dirs": ",".join(map(str, dirs))}) as broker:
        broker.broker.create_topic("spread", 2)
        raw = RawClient(broker.bootstrap_servers)
        response = _describe_log_dirs(raw, None)
        raw.close()
        placed = {(t.name, p.partition_index): r.log_dir
                  for r in response.results for t in r.topics for p in t.partitions}
        expected = {tp: str(broker.broker.logs.log_dir_of(*tp).absolute()) for tp in placed}
    assert sorted(r.log_dir for r in response.results) == sorted(str(d.absolute()) for d in dirs)
    assert placed == expected and len(set(placed.values())) == 2
