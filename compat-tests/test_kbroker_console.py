"""The web console (docs/console.md) against the target broker (kbroker, or Apache Kafka with --target kafka): what
its JSON endpoints show is cross-checked through confluent-kafka directly, so the console is proven to read any
Kafka-protocol broker, not only kbroker."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.console import start_console
from kbroker.console.server import ConsoleServer

pytestmark = pytest.mark.client("kbroker-console")
BROKERS = pytest.mark.scenario("Console: brokers and topics")
MESSAGES = pytest.mark.scenario("Console: message browser and produce")
GROUPS = pytest.mark.scenario("Console: consumer groups and lag")
RECORDS = 20
TIMEOUT = 30


def get(console: ConsoleServer, path: str) -> dict:
    with urllib.request.urlopen(console.url + path, timeout=TIMEOUT) as answer:
        return json.load(answer)


def post(console: ConsoleServer, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(console.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    """Two partitions; partition 1 holds RECORDS keyed records with a header."""
    name = f"console-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + TIMEOUT
    while not admin.list_topics(name, timeout=10).topics[name].partitions.get(1):
        assert time.monotonic() < deadline, f"{name} never showed its partitions"
        time.sleep(0.2)
    for index in range(RECORDS):
        producer.produce(name, key=f"key-{index}", value=json.dumps({"index": index}), partition=1,
                         headers=[("source", b"compat")])
    assert producer.flush(TIMEOUT) == 0
    return name


@pytest.fixture(scope="module")
def console(bootstrap: str) -> Iterator[ConsoleServer]:
    served = start_console(bootstrap, port=0, lag_interval_s=0.5)
    try:
        yield served
    finally:
        served.close()


@BROKERS
def test_the_console_shows_the_brokers_and_controller_metadata_names(console: ConsoleServer, bootstrap: str) -> None:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT)
    cluster = get(console, "api/cluster")
    assert sorted(broker["id"] for broker in cluster["brokers"]) == sorted(metadata.brokers)
    assert cluster["controller"]["id"] == metadata.controller_id
    assert [broker["id"] for broker in cluster["brokers"] if broker["controller"]] == [metadata.controller_id]


@BROKERS
def test_a_topic_page_shows_the_leaders_isr_offsets_and_size_the_broker_reports(
        console: ConsoleServer, bootstrap: str, topic: str) -> None:
    described = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=TIMEOUT).topics[topic]
    shown = get(console, f"api/topics/{topic}")
    assert [(p["partition"], p["leader"], p["isr"]) for p in shown["partitions"]] == [
        (index, described.partitions[index].leader, sorted(described.partitions[index].isrs)) for index in (0, 1)]
    second = shown["partitions"][1]
    assert (second["earliest_offset"], second["latest_offset"]) == (0, RECORDS)
    assert second["size_bytes"] > 0  # DescribeLogDirs answered by the broker itself
    assert {config["name"] for config in shown["configs"]} >= {"cleanup.policy", "retention.ms"}


@MESSAGES
def test_the_message_browser_reads_keys_values_and_headers_from_an_offset(console: ConsoleServer, topic: str) -> None:
    shown = get(console, f"api/topics/{topic}/messages?partition=1&offset=5&limit=3")["messages"]
    assert [(m["offset"], m["key"]["text"], json.loads(m["value"]["text"])) for m in shown] == [
        (offset, f"key-{offset}", {"index": offset}) for offset in (5, 6, 7)]
    assert shown[0]["headers"] == [{"key": "source", "value": {"text": "compat"}}]


@MESSAGES
def test_a_message_produced_from_the_console_is_read_back_by_a_consumer(
        console: ConsoleServer, bootstrap: str, topic: str) -> None:
    status, acknowledged = post(console, f"api/topics/{topic}/messages",
                                {"key": "probe", "value": "from the console", "partition": 0})
    assert status == 201
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}"})
    try:
        consumer.assign([TopicPartition(topic, 0, acknowledged["offset"])])
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"probe", b"from the console")
    finally:
        consumer.close()


@GROUPS
def test_a_group_shows_its_committed_offsets_and_lag(console: ConsoleServer, bootstrap: str, topic: str) -> None:
    group = f"console-group-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, 1, 15)], asynchronous=False)
    finally:
        committer.close()
    deadline = time.monotonic() + TIMEOUT
    while not any(row["group_id"] == group for row in get(console, "api/groups")["groups"]):
        assert time.monotonic() < deadline, f"{group} never listed"
        time.sleep(0.2)
    rows = {(row["topic"], row["partition"]): row for row in get(console, f"api/groups/{group}")["offsets"]}
    assert rows[(topic, 1)]["committed_offset"] == 15
    assert rows[(topic, 1)]["lag"] == RECORDS - 15
