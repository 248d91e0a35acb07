"""KIP-848 members subscribed by regex, driven through the coordinator as Kafka 4's would see them:
the regex is Kafka's dialect (RE2), and the assignment follows the member from regex to regex,
to a topic list and back, and follows topics as they are created and deleted."""

from __future__ import annotations

import uuid

import pytest

from kbroker.broker import Topic
from kbroker.coordinator.consumer_groups import ConsumerGroupCoordinator, HeartbeatRequest, HeartbeatResult
from wire.errors import ErrorCode

GROUP = "g"


class Cluster:
    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}

    def create(self, name: str, partitions: int = 2) -> uuid.UUID:
        self.topics[name] = Topic(name, uuid.uuid4(), partitions)
        return self.topics[name].topic_id

    def ids(self, *names: str) -> set[uuid.UUID]:
        return {self.topics[name].topic_id for name in names}


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster()
    for name in ("t1-a", "t1-b", "t2-a", "listed"):
        cluster.create(name)
    return cluster


@pytest.fixture
def coordinator(cluster: Cluster) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(lambda: cluster.topics, assignors=("range",), clock=lambda: 0.0)


class Member:
    """One member that reports, on each heartbeat, exactly what it was last given."""

    def __init__(self, coordinator: ConsumerGroupCoordinator, member_id: str = "m") -> None:
        self.coordinator = coordinator
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def heartbeat(self, **subscription) -> HeartbeatResult:
        rebalance_timeout = 30_000 if self.epoch == 0 else -1
        result = self.coordinator.heartbeat(HeartbeatRequest(
            GROUP, self.member_id, self.epoch, rebalance_timeout_ms=rebalance_timeout,
            owned=[(topic_id, parts) for topic_id, parts in self.owned.items()], **subscription))
        assert result.error_code == ErrorCode.NONE, result.error_message
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = {topic_id: sorted(parts) for topic_id, parts in result.assignment.items()}
        return result

    def settle(self, **subscription) -> set[uuid.UUID]:
        """Heartbeats (the first carrying `subscription`) until the assignment stops moving; its topics."""
        self.heartbeat(**subscription)
        for _ in range(5):
            self.heartbeat()
        return set(self.owned)


def test_member_follows_its_subscription_from_regex_to_regex_to_list_and_back(
        cluster: Cluster, coordinator: ConsumerGroupCoordinator) -> None:
    member = Member(coordinator)
    assert member.settle(subscribed_topic_regex="t1.*", subscribed_topic_names=[]) == cluster.ids("t1-a", "t1-b")
    assert member.settle(subscribed_topic_regex="t2.*") == cluster.ids("t2-a")
    assert member.settle(subscribed_topic_regex="", subscribed_topic_names=["listed"]) == cluster.ids("listed")
    assert member.settle(subscribed_topic_regex="t1.*", subscribed_topic_names=[]) == cluster.ids("t1-a", "t1-b")


def test_regex_member_gains_created_and_loses_deleted_topics(cluster: Cluster,
                                                             coordinator: ConsumerGroupCoordinator) -> None:
    member = Member(coordinator)
    member.settle(subscribed_topic_regex="t1.*", subscribed_topic_names=[])
    cluster.create("t1-c")
    assert member.settle() == cluster.ids("t1-a", "t1-b", "t1-c")
    del cluster.topics["t1-b"]
    assert member.settle() == cluster.ids("t1-a", "t1-c")


def test_member_that_leaves_and_rejoins_again_and_again_gets_its_assignment_each_time(
        cluster: Cluster, coordinator: ConsumerGroupCoordinator) -> None:
    member = Member(coordinator)
    for round_ in range(20):
        subscription = {"subscribed_topic_regex": "t1.*", "subscribed_topic_names": []} if round_ % 2 else \
            {"subscribed_topic_regex": None, "subscribed_topic_names": ["listed"]}
        expected = cluster.ids("t1-a", "t1-b") if round_ % 2 else cluster.ids("listed")
        assert member.settle(**subscription) == expected
        left = coordinator.heartbeat(HeartbeatRequest(GROUP, member.member_id, -1))
        assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
        member.epoch, member.owned = 0, {}
    assert coordinator.group(GROUP).members == {}


def test_regex_in_kafka_syntax_only_is_resolved(cluster: Cluster, coordinator: ConsumerGroupCoordinator) -> None:
    member = Member(coordinator)
    topics = member.settle(subscribed_topic_regex="[[:alnum:]]+-\\pL", subscribed_topic_names=[])
    assert topics == cluster.ids("t1-a", "t1-b", "t2-a")


def test_regex_kafka_refuses_is_an_invalid_regular_expression(coordinator: ConsumerGroupCoordinator) -> None:
    result = coordinator.heartbeat(HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=30_000, owned=[],
                                                    subscribed_topic_regex="(?!t2).*"))
    assert result.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert result.error_message.startswith("SubscribedTopicRegex `(?!t2).*` is not a valid regular expression: ")
