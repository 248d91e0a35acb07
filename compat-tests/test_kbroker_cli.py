"""The `kbroker` client verbs (docs/cli.md) as real subprocesses against the target broker (kbroker, or Apache
Kafka with --target kafka), their --json output cross-checked through confluent-kafka directly."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

CLI = pytest.mark.client("kbroker-cli")
TOPICS = pytest.mark.scenario("CLI: topics")
RECORDS = pytest.mark.scenario("CLI: produce and consume")
GROUPS = pytest.mark.scenario("CLI: consumer groups")
CONFIGS = pytest.mark.scenario("CLI: configs")


def kbroker(bootstrap: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    verb, *rest = args
    return subprocess.run([sys.executable, "-m", "kbroker.cli", verb, *rest, "--bootstrap-server", bootstrap],
                          input=stdin, capture_output=True, text=True, timeout=90)


def kbroker_json(bootstrap: str, *args: str, stdin: str = ""):
    done = kbroker(bootstrap, *args, "--json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def consumed_json(bootstrap: str, *args: str) -> list[dict]:
    done = kbroker(bootstrap, "consume", *args, "--json", "--timeout-ms", "5000")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce_directly(bootstrap: str, topic: str, values: list[str], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(30) == 0


def wait_for_metadata(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} never showed {partitions} partitions")


@pytest.fixture
def cli_topic(bootstrap: str) -> str:
    topic = unique("cli")
    kbroker_json(bootstrap, "topics", "create", "--topic", topic, "--partitions", "2", "--replication-factor", "1")
    wait_for_metadata(bootstrap, topic, 2)
    return topic


@CLI
@TOPICS
def test_topics_create_makes_a_topic_the_admin_client_sees_with_its_partitions_and_config(bootstrap: str) -> None:
    topic = unique("cli-create")
    kbroker_json(bootstrap, "topics", "create", "--topic", topic, "--partitions", "3", "--replication-factor", "1",
                 "--config", "retention.ms=12345")
    wait_for_metadata(bootstrap, topic, 3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    (entries,) = [future.result(30) for future in configs.values()]
    assert entries["retention.ms"].value == "12345"


@CLI
@TOPICS
def test_topics_list_and_describe_show_a_topic_and_its_partitions(bootstrap: str, cli_topic: str) -> None:
    assert cli_topic in kbroker_json(bootstrap, "topics", "list")
    (described,) = kbroker_json(bootstrap, "topics", "describe", "--topic", cli_topic)
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader"] >= 0 for p in described["partitions"])


@CLI
@TOPICS
def test_topics_alter_raises_the_partition_count(bootstrap: str, cli_topic: str) -> None:
    kbroker_json(bootstrap, "topics", "alter", "--topic", cli_topic, "--partitions", "4")
    wait_for_metadata(bootstrap, cli_topic, 4)


@CLI
@TOPICS
def test_topics_delete_removes_the_topic(bootstrap: str, cli_topic: str) -> None:
    kbroker_json(bootstrap, "topics", "delete", "--topic", cli_topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while cli_topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "topic still listed"
        time.sleep(0.2)


@CLI
@TOPICS
def test_creating_an_existing_topic_exits_1_with_kafkas_error_name(bootstrap: str, cli_topic: str) -> None:
    done = kbroker(bootstrap, "topics", "create", "--topic", cli_topic, "--partitions", "1")
    assert done.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in done.stderr


@CLI
@TOPICS
def test_bad_usage_exits_2(bootstrap: str) -> None:
    assert kbroker(bootstrap, "topics", "create").returncode == 2


@CLI
@RECORDS
def test_produce_sends_keys_and_headers_parsed_from_lines(bootstrap: str, cli_topic: str) -> None:
    lines = "h1:a,h2:b\tk1:one\n\tk2:two\n"
    summary = kbroker_json(bootstrap, "produce", "--topic", cli_topic, "--partition", "1",
                           "--property", "parse.key=true", "--property", "key.separator=:",
                           "--property", "parse.headers=true", stdin=lines)
    assert summary["records"] == 2
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check")})
    consumer.assign([TopicPartition(cli_topic, 1, 0)])
    records = [consumer.poll(10) for _ in range(2)]
    consumer.close()
    assert [(m.key(), m.value()) for m in records] == [(b"k1", b"one"), (b"k2", b"two")]
    assert records[0].headers() == [("h1", b"a"), ("h2", b"b")]


@CLI
@RECORDS
def test_consume_from_beginning_prints_every_record_as_json_lines(bootstrap: str, cli_topic: str) -> None:
    produce_directly(bootstrap, cli_topic, ["a", "b", "c"])
    records = consumed_json(bootstrap, "--topic", cli_topic, "--from-beginning", "--max-messages", "3")
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]


@CLI
@RECORDS
def test_consume_from_an_offset_starts_there(bootstrap: str, cli_topic: str) -> None:
    produce_directly(bootstrap, cli_topic, ["a", "b", "c"])
    records = consumed_json(bootstrap, "--topic", cli_topic, "--partition", "0", "--offset", "1",
                            "--max-messages", "2")
    assert [r["value"] for r in records] == ["b", "c"]


@CLI
@RECORDS
def test_consume_from_a_datetime_skips_older_records(bootstrap: str, cli_topic: str) -> None:
    produce_directly(bootstrap, cli_topic, ["old"])
    time.sleep(1.1)
    from datetime import datetime

    middle = datetime.now().astimezone().isoformat()
    time.sleep(0.1)
    produce_directly(bootstrap, cli_topic, ["new"])
    records = consumed_json(bootstrap, "--topic", cli_topic, "--from-datetime", middle, "--max-messages", "1")
    assert [r["value"] for r in records] == ["new"]


@CLI
@RECORDS
def test_consume_prints_key_and_headers_as_the_console_consumer(bootstrap: str, cli_topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(cli_topic, key=b"k", value=b"v", headers=[("h", b"x")], partition=0)
    producer.flush(30)
    done = kbroker(bootstrap, "consume", "--topic", cli_topic, "--from-beginning", "--max-messages", "1",
                   "--property", "print.key=true", "--property", "print.headers=true",
                   "--property", "key.separator=|")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "h:x|k|v\n"


@CLI
@GROUPS
def test_a_group_consumed_through_the_cli_is_listed_and_described_with_its_lag(bootstrap: str,
                                                                              cli_topic: str) -> None:
    group = unique("cli-group")
    produce_directly(bootstrap, cli_topic, ["a", "b", "c", "d"])
    consumed_json(bootstrap, "--topic", cli_topic, "--group", group, "--from-beginning", "--max-messages", "4")
    produce_directly(bootstrap, cli_topic, ["e"])
    assert group in [g["group"] for g in kbroker_json(bootstrap, "groups", "list")]
    (described,) = kbroker_json(bootstrap, "groups", "describe", "--group", group)
    assert [(p["partition"], p["current_offset"], p["lag"]) for p in described["partitions"]] == [(0, 4, 1)]


@CLI
@GROUPS
def test_groups_reset_moves_committed_offsets_only_with_execute(bootstrap: str, cli_topic: str) -> None:
    group = unique("cli-reset")
    produce_directly(bootstrap, cli_topic, ["a", "b", "c"])
    consumed_json(bootstrap, "--topic", cli_topic, "--group", group, "--from-beginning", "--max-messages", "3")
    dry = kbroker_json(bootstrap, "groups", "reset", "--group", group, "--topic", cli_topic, "--to-earliest")
    assert not dry["executed"] and {(o["partition"], o["new_offset"]) for o in dry["offsets"]} == {(0, 0), (1, 0)}
    assert committed(bootstrap, group, cli_topic) == 3
    kbroker_json(bootstrap, "groups", "reset", "--group", group, "--topic", cli_topic, "--to-offset", "1", "--execute")
    assert committed(bootstrap, group, cli_topic) == 1


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    (position,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    consumer.close()
    return position.offset


@CLI
@GROUPS
def test_groups_delete_removes_an_empty_group(bootstrap: str, cli_topic: str) -> None:
    group = unique("cli-delete")
    produce_directly(bootstrap, cli_topic, ["a"])
    consumed_json(bootstrap, "--topic", cli_topic, "--group", group, "--from-beginning", "--max-messages", "1")
    kbroker_json(bootstrap, "groups", "delete", "--group", group)
    assert group not in [g["group"] for g in kbroker_json(bootstrap, "groups", "list")]


@CLI
@CONFIGS
def test_configs_alter_adds_and_deletes_topic_configs(bootstrap: str, cli_topic: str) -> None:
    kbroker_json(bootstrap, "configs", "--entity-type", "topics", "--entity-name", cli_topic, "--alter",
                 "--add-config", "retention.ms=60000,cleanup.policy=compact")
    described = kbroker_json(bootstrap, "configs", "--entity-type", "topics", "--entity-name", cli_topic, "--describe")
    assert described["retention.ms"]["value"] == "60000"
    assert described["cleanup.policy"]["value"] == "compact"
    kbroker_json(bootstrap, "configs", "--entity-type", "topics", "--entity-name", cli_topic, "--alter",
                 "--delete-config", "retention.ms")
    described = kbroker_json(bootstrap, "configs", "--entity-type", "topics", "--entity-name", cli_topic, "--describe")
    assert "retention.ms" not in described


@CLI
@RECORDS
def test_produce_reads_a_file_and_consume_raw_prints_its_lines_back(bootstrap: str, cli_topic: str,
                                                                    tmp_path) -> None:
    lines = [f"line {n}" for n in range(500)]
    source = tmp_path / "records.txt"
    source.write_text("\n".join(lines) + "\n")
    summary = kbroker_json(bootstrap, "produce", "--topic", cli_topic, "--partition", "0", "--file", str(source))
    assert summary["records"] == 500 and summary["records_per_second"] > 0
    done = kbroker(bootstrap, "consume", "--topic", cli_topic, "--from-beginning", "--format", "raw",
                   "--max-messages", "500")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == lines
