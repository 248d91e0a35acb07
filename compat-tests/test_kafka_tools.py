"""Apache Kafka's own command-line tools against the broker under test: the 4.x tools (Kafka 4.4.0, the
kafka-4 set of compat-tests/java/pom.xml), run by their main classes (`java -cp ... org.apache.kafka.tools.X`),
as kafka-topics.sh, kafka-configs.sh, kafka-consumer-groups.sh, kafka-console-producer/consumer.sh,
kafka-get-offsets.sh, kafka-delete-records.sh, kafka-log-dirs.sh, kafka-transactions.sh and the perf-test
scripts would.

Each test parses what the tool printed and checks real values (partition counts, offsets, lag), so the same
assertions hold on kbroker and on Apache Kafka (`--target kafka`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import kafka_tools
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import group_clients
import settle
from settle import eventually

pytestmark = pytest.mark.client("kafka-tools")
TIMEOUT = 15


def tool(name: str, bootstrap: str, *args: object, stdin: str | None = None) -> str:
    return kafka_tools.run(name, "--bootstrap-server", bootstrap, *args, stdin=stdin)


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for index in range(count):
        producer.produce(topic, key=f"k{index}", value=f"v{index}", partition=partition)
    assert producer.flush(TIMEOUT) == 0


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commits offsets for `group` without joining it (a simple consumer group, as an offsets-only app)."""
    group_clients.commit_confluent(bootstrap, group, topic, {partition: (offset, "") for partition, offset in
                                                              offsets.items()})


def describe_topic(bootstrap: str, topic: str) -> dict[str, str]:
    """The summary line of `kafka-topics --describe`: {"PartitionCount": "2", "Configs": "a=b,c=d", ...}."""
    summary = tool("TopicCommand", bootstrap, "--describe", "--topic", topic).splitlines()[0]
    return dict(field.split(": ", 1) for field in summary.split("\t") if ": " in field)


def offsets(bootstrap: str, topic: str, *args: str) -> dict[int, int]:
    """`kafka-get-offsets` lines "topic:partition:offset" as {partition: offset}."""
    output = tool("GetOffsetShell", bootstrap, "--topic", topic, *args)
    return {int(partition): int(offset) for _, partition, offset in
            (line.rsplit(":", 2) for line in output.splitlines() if line.startswith(topic + ":"))}


def group_rows(bootstrap: str, group: str) -> dict[int, dict[str, str]]:
    """`kafka-consumer-groups --describe` table rows by partition."""
    return table(tool("ConsumerGroupCommand", bootstrap, "--describe", "--group", group))


def table(output: str) -> dict[int, dict[str, str]]:
    """A kafka-consumer-groups table (--describe, --reset-offsets) as {partition: {column: value}}."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    header = next(line for line in lines if line[:2] == ["GROUP", "TOPIC"])
    rows = [dict(zip(header, line, strict=True)) for line in lines if len(line) == len(header) and line != header]
    return {int(row["PARTITION"]): row for row in rows}


@pytest.mark.scenario("Topics: create, describe, alter, delete")
def test_topic_command_creates_a_topic_with_partitions_and_config(bootstrap: str, topic_name: str) -> None:
    """--create with --partitions and --config; --describe shows both."""
    assert f"Created topic {topic_name}." in tool("TopicCommand", bootstrap, "--create", "--topic", topic_name,
                                                  "--partitions", 2, "--config", "retention.ms=123456789")
    summary = eventually(lambda: describe_topic(bootstrap, topic_name), lambda found: "PartitionCount" in found)
    assert summary["PartitionCount"] == "2"
    assert summary["ReplicationFactor"] == "1"
    assert "retention.ms=123456789" in summary["Configs"].split(",")


@pytest.mark.scenario("Topics: create, describe, alter, delete")
def test_topic_command_alter_adds_partitions(bootstrap: str, new_topic: str) -> None:
    """--alter --partitions 5 grows a 3-partition topic; --describe lists a row per partition."""
    tool("TopicCommand", bootstrap, "--alter", "--topic", new_topic, "--partitions", 5)
    described = eventually(lambda: tool("TopicCommand", bootstrap, "--describe", "--topic", new_topic),
                           lambda text: "PartitionCount: 5" in text)
    assert "PartitionCount: 5" in described
    assert sorted(int(found) for found in re.findall(r"Partition: (\d+)\t", described)) == [0, 1, 2, 3, 4]


@pytest.mark.scenario("Topics: create, describe, alter, delete")
def test_topic_command_deletes_a_topic(bootstrap: str, new_topic: str) -> None:
    """--delete removes the topic from --list (Kafka finishes a deletion asynchronously)."""
    tool("TopicCommand", bootstrap, "--delete", "--topic", new_topic)
    listed = eventually(lambda: tool("TopicCommand", bootstrap, "--list").split(), lambda names: new_topic not in names)
    assert new_topic not in listed


@pytest.mark.scenario("Describe/alter configs")
def test_config_command_alters_and_describes_topic_configs(bootstrap: str, new_topic: str) -> None:
    """kafka-configs --alter --add-config then --delete-config; --describe shows the dynamic topic configs."""
    def dynamic() -> dict[str, str]:
        output = tool("ConfigCommand", bootstrap, "--entity-type", "topics", "--entity-name", new_topic, "--describe")
        return dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", output, re.MULTILINE))

    tool("ConfigCommand", bootstrap, "--entity-type", "topics", "--entity-name", new_topic, "--alter",
         "--add-config", "retention.ms=7200000,cleanup.policy=compact")
    expected = {"retention.ms": "7200000", "cleanup.policy": "compact"}
    assert eventually(dynamic, lambda found: len(found) == 2) == expected
    tool("ConfigCommand", bootstrap, "--entity-type", "topics", "--entity-name", new_topic, "--alter",
         "--delete-config", "cleanup.policy")
    assert eventually(dynamic, lambda found: len(found) == 1) == {"retention.ms": "7200000"}


@pytest.mark.scenario("Describe/alter configs")
def test_config_command_sets_a_cluster_wide_broker_default(bootstrap: str) -> None:
    """--entity-type brokers --entity-default: a dynamic log config for every broker, listed by --describe
    (set back afterwards: the broker is shared)."""
    default = ("ConfigCommand", bootstrap, "--entity-type", "brokers", "--entity-default")
    tool(*default, "--alter", "--add-config", "log.flush.interval.ms=86400000")
    try:
        described = eventually(lambda: tool(*default, "--describe"), lambda text: "log.flush.interval.ms=" in text)
        assert re.search(r"^\s+log\.flush\.interval\.ms=86400000 sensitive=false", described, re.MULTILINE), described
    finally:
        tool(*default, "--alter", "--delete-config", "log.flush.interval.ms")


@pytest.mark.scenario("Describe/alter configs")
def test_config_command_alters_and_describes_one_broker(bootstrap: str) -> None:
    """--entity-type brokers --entity-name <id>: a dynamic per-broker config, described with its synonyms
    (set back afterwards: the broker is shared)."""
    node = str(next(iter(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT).brokers)))
    broker = ("ConfigCommand", bootstrap, "--entity-type", "brokers", "--entity-name", node)
    assert f"Completed updating config for broker {node}." in tool(*broker, "--alter", "--add-config",
                                                                   "log.retention.ms=3600000")
    try:
        described = eventually(lambda: tool(*broker, "--describe"), lambda text: "log.retention.ms=" in text)
        assert ("  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
                "DEFAULT_CONFIG:log.retention.hours=168}") in described.splitlines(), described
    finally:
        tool(*broker, "--alter", "--delete-config", "log.retention.ms")


@pytest.mark.scenario("Console producer and consumer")
def test_console_producer_and_consumer_round_trip_keys_headers_and_offsets(bootstrap: str, topic_name: str) -> None:
    """Records written by the console producer (keys, headers) come back from the console consumer with their
    partition and offsets 0..2, and the consumer's group commits its position."""
    settle.create_topic(bootstrap, topic_name, 1)
    lines = "".join(f"h{index}:x{index}\tk{index}\tv{index}\n" for index in range(3))
    tool("ConsoleProducer", bootstrap, "--topic", topic_name, "--reader-property", "parse.key=true",
         "--reader-property", "parse.headers=true", stdin=lines)
    group = f"{topic_name}-console"
    output = tool("ConsoleConsumer", bootstrap, "--topic", topic_name, "--from-beginning", "--max-messages", 3,
                  "--timeout-ms", 30000, "--group", group,
                  *(f"--formatter-property=print.{what}=true" for what in ("key", "offset", "partition", "headers")))
    records = [line.split("\t") for line in output.splitlines() if line.startswith("Partition:")]
    assert records == [["Partition:0", f"Offset:{index}", f"h{index}:x{index}", f"k{index}", f"v{index}"]
                       for index in range(3)]
    assert group_rows(bootstrap, group)[0]["CURRENT-OFFSET"] == "3"


@pytest.mark.scenario("Consumer groups: list, describe lag, reset, delete")
def test_consumer_group_command_lists_and_describes_lag(bootstrap: str, new_topic: str) -> None:
    """A group committed at 2 (of 5) on partition 0 and 0 (of 0) on partition 1: --list names it, --describe
    shows current offset, log end offset and lag per partition."""
    produce(bootstrap, new_topic, 5)
    group = f"{new_topic}-lag"
    commit(bootstrap, group, new_topic, {0: 2, 1: 0})
    assert group in tool("ConsumerGroupCommand", bootstrap, "--list").split()
    rows = group_rows(bootstrap, group)
    assert {partition: (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) for partition, row in rows.items()} \
        == {0: ("2", "5", "3"), 1: ("0", "0", "0")}


@pytest.mark.scenario("Consumer groups: list, describe lag, reset, delete")
def test_consumer_group_command_resets_offsets_with_execute(bootstrap: str, new_topic: str) -> None:
    """--reset-offsets --execute moves the committed offset: --to-offset 4, then --to-earliest (0) and
    --to-latest (the log end offset, 6)."""
    produce(bootstrap, new_topic, 6)
    group = f"{new_topic}-reset"
    commit(bootstrap, group, new_topic, {0: 1})
    reset = ("ConsumerGroupCommand", bootstrap, "--reset-offsets", "--group", group, "--topic", f"{new_topic}:0",
             "--execute")
    assert table(tool(*reset, "--to-offset", 4))[0]["NEW-OFFSET"] == "4"
    assert group_rows(bootstrap, group)[0]["CURRENT-OFFSET"] == "4"
    assert table(tool(*reset, "--to-earliest"))[0]["NEW-OFFSET"] == "0"
    assert table(tool(*reset, "--to-latest"))[0]["NEW-OFFSET"] == "6"


@pytest.mark.scenario("Consumer groups: list, describe lag, reset, delete")
def test_consumer_group_command_deletes_a_group(bootstrap: str, new_topic: str) -> None:
    """--delete removes an empty group and its offsets; --list no longer names it."""
    group = f"{new_topic}-gone"
    commit(bootstrap, group, new_topic, {0: 0})
    assert f"'{group}'" in tool("ConsumerGroupCommand", bootstrap, "--delete", "--group", group)
    assert group not in tool("ConsumerGroupCommand", bootstrap, "--list").split()


@pytest.mark.scenario("Get offsets and delete records")
def test_get_offsets_and_delete_records_move_the_log_start(bootstrap: str, new_topic: str, tmp_path: Path) -> None:
    """kafka-get-offsets gives the latest (-1) and earliest (-2) offsets per partition; kafka-delete-records
    moves partition 0's low watermark to 3, which get-offsets then reports."""
    produce(bootstrap, new_topic, 5)
    produce(bootstrap, new_topic, 2, partition=2)
    assert offsets(bootstrap, new_topic) == {0: 5, 1: 0, 2: 2}
    assert offsets(bootstrap, new_topic, "--time", "-2") == {0: 0, 1: 0, 2: 0}
    request = tmp_path / "delete-records.json"
    request.write_text(json.dumps({"partitions": [{"topic": new_topic, "partition": 0, "offset": 3}], "version": 1}))
    output = tool("DeleteRecordsCommand", bootstrap, "--offset-json-file", request)
    assert re.search(rf"partition: {new_topic}-0\s+low_watermark: 3", output), output
    assert offsets(bootstrap, new_topic, "--time", "-2", "--partitions", "0") == {0: 3}


@pytest.mark.scenario("Log dirs")
def test_log_dirs_command_reports_partition_sizes(bootstrap: str, new_topic: str) -> None:
    """kafka-log-dirs --describe: one log dir per broker, a partition with data has a size, an empty one 0."""
    produce(bootstrap, new_topic, 4)

    def sizes() -> dict[str, int]:
        output = tool("LogDirsCommand", bootstrap, "--describe", "--topic-list", new_topic)
        report = json.loads(next(line for line in output.splitlines() if line.startswith("{")))
        [broker] = report["brokers"]
        return {entry["partition"]: entry["size"] for log_dir in broker["logDirs"] for entry in log_dir["partitions"]}

    found = eventually(sizes, lambda by_partition: by_partition.get(f"{new_topic}-0", 0) > 0)
    assert set(found) == {f"{new_topic}-{partition}" for partition in range(3)}
    assert found[f"{new_topic}-0"] > 4 * len("k0v0")
    assert found[f"{new_topic}-1"] == 0


@pytest.mark.scenario("Producer and consumer perf tests")
def test_producer_and_consumer_perf_tests_move_every_record(bootstrap: str, topic_name: str) -> None:
    """kafka-producer-perf-test sends 2000 records of 100 bytes; kafka-consumer-perf-test reads all 2000 back."""
    settle.create_topic(bootstrap, topic_name, 1)
    produced = kafka_tools.run("ProducerPerformance", "--topic", topic_name, "--num-records", 2000, "--record-size",
                               100, "--throughput", -1, "--command-property", f"bootstrap.servers={bootstrap}")
    assert re.search(r"^2000 records sent", produced, re.MULTILINE), produced
    assert offsets(bootstrap, topic_name) == {0: 2000}
    consumed = tool("ConsumerPerformance", bootstrap, "--topic", topic_name, "--num-records", 2000, "--timeout", 30000)
    header, values = (line.split(", ") for line in consumed.strip().splitlines()[-2:])
    assert dict(zip(header, values, strict=True))["data.consumed.in.nMsg"] == "2000"


def _open_transaction(bootstrap: str, topic: str, transactional_id: str) -> Producer:
    """A transactional producer with one record of `topic`-0 in a transaction left open."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": 0})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(TIMEOUT) == 0
    return producer


def _table(output: str) -> list[dict[str, str]]:
    """The rows of a kafka-transactions table, by column name (columns are separated by runs of spaces)."""
    header, *rows = [line for line in output.splitlines() if line.strip()]
    names = header.split()
    return [dict(zip(names, re.split(r"\s{2,}|\t", row.strip()), strict=False)) for row in rows]


@pytest.mark.scenario("Transactions: kafka-transactions list, describe, abort")
def test_transactions_command_lists_and_describes_an_open_transaction(bootstrap: str, new_topic: str) -> None:
    transactional_id = f"tool-{new_topic}"
    producer = _open_transaction(bootstrap, new_topic, transactional_id)
    try:
        listed = [row for row in _table(tool("TransactionsCommand", bootstrap, "list"))
                  if row.get("TransactionalId") == transactional_id]
        assert [row["TransactionState"] for row in listed] == ["Ongoing"]
        (described,) = _table(tool("TransactionsCommand", bootstrap, "describe", "--transactional-id",
                                   transactional_id))
        assert (described["TransactionState"], described["TopicPartitions"]) == ("Ongoing", f"{new_topic}-0")
    finally:
        producer.abort_transaction(TIMEOUT)


@pytest.mark.scenario("Transactions: kafka-transactions list, describe, abort")
def test_transactions_command_aborts_an_open_transaction_on_its_partition(bootstrap: str, new_topic: str) -> None:
    """kafka-transactions abort writes an ABORT marker straight to the partition's leader (WriteTxnMarkers), found
    from DescribeProducers by the transaction's start offset: the last stable offset then passes it."""
    producer = _open_transaction(bootstrap, new_topic, f"tool-{new_topic}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tool-{new_topic}",
                         "isolation.level": "read_committed"})
    try:
        tool("TransactionsCommand", bootstrap, "abort", "--topic", new_topic, "--partition", 0, "--start-offset", 0)
        low_high = eventually(lambda: consumer.get_watermark_offsets(TopicPartition(new_topic, 0), timeout=TIMEOUT),
                              lambda marks: marks[1] == 2)
        assert low_high == (0, 2)  # the record and its marker: nothing left open
    finally:
        consumer.close()
        producer.abort_transaction(TIMEOUT)
