"""Answers that the wire differential against Apache Kafka (compat-tests/test_wire_differential.py) found
differing, pinned here so they stay as Kafka gives them."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from kbroker.topic_configs import TOPIC_CONFIGS
from wire import headers, messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch
from wire.schema import ZERO_UUID

from raw_client import RawClient

PRODUCE, FETCH = 0, 1
F = messages.FetchRequest


@pytest.fixture
def client(kafka_broker) -> Iterator[RawClient]:
    with contextlib.closing(RawClient(kafka_broker.bootstrap_servers)) as raw:
        yield raw


def _fetch(client: RawClient, topic: str, offset: int):
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def test_fetch_out_of_range_reports_no_offsets(client):
    """Kafka answers OFFSET_OUT_OF_RANGE with high watermark, last stable and log start offsets -1."""
    C, P = messages.CreateTopicsRequest, messages.ProduceRequest
    client.call(19, 5, C(topics=[C.CreatableTopic(name="t", num_partitions=1, replication_factor=1)], timeout_ms=5000))
    records = build_batch([Record(0, 1, None, b"v")])
    client.call(PRODUCE, 9, P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="t", partition_data=[P.PartitionProduceData(index=0, records=records)])]))
    answer = _fetch(client, "t", 100)
    offsets = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
    assert (answer.error_code, offsets) == (ErrorCode.OFFSET_OUT_OF_RANGE, (-1, -1, -1))


def test_fetch_of_an_unknown_topic_has_an_empty_aborted_transactions_list(client):
    """Kafka refuses unknown topics before reading, with an empty (not null) aborted transactions list."""
    answer = _fetch(client, "never-created", 0)
    assert (answer.error_code, answer.aborted_transactions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_served_api_at_an_unserved_version_closes_the_connection(client):
    """Kafka closes the connection on a Fetch (or any served API) at a version outside its range."""
    client.correlation_id += 1
    header = messages.RequestHeader(request_api_key=FETCH, request_api_version=3,
                                    correlation_id=client.correlation_id, client_id="t")
    body = messages.encode(F(replica_id=-1, topics=[]), 4, headers.encode_request_header(header))
    client.send_frame(bytes(body))
    assert client.is_closed_by_peer()


def test_unserved_version_frame_is_not_answered(client):
    """Nothing is written back before the close (no UNSUPPORTED_VERSION frame)."""
    client.correlation_id += 1
    header = messages.RequestHeader(request_api_key=PRODUCE, request_api_version=2,
                                    correlation_id=client.correlation_id, client_id="t")
    body = messages.encode(messages.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 3,
                           headers.encode_request_header(header))
    client.send_frame(bytes(body))
    assert client.sock.recv(4) == b""


def test_consumer_group_member_without_regex_is_described_with_an_empty_regex(client):
    """Kafka describes a KIP-848 member that subscribed by names with subscribed_topic_regex "" (not null)."""
    H, D = messages.ConsumerGroupHeartbeatRequest, messages.ConsumerGroupDescribeRequest
    joined = client.call(68, 0, H(group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                                  subscribed_topic_names=["t"], topic_partitions=[]))
    assert joined.error_code == ErrorCode.NONE
    described = client.call(69, 0, D(group_ids=["g"]))
    assert described.groups[0].members[0].subscribed_topic_regex == ""


# --- ApiVersions: Kafka 4.4's ranges and the v5 checks (KIP-1242) ------------------------------------------

API_VERSIONS, INIT_PRODUCER_ID, DELETE_GROUPS = 18, 22, 42
REBOOTSTRAP_REQUIRED = 129
AV = messages.ApiVersionsRequest


def _api_versions(client: RawClient, version: int = 5, **fields):
    fields.setdefault("client_software_name", "raw-test")
    fields.setdefault("client_software_version", "1.0")
    return client.call(API_VERSIONS, version, AV(**fields))


def test_api_versions_advertises_kafka_4s_ranges_for_what_kbroker_serves_fully(client):
    """ApiVersions v0-5 and DeleteGroups v0-3 as Kafka 4.4; InitProducerId stops at v5 (v6 is two-phase commit)."""
    ranges = {k.api_key: (k.min_version, k.max_version) for k in _api_versions(client).api_keys}
    assert (ranges[API_VERSIONS], ranges[INIT_PRODUCER_ID], ranges[DELETE_GROUPS]) == ((0, 5), (0, 5), (0, 3))


def test_api_versions_v5_naming_this_broker_is_answered(client, kafka_broker):
    broker = kafka_broker.broker
    answer = _api_versions(client, cluster_id=broker.cluster_id, node_id=broker.node_id)
    assert answer.error_code == ErrorCode.NONE and answer.api_keys


@pytest.mark.parametrize("target", [("another-cluster", 0), ("this cluster", 7)], ids=["cluster", "node"])
def test_api_versions_v5_naming_another_broker_asks_the_client_to_bootstrap_again(client, kafka_broker, target):
    cluster_id = kafka_broker.broker.cluster_id if target[0] == "this cluster" else target[0]
    answer = _api_versions(client, cluster_id=cluster_id, node_id=target[1])
    assert (answer.error_code, answer.api_keys) == (REBOOTSTRAP_REQUIRED, [])


def test_api_versions_v5_naming_a_cluster_without_a_node_is_invalid(client):
    answer = _api_versions(client, cluster_id="some-cluster", node_id=-1)
    assert (answer.error_code, answer.api_keys) == (ErrorCode.INVALID_REQUEST, [])


def test_api_versions_v3_refuses_a_client_software_name_that_is_not_a_name(client):
    answer = _api_versions(client, 3, client_software_name="raw test")
    assert (answer.error_code, answer.api_keys) == (ErrorCode.INVALID_REQUEST, [])


def test_delete_groups_v3_is_served_with_a_null_message_for_an_unknown_group(client):
    [result] = client.call(DELETE_GROUPS, 3, messages.DeleteGroupsRequest(groups_names=["nobody"])).results
    assert (result.error_code, result.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, None)


# --- error messages where Kafka sets one, and none where it does not ------------------------------------------

KAFKA_UNKNOWN_TOPIC = "This server does not host this topic-partition."


def _create(client: RawClient, name: str, partitions: int = 1, version: int = 5, validate_only: bool = False,
            **configs: str):
    C = messages.CreateTopicsRequest
    given = [C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()]
    request = C(topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, configs=given)],
                timeout_ms=5000, validate_only=validate_only)
    return client.call(19, version, request).topics[0]


@pytest.mark.parametrize("version", [1, 3])
def test_find_coordinator_v1_to_v3_names_no_error_as_none(client, version):
    request = messages.FindCoordinatorRequest(key="g", key_type=0)
    answer = client.call(10, version, request)
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, "NONE")


def test_describe_producers_explains_an_unknown_topic_but_not_an_unknown_partition(client):
    _create(client, "t")
    D = messages.DescribeProducersRequest
    request = D(topics=[D.TopicRequest(name="missing", partition_indexes=[0]), D.TopicRequest(name="t",
                                                                                              partition_indexes=[9])])
    answers = [t.partitions[0] for t in client.call(61, 0, request).topics]
    assert [(a.error_code, a.error_message) for a in answers] == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, KAFKA_UNKNOWN_TOPIC), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)]


def test_describe_groups_v6_says_an_unknown_group_was_not_found(client):
    [group] = client.call(15, 6, messages.DescribeGroupsRequest(groups=["nobody"])).groups
    assert (group.error_code, group.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nobody not found.")


def test_delete_topics_explains_an_unknown_topic_name_and_id(client):
    D = messages.DeleteTopicsRequest
    request = D(topics=[D.DeleteTopicState(name="missing"), D.DeleteTopicState(name=None, topic_id=uuid.UUID(int=5))],
                timeout_ms=5000)
    answers = [(r.error_code, r.error_message) for r in client.call(20, 6, request).responses]
    assert answers == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, KAFKA_UNKNOWN_TOPIC),
                       (ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")]


def test_create_partitions_gives_no_message_for_an_unknown_topic(client):
    C = messages.CreatePartitionsRequest
    request = C(topics=[C.CreatePartitionsTopic(name="missing", count=2, assignments=None)], timeout_ms=5000)
    [result] = client.call(37, 3, request).results
    assert (result.error_code, result.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)


# --- CreateTopics v5+ answers every config of the new topic ---------------------------------------------------

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


def test_create_topics_v5_answers_every_topic_config_by_name(client):
    result = _create(client, "t", **{"retention.ms": "1000"})
    described = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in result.configs}
    assert [c.name for c in result.configs] == sorted(TOPIC_CONFIGS)
    assert described["retention.ms"] == ("1000", DYNAMIC_TOPIC_CONFIG, False, False)
    assert described["segment.bytes"] == ("1073741824", DEFAULT_CONFIG, False, False)


def test_create_topics_v5_answers_an_empty_config_list_for_a_topic_it_refuses(client):
    _create(client, "t")
    result = _create(client, "t")
    assert (result.error_code, result.configs) == (ErrorCode.TOPIC_ALREADY_EXISTS, [])


def test_create_topics_validate_only_names_the_topic_it_would_create_with_an_id(client):
    result = _create(client, "t", version=7, validate_only=True)
    assert result.error_code == ErrorCode.NONE and result.topic_id != ZERO_UUID
    assert _create(client, "t").error_code == ErrorCode.NONE  # nothing was created


# --- DescribeConfigs lists a topic's configs in Kafka 4's order --------------------------------------------------

# Kafka 4.4's order (the iteration order of its LogConfig's HashMap); kbroker adds the three configs Kafka 4
# removed, each where its hash puts it
KAFKA_4_TOPIC_CONFIG_ORDER = [
    "compression.type", "errors.deadletterqueue.group.enable", "remote.copy.lag.bytes",
    "remote.log.delete.on.disable", "leader.replication.throttled.replicas", "remote.storage.enable",
    "min.insync.replicas", "segment.jitter.ms", "remote.log.copy.disable", "local.retention.ms", "cleanup.policy",
    "flush.ms", "follower.replication.throttled.replicas", "compression.lz4.level", "segment.bytes", "retention.ms",
    "compression.gzip.level", "remote.copy.lag.ms", "flush.messages", "compression.zstd.level",
    "max.compaction.lag.ms", "file.delete.delay.ms", "max.message.bytes", "min.compaction.lag.ms",
    "message.timestamp.type", "local.retention.bytes", "preallocate", "index.interval.bytes",
    "min.cleanable.dirty.ratio", "unclean.leader.election.enable", "retention.bytes", "delete.retention.ms",
    "message.timestamp.after.max.ms", "max.decompressed.message.bytes", "message.timestamp.before.max.ms",
    "segment.ms", "segment.index.bytes"]
REMOVED_IN_KAFKA_4 = {"message.format.version", "message.downconversion.enable",
                      "message.timestamp.difference.max.ms"}


def _described_names(client: RawClient, keys: list[str] | None) -> list[str]:
    D = messages.DescribeConfigsRequest
    request = D(resources=[D.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=keys)],
                include_synonyms=False, include_documentation=False)
    return [c.name for c in client.call(32, 4, request).results[0].configs]


def test_describe_configs_lists_a_topics_configs_in_kafka_4s_order(client):
    _create(client, "t")
    listed = _described_names(client, None)
    assert [name for name in listed if name not in REMOVED_IN_KAFKA_4] == KAFKA_4_TOPIC_CONFIG_ORDER
    assert set(listed) == set(TOPIC_CONFIGS)


def test_describe_configs_lists_the_keys_asked_for_in_that_order_too(client):
    _create(client, "t")
    assert _described_names(client, ["cleanup.policy", "retention.ms", "segment.bytes"]) == [
        "cleanup.policy", "segment.bytes", "retention.ms"]
