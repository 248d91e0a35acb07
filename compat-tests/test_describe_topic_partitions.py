"""DescribeTopicPartitions (KIP-966) through kafka-python's admin client: name order, a partition budget, a cursor.

Found by kafka-python's own integration suite (scripts/client_suites.py): kbroker did not serve the API.
It is a KRaft API: Kafka in ZooKeeper mode does not list it.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.admin import KafkaAdminClient

from settle import create_topic

pytestmark = [pytest.mark.client("kafka-python"), pytest.mark.scenario("Create/describe/delete topics")]
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 3, 42


@pytest.fixture
def admin(bootstrap: str, request: pytest.FixtureRequest):
    if request.config.getoption("--target") == "kafka-zk":
        pytest.skip("DescribeTopicPartitions is a KRaft API; Kafka in ZooKeeper mode does not serve it")
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


@pytest.fixture
def two_topics(bootstrap: str) -> tuple[str, str]:
    """Two 3-partition topics whose names sort as (first, second)."""
    prefix = f"dtp-{uuid.uuid4().hex[:10]}"
    return create_topic(bootstrap, f"{prefix}-a"), create_topic(bootstrap, f"{prefix}-b")


def _shape(result: dict) -> list[tuple[str, int, list[int]]]:
    return [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]]


def test_topics_come_in_name_order_with_every_partition(admin, two_topics):
    first, second = two_topics
    result = admin.describe_topic_partitions([second, first])
    assert _shape(result) == [(first, 0, [0, 1, 2]), (second, 0, [0, 1, 2])]
    assert result["next_cursor"] is None
    partition = result["topics"][0]["partitions"][0]
    assert partition["leader_id"] >= 0 and partition["replica_nodes"] == [partition["leader_id"]]


def test_partition_limit_pages_through_a_cursor(admin, two_topics):
    first, second = two_topics
    page = admin.describe_topic_partitions([first, second], response_partition_limit=4)
    assert _shape(page) == [(first, 0, [0, 1, 2]), (second, 0, [0])]
    assert page["next_cursor"] == {"topic_name": second, "partition_index": 1}
    rest = admin.describe_topic_partitions([first, second], cursor=page["next_cursor"])
    assert _shape(rest) == [(second, 0, [1, 2])]
    assert rest["next_cursor"] is None


def test_limit_spent_at_a_topic_end_points_the_cursor_at_the_next_topic(admin, two_topics):
    first, second = two_topics
    page = admin.describe_topic_partitions([first, second], response_partition_limit=3)
    assert _shape(page) == [(first, 0, [0, 1, 2])]
    assert page["next_cursor"] == {"topic_name": second, "partition_index": 0}


def test_unknown_topic_is_answered_with_its_error(admin, two_topics):
    first, _ = two_topics
    missing = f"{first}-missing"
    result = admin.describe_topic_partitions([missing, first])
    assert _shape(result) == [(first, 0, [0, 1, 2]), (missing, UNKNOWN_TOPIC_OR_PARTITION, [])]


def test_cursor_on_a_topic_not_asked_for_refuses_the_request(admin, two_topics):
    first, second = two_topics
    result = admin.describe_topic_partitions([second], cursor={"topic_name": first, "partition_index": 0})
    assert _shape(result) == [(second, INVALID_REQUEST, [])]
