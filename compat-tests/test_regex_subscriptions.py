"""KIP-848 regex subscriptions: the broker resolves a member's regex, and the member's assignment
follows it as it changes (regex to regex, to a topic list and back) and as matching topics are
created and deleted; a member that leaves and rejoins again and again keeps being answered.

Clients: the Java kafka-clients 4.x consumer with `subscribe(SubscriptionPattern)` (the regex goes to
the broker; compat-tests/java/SubscriptionHarness.java) and confluent-kafka, whose "^"-topics become
the member's SubscribedTopicRegex. Both need ConsumerGroupHeartbeat v1 (SubscribedTopicRegex), served
by Kafka 4.0 and later: on Kafka 3.9, whose KIP-848 preview is v0 only, these tests skip. Kafka
resolves regexes apart from heartbeats, at most every 10 s, so a topic created later reaches the
member after up to that long there (at once on kbroker); the waits allow for it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from java_harness import SUBSCRIPTION_HARNESS, JavaHarness, compile_harness

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from differential import Connection, build  # noqa: E402
from group_clients import HEARTBEAT_KEY, api_versions  # noqa: E402
from settle import TIMEOUT, create_topic, eventually  # noqa: E402

SCENARIO = "Consumer group protocol: regex subscriptions (KIP-848)"
pytestmark = pytest.mark.scenario(SCENARIO)
# Kafka refuses a heartbeat interval below group.consumer.min.heartbeat.interval.ms (5 s by default)
HEARTBEAT = ("group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=500")
FOLLOW_S = 45  # Kafka's regex refresh (10 s apart at most) plus a heartbeat or two, with room
LOOP_ROUNDS = 8
METADATA_BY_ID_VERSION = 12  # Metadata v12: topics may be asked for by id

Assignment = frozenset[str]  # "topic:partition"


@pytest.fixture(scope="module")
def broker(own_broker) -> str:
    return own_broker("kip848-regex", *HEARTBEAT).bootstrap


@pytest.fixture
def regex_protocol(broker: str) -> None:
    """Skips unless the broker serves ConsumerGroupHeartbeat v1, the first with SubscribedTopicRegex (asked with
    ApiVersions): Kafka 4.0 and later; Kafka 3.9's KIP-848 preview stops at v0."""
    highest = api_versions(broker).get(HEARTBEAT_KEY, (0, -1))[1]
    if highest < 1:
        pytest.skip(f"the broker serves ConsumerGroupHeartbeat up to v{highest}; a regex subscription needs v1 "
                    "(SubscribedTopicRegex, Kafka 4.0+)")


class Topics:
    """Topics of one test, named `<prefix>-<suffix>`, two partitions each."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = f"re{uuid.uuid4().hex[:10]}"
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def regex(self, stem: str) -> str:
        return f"{self.prefix}-{stem}.*"

    def create(self, *suffixes: str) -> None:
        for suffix in suffixes:
            create_topic(self.bootstrap, self.name(suffix), 2)

    def delete(self, suffix: str) -> None:
        self.admin.delete_topics([self.name(suffix)])[self.name(suffix)].result(TIMEOUT)

    def partitions(self, *suffixes: str) -> Assignment:
        return frozenset(f"{self.name(suffix)}:{p}" for suffix in suffixes for p in (0, 1))


@pytest.fixture
def topics(broker: str, regex_protocol: None) -> Topics:
    made = Topics(broker)
    made.create("t1-a", "t1-b", "t2-a", "listed")
    return made


def _group() -> str:
    return f"kip848re-{uuid.uuid4().hex[:12]}"


def _member_count(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return len(admin.describe_consumer_groups([group])[group].result(TIMEOUT).members)


@pytest.mark.client("wire")
def test_metadata_by_topic_id_names_the_topic_even_with_an_empty_name(bootstrap: str, topic_name: str) -> None:
    """The Java consumer asks for the topics of a broker-resolved regex by id, with names left empty ("")."""
    create_topic(bootstrap, topic_name, 1)
    connection = Connection(bootstrap)
    try:
        by_name = build("MetadataRequest", METADATA_BY_ID_VERSION, {"topics": [{"name": topic_name}],
                                                                    "allow_auto_topic_creation": False})
        topic_id = connection.call(3, METADATA_BY_ID_VERSION, by_name).topics[0].topic_id
        by_id = build("MetadataRequest", METADATA_BY_ID_VERSION, {"topics": [{"name": "", "topic_id": topic_id}],
                                                                  "allow_auto_topic_creation": False})
        [found] = connection.call(3, METADATA_BY_ID_VERSION, by_id).topics
    finally:
        connection.close()
    assert (found.error_code, found.name, found.topic_id, len(found.partitions)) == (0, topic_name, topic_id, 1)


# ---- Java kafka-clients 4.x: subscribe(SubscriptionPattern) ----------------------------------

@pytest.fixture(scope="module")
def java4(tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    return compile_harness(tmp_path_factory.mktemp("java-regex"), "4", extra=(SUBSCRIPTION_HARNESS,))


class JavaMember:
    """One SubscriptionHarness JVM: a Java consumer whose subscription the test changes while it polls."""

    def __init__(self, harness: JavaHarness, bootstrap: str, group: str) -> None:
        self.group = group
        self.process = subprocess.Popen(harness.command("SubscriptionHarness", bootstrap, group),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        self.lines: queue.Queue[dict] = queue.Queue()
        self.assignment: Assignment = frozenset()
        self.poll_errors: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def _next(self, deadline: float) -> dict | None:
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if line["type"] == "assignment":
            self.assignment = frozenset(line["partitions"])
        elif line["type"] == "poll-error":
            self.poll_errors.append(line)
        elif line["type"] == "error":
            raise AssertionError(f"SubscriptionHarness failed: {line}")
        return line

    def do(self, command: str, timeout: float = 60) -> None:
        """Run one command (pattern, topics, unsubscribe) and wait until the consumer call returned."""
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while (line := self._next(deadline)) is not None:
            if line == {"type": "applied", "command": command}:
                return
        raise AssertionError(f"`{command}` not applied within {timeout} s")

    def wait_for(self, expected: Assignment, timeout: float = FOLLOW_S) -> Assignment:
        """The assignment once it is `expected`, or the last one seen after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.assignment != expected and self._next(deadline) is not None:
            pass
        return self.assignment

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.process.stdin.write("exit\n")
                self.process.stdin.flush()
                self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def java_member(java4: JavaHarness, broker: str, group: str) -> Iterator[JavaMember]:
    member = JavaMember(java4, broker, group)
    yield member
    member.close()


@pytest.mark.client("java")
def test_java_pattern_subscription_gets_the_topics_the_broker_resolves(java_member: JavaMember,
                                                                       topics: Topics) -> None:
    java_member.do(f"pattern {topics.regex('t1')}")
    assert java_member.wait_for(topics.partitions("t1-a", "t1-b")) == topics.partitions("t1-a", "t1-b")
    assert java_member.poll_errors == []


@pytest.mark.client("java")
def test_java_assignment_follows_the_subscription_from_regex_to_regex_to_list_and_back(
        java_member: JavaMember, topics: Topics) -> None:
    """Between a pattern and a topic list the Java consumer must unsubscribe (it refuses to mix them)."""
    java_member.do(f"pattern {topics.regex('t1')}")
    assert java_member.wait_for(topics.partitions("t1-a", "t1-b")) == topics.partitions("t1-a", "t1-b")
    java_member.do(f"pattern {topics.regex('t2')}")
    assert java_member.wait_for(topics.partitions("t2-a")) == topics.partitions("t2-a")
    java_member.do("unsubscribe")
    java_member.do(f"topics {topics.name('listed')}")
    assert java_member.wait_for(topics.partitions("listed")) == topics.partitions("listed")
    java_member.do("unsubscribe")
    java_member.do(f"pattern {topics.regex('t1')}")
    assert java_member.wait_for(topics.partitions("t1-a", "t1-b")) == topics.partitions("t1-a", "t1-b")
    assert java_member.poll_errors == []


@pytest.mark.client("java")
def test_java_pattern_member_gains_a_created_topic_and_loses_a_deleted_one(java_member: JavaMember,
                                                                          topics: Topics) -> None:
    java_member.do(f"pattern {topics.regex('t1')}")
    java_member.wait_for(topics.partitions("t1-a", "t1-b"))
    topics.create("t1-c")
    assert java_member.wait_for(topics.partitions("t1-a", "t1-b", "t1-c")) == \
        topics.partitions("t1-a", "t1-b", "t1-c")
    topics.delete("t1-b")
    assert java_member.wait_for(topics.partitions("t1-a", "t1-c")) == topics.partitions("t1-a", "t1-c")


@pytest.mark.client("java")
def test_java_member_leaving_and_rejoining_in_a_loop_is_answered_every_time(java_member: JavaMember,
                                                                             topics: Topics) -> None:
    """Each round the member joins by regex, leaves, joins by name and leaves; every join is answered with its
    assignment, and the loop leaves no member behind."""
    seen = []
    for _ in range(LOOP_ROUNDS):
        for command, expected in ((f"pattern {topics.regex('t1')}", topics.partitions("t1-a", "t1-b")),
                                  (f"topics {topics.name('listed')}", topics.partitions("listed"))):
            java_member.do(command)
            seen.append(java_member.wait_for(expected) == expected)
            java_member.do("unsubscribe")
    java_member.do(f"pattern {topics.regex('t')}")
    final = topics.partitions("t1-a", "t1-b", "t2-a")
    assert seen == [True] * (2 * LOOP_ROUNDS)
    assert java_member.wait_for(final) == final
    assert java_member.poll_errors == []
    assert _member_count(topics.bootstrap, java_member.group) == 1


# ---- confluent-kafka (librdkafka): "^"-topics are the member's regex --------------------------

@pytest.fixture
def group() -> str:
    return _group()


@pytest.fixture
def confluent_member(broker: str, group: str) -> Iterator[Consumer]:
    consumer = Consumer({"bootstrap.servers": broker, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    yield consumer
    consumer.close()


def _assigned(consumer: Consumer, expected: Assignment, timeout: float = FOLLOW_S) -> Assignment:
    """Polls until the consumer's assignment is `expected`; the last one seen after `timeout` seconds."""
    def read() -> Assignment:
        message = consumer.poll(0.1)
        assert message is None or message.error() is None, message.error()
        return frozenset(f"{tp.topic}:{tp.partition}" for tp in consumer.assignment())

    return eventually(read, lambda assignment: assignment == expected, timeout)


def _follows(consumer: Consumer, subscribe: Callable[[], None], expected: Assignment) -> bool:
    subscribe()
    return _assigned(consumer, expected) == expected


@pytest.mark.client("confluent-kafka")
def test_confluent_assignment_follows_the_subscription_from_regex_to_regex_to_list_and_back(
        confluent_member: Consumer, topics: Topics) -> None:
    steps = [([f"^{topics.regex('t1')}"], topics.partitions("t1-a", "t1-b")),
             ([f"^{topics.regex('t2')}"], topics.partitions("t2-a")),
             ([topics.name("listed")], topics.partitions("listed")),
             ([f"^{topics.regex('t1')}"], topics.partitions("t1-a", "t1-b"))]
    for subscription, expected in steps:
        confluent_member.subscribe(subscription)
        assert _assigned(confluent_member, expected) == expected, subscription


@pytest.mark.client("confluent-kafka")
def test_confluent_regex_member_gains_a_created_topic_and_loses_a_deleted_one(confluent_member: Consumer,
                                                                             topics: Topics) -> None:
    confluent_member.subscribe([f"^{topics.regex('t1')}"])
    _assigned(confluent_member, topics.partitions("t1-a", "t1-b"))
    topics.create("t1-c")
    expected = topics.partitions("t1-a", "t1-b", "t1-c")
    assert _assigned(confluent_member, expected) == expected
    topics.delete("t1-b")
    assert _assigned(confluent_member, topics.partitions("t1-a", "t1-c")) == topics.partitions("t1-a", "t1-c")


@pytest.mark.client("confluent-kafka")
def test_confluent_member_subscribing_and_unsubscribing_in_a_loop_is_answered_every_time(
        confluent_member: Consumer, topics: Topics, group: str) -> None:
    """Each round the member joins by regex, moves to a topic list and leaves; every change is answered with its
    assignment, and the loop leaves no member behind."""
    seen = []
    for _ in range(LOOP_ROUNDS):
        seen.append(_follows(confluent_member, lambda: confluent_member.subscribe([f"^{topics.regex('t1')}"]),
                             topics.partitions("t1-a", "t1-b")))
        seen.append(_follows(confluent_member, lambda: confluent_member.subscribe([topics.name("listed")]),
                             topics.partitions("listed")))
        seen.append(_follows(confluent_member, confluent_member.unsubscribe, frozenset()))
    final = topics.partitions("t1-a", "t1-b", "t2-a")
    confluent_member.subscribe([f"^{topics.regex('t')}"])
    assert seen == [True] * (3 * LOOP_ROUNDS)
    assert _assigned(confluent_member, final) == final
    assert _member_count(topics.bootstrap, group) == 1
