"""ListConfigResources (API 74, KIP-1142): the resources that have configs, by type.

Found by kafka-python's own integration suite (scripts/client_suites.py, test_list_config_resources):
kbroker did not serve the API. v0 (KIP-714's ListClientMetricsResources) lists client-metrics resources
only; v1 (Kafka 4.1+) lists any config resource type. Kafka 3.9 serves v0 in KRaft mode and neither
version in ZooKeeper mode, so on a Kafka 3.9 target each test skips when ApiVersions lacks the version it
needs. kbroker answers as Kafka 4.x and must serve both: there a missing version fails the test.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.admin import KafkaAdminClient

import differential as wd
from group_clients import api_versions, commit_confluent
from settle import create_topic

pytestmark = [pytest.mark.client("kafka-python"), pytest.mark.scenario("Describe/alter configs")]
wire = pytest.mark.client("wire")

LIST_CONFIG_RESOURCES, METADATA = 74, 3
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8  # Kafka's ConfigResource.Type ids
NOT_A_CONFIG_RESOURCE_TYPE = 64
UNSUPPORTED_VERSION = 35


@pytest.fixture(scope="module")
def highest_version(bootstrap: str) -> int | None:
    """The newest ListConfigResources version the broker serves, None when it serves none."""
    served = api_versions(bootstrap).get(LIST_CONFIG_RESOURCES)
    return served and served[1]


@pytest.fixture
def v0(request: pytest.FixtureRequest, highest_version: int | None) -> int:
    return served_or_skip(request.config, highest_version, 0)


@pytest.fixture
def v1(request: pytest.FixtureRequest, highest_version: int | None) -> int:
    return served_or_skip(request.config, highest_version, 1)


def is_kafka_3_9(config: pytest.Config) -> bool:
    target = config.getoption("--target")
    return target == "kafka-zk" or (target == "kafka" and config.getoption("--kafka-version") == "3.9")


def served_or_skip(config: pytest.Config, highest_version: int | None, version: int) -> int:
    """`version`, or a skip on a Kafka 3.9 that does not serve it (KIP-1142 came in Kafka 4.1)."""
    if is_kafka_3_9(config) and highest_version is None:
        pytest.skip("Kafka 3.9 in ZooKeeper mode does not serve ListConfigResources")
    if is_kafka_3_9(config) and highest_version < version:
        pytest.skip(f"Kafka 3.9 serves ListConfigResources up to v{highest_version}; resource types need "
                    f"v{version} (Kafka 4.1+, KIP-1142)")
    return version


@pytest.fixture(scope="module")
def connection(bootstrap: str):
    conn = wd.Connection(bootstrap)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def admin(bootstrap: str):
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    return create_topic(bootstrap, f"lcr-{uuid.uuid4().hex[:10]}", 1)


@pytest.fixture(scope="module")
def node_id(connection: wd.Connection) -> str:
    """The broker's id as a BROKER resource names it."""
    brokers = connection.call(METADATA, 1, wd.build("MetadataRequest", 1, {"topics": []})).brokers
    assert len(brokers) == 1, brokers
    return str(brokers[0].node_id)


def list_resources(connection: wd.Connection, version: int, types: list[int] | None = None):
    request = wd.build("ListConfigResourcesRequest", version, {"resource_types": types or []})
    return connection.call(LIST_CONFIG_RESOURCES, version, request)


def test_no_type_lists_the_broker_its_loggers_and_every_topic(admin, v1, topic, node_id):
    listed = admin.list_config_resources()
    assert listed["broker"] == [node_id]
    assert listed["broker_logger"] == [node_id]
    assert topic in listed["topic"]


def test_a_named_type_lists_that_type_only(admin, v1, topic):
    listed = admin.list_config_resources(["TOPIC"])
    assert list(listed) == ["topic"]
    assert topic in listed["topic"]


def test_internal_topics_are_listed(bootstrap, admin, v1, topic):
    commit_confluent(bootstrap, f"lcr-g-{uuid.uuid4().hex[:8]}", topic, {0: (0, "")})  # makes __consumer_offsets
    assert "__consumer_offsets" in admin.list_config_resources(["TOPIC"])["topic"]


def test_a_group_without_configs_is_not_listed(bootstrap, admin, v1, topic):
    group = f"lcr-g-{uuid.uuid4().hex[:8]}"
    commit_confluent(bootstrap, group, topic, {0: (0, "")})
    assert group not in admin.list_config_resources(["GROUP"]).get("group", [])


@wire
def test_types_come_in_kafkas_order_not_the_requests(connection, v1, topic, node_id):
    response = list_resources(connection, v1, [TOPIC, BROKER, BROKER_LOGGER])
    listed = [(resource.resource_type, resource.resource_name) for resource in response.config_resources]
    assert response.error_code == 0
    assert listed[:2] == [(BROKER_LOGGER, node_id), (BROKER, node_id)]
    assert {resource_type for resource_type, _ in listed[2:]} == {TOPIC}
    assert (TOPIC, topic) in listed


@wire
def test_a_type_that_is_not_a_config_resource_refuses_the_whole_request(connection, v1, topic):
    alone = list_resources(connection, v1, [TOPIC])
    with_another = list_resources(connection, v1, [TOPIC, NOT_A_CONFIG_RESOURCE_TYPE])
    assert alone.error_code == 0 and alone.config_resources
    assert (with_another.error_code, with_another.config_resources) == (UNSUPPORTED_VERSION, [])


@wire
def test_v0_lists_client_metrics_resources_only(connection, v0, topic):
    response = list_resources(connection, v0)
    assert response.error_code == 0
    assert topic not in [resource.resource_name for resource in response.config_resources]
