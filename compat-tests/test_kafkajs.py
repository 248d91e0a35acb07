"""kafkajs (Node.js) against the broker under test.

compat-tests/node/kafkajs_driver.js runs a JSON script of kafkajs calls and prints one JSON result
per step; scripts/test.sh installs its node_modules from package-lock.json
(`npm ci --prefix compat-tests/node`). The lz4 and zstd codecs build native code: where that
failed, their tests skip and say why.
kafkajs only reads through consumer groups, and a group's first join waits
group.initial.rebalance.delay.ms (3 s by default), so the tests that consume share a few Node
processes: one consumer reads the topics of several scenarios at once.

kafkajs speaks old protocol versions (Produce v7, Fetch v11, Metadata v6, ListOffsets v3,
JoinGroup v5, OffsetCommit v5, OffsetFetch v4), chosen from the broker's ApiVersions answer.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

import settle
from confluent_client import RECENT_TIMESTAMP, consume, produce

pytestmark = pytest.mark.client("kafkajs")

NODE_DIR = Path(__file__).parent / "node"
DRIVER = NODE_DIR / "kafkajs_driver.js"
BASE_TIMESTAMP = RECENT_TIMESTAMP - 2 * 86_400_000  # two days ago: +1 day in timestamped_records stays in the past
CODECS = ["gzip", "snappy", "lz4", "zstd"]


@dataclass
class KafkaJs:
    node: str
    unavailable_codecs: dict[str, str]

    def run(self, bootstrap: str, *steps: dict, timeout: float = 60) -> list[dict]:
        """Run `steps` in one Node process; one result per step."""
        script = json.dumps({"brokers": [bootstrap], "steps": list(steps)})
        done = subprocess.run([self.node, str(DRIVER)], input=script, capture_output=True, text=True,
                              timeout=timeout, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise AssertionError(f"kafkajs driver exited {done.returncode}: {done.stdout[-2000:]}\n"
                                 f"{done.stderr[-3000:]}")
        return json.loads(lines[-1])["results"]

    def run_ok(self, bootstrap: str, *steps: dict, timeout: float = 60) -> list[dict]:
        """run(), requiring every step to succeed."""
        results = self.run(bootstrap, *steps, timeout=timeout)
        for step, result in zip(steps, results, strict=True):
            assert result["ok"], f"kafkajs {step['op']} failed: {result['error']}"
        return results


@pytest.fixture(scope="session")
def kafkajs() -> KafkaJs:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: install nodejs and npm (scripts/test.sh does)")
    if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip(f"kafkajs is not installed in {NODE_DIR}: npm ci --prefix {NODE_DIR} (scripts/test.sh does)")
    done = subprocess.run([node, str(DRIVER), json.dumps({"steps": [{"op": "codecs"}]})],
                          capture_output=True, text=True, timeout=30, check=True)
    (result,) = json.loads(done.stdout)["results"]
    return KafkaJs(node, result["unavailable"])


# ---- helpers --------------------------------------------------------------------------------

def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def grouped(headers: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """Headers as kafkajs presents them: an object keyed by name, so repeats gather under the name's
    first position. Record order within one name is kept."""
    names = list(dict.fromkeys(name for name, _ in headers))
    return [(name, value) for wanted in names for name, value in headers if name == wanted]


def kafkajs_message(record: dict) -> dict:
    """A driver message from a record dict in confluent-kafka's produce() shape."""
    message = {"key": b64(record.get("key")), "value": b64(record.get("value")),
               "headers": [[name, b64(value)] for name, value in record.get("headers", [])]}
    for field in ("timestamp", "partition"):
        if field in record:
            message[field] = record[field]
    return message


def received(message: dict) -> tuple:
    """(key, value, headers, timestamp) of a message the driver consumed, bytes decoded."""
    return (unb64(message["key"]), unb64(message["value"]),
            [(name, unb64(value)) for name, value in message["headers"]], message["timestamp"])


def sent(record: dict) -> tuple:
    """What kafkajs must read back for a produced record: headers grouped by name."""
    return record.get("key"), record.get("value"), grouped(record.get("headers", [])), record.get("timestamp")


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    return settle.create_topic(bootstrap, f"compat-kafkajs-{uuid.uuid4().hex[:12]}", partitions)


def produce_step(topic: str, records: list[dict], **options) -> dict:
    return {"op": "produce", "topic": topic, "messages": [kafkajs_message(r) for r in records], **options}


def consume_step(topics: list[str], count: int, **options) -> dict:
    """Read `count` records through a consumer group (a new one unless `groupId` is given)."""
    return {"op": "consume", "topics": topics, "groupId": f"compat-kafkajs-{uuid.uuid4().hex[:8]}",
            "count": count, **options}


def by_topic(messages: list[dict], topic: str) -> list[dict]:
    return sorted((m for m in messages if m["topic"] == topic), key=lambda m: (m["partition"], m["offset"]))


# ---- records of each scenario ---------------------------------------------------------------

def keyed_records() -> list[dict]:
    """Keys, null keys, null values, binary and empty payloads, spread over three partitions."""
    records = []
    for i in range(15):
        key = None if i % 4 == 3 else f"key-{i}".encode()
        value = None if i % 5 == 4 else (b"" if i == 0 else bytes([i, 0, 0xFF]) + f"value-{i}".encode() * i)
        records.append({"key": key, "value": value, "partition": i % 3})
    return records


def header_records() -> list[dict]:
    """Repeated header names, empty and binary header values (kafkajs cannot send a null header value:
    its record encoder measures the value with Buffer.byteLength, which throws on null)."""
    return [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": 0,
             "headers": [("trace", f"t{i}".encode()), ("bin", bytes([0, i, 0xFF])), ("trace", b"again"),
                         ("empty", b"")][: 1 + i % 4]}
            for i in range(8)]


def timestamped_records() -> list[dict]:
    """Explicit CreateTime timestamps, out of order and far in the past, all kept as sent."""
    offsets_ms = [0, 5_000, 1_000, 86_400_000, -1_600_000_000_000, 3]
    return [{"key": None, "value": f"ts{i}".encode(), "partition": 0, "timestamp": BASE_TIMESTAMP + delta}
            for i, delta in enumerate(offsets_ms)]


def compressible_records(codec: str) -> list[dict]:
    return [{"key": f"{codec}-{i}".encode(), "value": (f"{codec} record {i} " * 40).encode(), "partition": 0,
             "headers": [("codec", codec.encode())], "timestamp": BASE_TIMESTAMP + i}
            for i in range(25)]


def cross_client_records() -> list[dict]:
    """What confluent-kafka (librdkafka) produces for kafkajs: null header values, interleaved repeats."""
    return [{"key": None if i % 6 == 5 else f"ck{i}".encode(),
             "value": None if i % 6 == 3 else bytes([i, 0, 255]) + f"cv{i}".encode() * (i % 3 + 1),
             "headers": [("a", f"{i}".encode()), ("nul", None), ("a", b"\x00\xfe")],
             "timestamp": BASE_TIMESTAMP + 7 * i, "partition": 0}
            for i in range(20)]


@dataclass
class Case:
    topic: str
    records: list[dict]
    produce_result: dict | None  # the kafkajs produce step's result; None when confluent-kafka produced


@dataclass
class RoundTrip:
    cases: dict[str, Case]
    consumed: dict

    def messages(self, name: str) -> list[dict]:
        return by_topic(self.consumed["messages"], self.cases[name].topic)


@pytest.fixture(scope="module")
def round_trip(kafkajs: KafkaJs, bootstrap: str) -> RoundTrip:
    """Every scenario's records produced (by kafkajs, or by confluent-kafka for the cross-client case)
    into a topic of its own, then read back by one kafkajs consumer subscribed to all of them."""
    produced_by_kafkajs = {"keys": (keyed_records(), {}), "headers": (header_records(), {}),
                           "timestamps": (timestamped_records(), {})}
    for codec in CODECS:
        if codec not in kafkajs.unavailable_codecs:
            produced_by_kafkajs[codec] = (compressible_records(codec), {"compression": codec})
    cases = {name: Case(create_topic(bootstrap, partitions=3 if name == "keys" else 1), records, None)
             for name, (records, _) in produced_by_kafkajs.items()}
    cases["from-confluent"] = Case(create_topic(bootstrap), cross_client_records(), None)
    produce(bootstrap, cases["from-confluent"].topic, cases["from-confluent"].records)

    steps = [produce_step(cases[name].topic, records, **options)
             for name, (records, options) in produced_by_kafkajs.items()]
    total = sum(len(case.records) for case in cases.values())
    results = kafkajs.run(bootstrap, {"op": "parallel", "steps": steps},
                          consume_step([case.topic for case in cases.values()], total, timeoutMs=20_000))
    for name, result in zip(produced_by_kafkajs, results[0]["results"], strict=True):
        cases[name].produce_result = result
    assert results[1]["ok"], f"kafkajs consume failed: {results[1]['error']}"
    return RoundTrip(cases, results[1])


def assert_round_trip(round_trip: RoundTrip, name: str) -> list[dict]:
    """The case's records came back in order, as sent, at offsets counted from 0 in each partition."""
    case = round_trip.cases[name]
    if case.produce_result is not None:
        assert case.produce_result["ok"], f"kafkajs produce failed: {case.produce_result['error']}"
    messages = round_trip.messages(name)
    expected = [sent(r) for r in sorted(case.records, key=lambda r: r["partition"])]  # stable sort
    got = [received(m) for m in messages]
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    explicit = [i for i, e in enumerate(expected) if e[3] is not None]
    assert [got[i][3] for i in explicit] == [expected[i][3] for i in explicit]
    for partition in {m["partition"] for m in messages}:
        offsets = [m["offset"] for m in messages if m["partition"] == partition]
        assert offsets == list(range(len(offsets)))
    return messages


# ---- metadata and admin ---------------------------------------------------------------------

@pytest.mark.scenario("Metadata and broker discovery")
def test_describe_cluster_finds_the_broker_its_controller_and_cluster_id(kafkajs, bootstrap):
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    (cluster,) = kafkajs.run_ok(bootstrap, {"op": "describeCluster"})
    assert [(b["nodeId"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (broker.id, broker.host, broker.port) for broker in metadata.brokers.values()]
    assert cluster["controller"] in metadata.brokers
    assert cluster["clusterId"] == metadata.cluster_id


@pytest.mark.scenario("Metadata and broker discovery")
def test_topic_metadata_lists_partitions_with_leader_replicas_and_isr(kafkajs, bootstrap, new_topic):
    (broker_id,) = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    (result,) = kafkajs.run_ok(bootstrap, {"op": "fetchTopicMetadata", "topics": [new_topic]})
    (topic,) = result["topics"]
    assert topic["name"] == new_topic
    assert [(p["partitionId"], p["partitionErrorCode"], p["leader"], p["replicas"], p["isr"])
            for p in sorted(topic["partitions"], key=lambda p: p["partitionId"])] == [
        (p, 0, broker_id, [broker_id], [broker_id]) for p in range(3)]


@pytest.mark.scenario("Create/describe/delete topics")
def test_admin_creates_a_topic_with_the_requested_partitions(kafkajs, bootstrap, topic_name):
    created, listed, described = kafkajs.run_ok(
        bootstrap, {"op": "createTopics", "topics": [{"topic": topic_name, "numPartitions": 4}]},
        {"op": "listTopics"}, {"op": "fetchTopicMetadata", "topics": [topic_name]})
    assert created["created"] is True
    assert topic_name in listed["topics"]
    assert sorted(p["partitionId"] for p in described["topics"][0]["partitions"]) == [0, 1, 2, 3]


@pytest.mark.scenario("Create/describe/delete topics")
def test_admin_deletes_a_topic(kafkajs, bootstrap, new_topic):
    _, listed = kafkajs.run_ok(bootstrap, {"op": "deleteTopics", "topics": [new_topic]}, {"op": "listTopics"})
    assert new_topic not in listed["topics"]
    assert new_topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


@pytest.mark.scenario("Error: topic already exists")
def test_creating_an_existing_topic_reports_it_was_not_created(kafkajs, bootstrap, new_topic):
    (result,) = kafkajs.run_ok(bootstrap, {"op": "createTopics", "topics": [{"topic": new_topic, "numPartitions": 1}]})
    assert result["created"] is False  # kafkajs's answer when every topic failed with TOPIC_ALREADY_EXISTS


@pytest.mark.scenario("Error: invalid topic name")
def test_creating_a_topic_with_an_invalid_name_fails(kafkajs, bootstrap):
    (result,) = kafkajs.run(bootstrap, {"op": "createTopics", "topics": [{"topic": "bad name!", "numPartitions": 1}]})
    assert not result["ok"]
    assert [e["type"] for e in result["error"]["errors"]] == ["INVALID_TOPIC_EXCEPTION"]


# ---- produce and consume --------------------------------------------------------------------

@pytest.mark.scenario("Produce and consume: keys, null keys, null values")
def test_keys_null_keys_and_null_values_round_trip(round_trip):
    messages = assert_round_trip(round_trip, "keys")
    assert {m["partition"] for m in messages} == {0, 1, 2}


@pytest.mark.scenario("Produce and consume: keys, null keys, null values")
def test_produce_reports_the_base_offset_of_each_partition(round_trip):
    result = round_trip.cases["keys"].produce_result
    assert result["ok"], result
    assert sorted((m["partition"], m["errorCode"], m["baseOffset"]) for m in result["metadata"]) == [
        (p, 0, "0") for p in range(3)]


@pytest.mark.scenario("Headers")
def test_headers_round_trip_with_repeated_names_and_binary_values(round_trip):
    assert_round_trip(round_trip, "headers")


@pytest.mark.scenario("Explicit timestamps")
def test_explicit_timestamps_are_kept_as_create_time(round_trip):
    messages = assert_round_trip(round_trip, "timestamps")
    assert [m["timestamp"] for m in messages] == [r["timestamp"] for r in timestamped_records()]


@pytest.mark.parametrize("codec", [pytest.param(c, marks=pytest.mark.scenario(f"Compression: {c}")) for c in CODECS])
def test_compressed_batches_round_trip_and_read_the_same_in_confluent_kafka(kafkajs, round_trip, bootstrap, codec):
    if codec in kafkajs.unavailable_codecs:
        pytest.skip(f"kafkajs {codec} codec unavailable: {kafkajs.unavailable_codecs[codec]}")
    messages = assert_round_trip(round_trip, codec)
    from_librdkafka = consume(bootstrap, round_trip.cases[codec].topic, 0, len(messages))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in from_librdkafka] == [
        received(m) for m in messages]


@pytest.mark.scenario("Cross-client: produced by another client")
def test_records_produced_by_confluent_kafka_are_read_identically_by_kafkajs(round_trip):
    assert_round_trip(round_trip, "from-confluent")


@pytest.mark.scenario("Cross-client: produced by another client")
def test_records_produced_by_kafkajs_are_read_identically_by_confluent_kafka(kafkajs, bootstrap, new_topic):
    records = [{**record, "headers": [(n, v) for n, v in record["headers"] if v is not None], "partition": 2}
               for record in cross_client_records()]
    kafkajs.run_ok(bootstrap, produce_step(new_topic, records))
    messages = consume(bootstrap, new_topic, 2, len(records))
    assert [(m.key(), m.value(), m.headers() or [], m.timestamp()[1], m.offset()) for m in messages] == [
        (*sent(r), offset) for offset, r in enumerate(records)]


@pytest.mark.scenario("Idempotent producer")
def test_idempotent_producer_delivers_in_order(kafkajs, bootstrap, new_topic):
    records = [{"value": f"{i}".encode(), "partition": 1} for i in range(50)]
    kafkajs.run_ok(bootstrap, produce_step(new_topic, records, idempotent=True))
    assert [m.value() for m in consume(bootstrap, new_topic, 1, 50)] == [r["value"] for r in records]


# ---- earliest and latest --------------------------------------------------------------------

@pytest.fixture(scope="module")
def earliest_and_latest(kafkajs: KafkaJs, bootstrap: str) -> tuple[dict, dict]:
    """Two new groups on a topic holding 5 records: one from the beginning, one from the end. Once the
    second has fetched (its start offset is resolved), 3 more records arrive."""
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, [{"value": f"old-{i}".encode(), "partition": 0} for i in range(5)])
    newer = [{"value": f"new-{i}".encode(), "partition": 0} for i in range(3)]
    (both,) = kafkajs.run(bootstrap, {"op": "parallel", "steps": [
        consume_step([topic], 8, fromBeginning=True),
        consume_step([topic], 3, fromBeginning=False, whenFetching=[produce_step(topic, newer)]),
    ]})
    earliest, latest = both["results"]
    assert earliest["ok"] and latest["ok"], both
    assert [step["ok"] for step in latest["whenFetching"]] == [True]
    return earliest, latest


@pytest.mark.scenario("Consume from earliest")
def test_new_group_from_beginning_reads_from_the_first_offset(earliest_and_latest):
    earliest, _ = earliest_and_latest
    assert [(m["offset"], unb64(m["value"])) for m in earliest["messages"]] == [
        (i, f"old-{i}".encode()) for i in range(5)] + [(5 + i, f"new-{i}".encode()) for i in range(3)]


@pytest.mark.scenario("Consume from latest")
def test_new_group_from_latest_reads_only_records_produced_after_it_started(earliest_and_latest):
    _, latest = earliest_and_latest
    assert [(m["offset"], unb64(m["value"])) for m in latest["messages"]] == [
        (5 + i, f"new-{i}".encode()) for i in range(3)]
    assert not latest["timedOut"]


# ---- consumer groups ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def group_session(kafkajs: KafkaJs, bootstrap: str) -> dict:
    """One group on a 3-partition topic of 30 records: a first member reads 8 records of partition 0
    and commits them by hand, then leaves; a second member joins and reads on with auto-commit."""
    topic = create_topic(bootstrap, partitions=3)
    produce(bootstrap, topic, [{"value": f"{p}-{i}".encode(), "partition": p} for p in range(3) for i in range(10)])
    group = f"compat-kafkajs-{uuid.uuid4().hex[:8]}"
    fetch_offsets = {"op": "fetchOffsets", "groupId": group, "topics": [topic]}
    results = kafkajs.run_ok(bootstrap, consume_step([topic], 8, groupId=group, commit=True), fetch_offsets,
                             consume_step([topic], 22, groupId=group), fetch_offsets, timeout=90)
    first_read, after_first, second_read, after_second = results
    return {"topic": topic, "first": first_read, "committed_after_first": committed(after_first),
            "second": second_read, "committed_after_second": committed(after_second)}


def committed(fetch_offsets_result: dict) -> dict[int, int]:
    (topic,) = fetch_offsets_result["topics"]
    return {p["partition"]: int(p["offset"]) for p in topic["partitions"]}


def next_offsets(messages: list[dict]) -> dict[int, int]:
    return {m["partition"]: m["offset"] + 1 for m in messages}


@pytest.mark.scenario("Consumer group: subscribe and commit")
def test_group_member_is_assigned_every_partition_of_its_subscription(group_session):
    joins = [e for e in group_session["first"]["events"] if e["event"] == "group_join"]
    assert joins and joins[-1]["memberAssignment"] == {group_session["topic"]: [0, 1, 2]}


@pytest.mark.scenario("Consumer group: subscribe and commit")
def test_manual_commit_stores_the_offsets_after_the_records_read(group_session):
    read = next_offsets(group_session["first"]["messages"])
    assert sum(offset for offset in read.values()) == 8
    assert group_session["committed_after_first"] == {p: read.get(p, -1) for p in range(3)}


@pytest.mark.scenario("Consumer group: subscribe and commit")
def test_auto_commit_stores_the_end_offsets_once_everything_is_read(group_session):
    assert group_session["committed_after_second"] == {0: 10, 1: 10, 2: 10}


@pytest.mark.scenario("Consumer group: resume from committed offsets")
def test_next_member_resumes_from_the_committed_offsets(group_session):
    start = {p: max(offset, 0) for p, offset in group_session["committed_after_first"].items()}  # -1: none
    second = group_session["second"]["messages"]
    assert {p: [m["offset"] for m in second if m["partition"] == p] for p in range(3)} == {
        p: list(range(start[p], 10)) for p in range(3)}


# ---- offsets --------------------------------------------------------------------------------

@pytest.mark.scenario("Watermarks: earliest and latest offsets")
def test_topic_offsets_report_low_and_high_watermarks(kafkajs, bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": b"x", "partition": p} for p in (0, 0, 0, 2)])
    (result,) = kafkajs.run_ok(bootstrap, {"op": "fetchTopicOffsets", "topic": new_topic})
    assert sorted((p["partition"], p["low"], p["high"], p["offset"]) for p in result["partitions"]) == [
        (0, "0", "3", "3"), (1, "0", "0", "0"), (2, "0", "1", "1")]


@pytest.mark.scenario("Consume by timestamp")
def test_offsets_by_timestamp_find_the_first_record_at_or_after(kafkajs, bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": b"t", "partition": 0, "timestamp": BASE_TIMESTAMP + 1000 * i}
                                   for i in range(10)])
    (result,) = kafkajs.run_ok(bootstrap, {"op": "fetchTopicOffsetsByTimestamp", "topic": new_topic,
                                           "timestamp": BASE_TIMESTAMP + 4500})
    assert sorted((p["partition"], p["offset"]) for p in result["partitions"]) == [(0, "5"), (1, "0"), (2, "0")]


# kafkajs writes the batch header's maxTimestamp from the explicit timestamps only (sorted as strings),
# so a batch mixing an explicit old timestamp with records stamped "now" claims the old one as its
# maximum. Apache Kafka's LogValidator recomputes every batch's max timestamp from its records
# (setMaxTimestamp), so its time index, timestamp lookups and time-based retention see the new records.
@pytest.mark.scenario("Consume by timestamp")
def test_offsets_by_timestamp_see_records_whose_batch_header_understates_the_max_timestamp(kafkajs, bootstrap,
                                                                                           new_topic):
    before = int(time.time() * 1000) - 60_000
    kafkajs.run_ok(bootstrap, produce_step(new_topic, [{"value": b"old", "timestamp": BASE_TIMESTAMP, "partition": 0},
                                                       {"value": b"now", "partition": 0}]))
    assert [m.timestamp()[1] >= before for m in consume(bootstrap, new_topic, 0, 2)] == [False, True]
    (result,) = kafkajs.run_ok(bootstrap, {"op": "fetchTopicOffsetsByTimestamp", "topic": new_topic,
                                           "timestamp": before})
    assert {p["partition"]: p["offset"] for p in result["partitions"]}[0] == "1"


# ---- errors ---------------------------------------------------------------------------------

@pytest.mark.scenario("Error: unknown topic with auto-create off")
def test_producing_to_an_unknown_topic_fails_and_creates_nothing(kafkajs, broker_without_auto_create):
    topic = f"compat-missing-{uuid.uuid4().hex[:8]}"
    quick_retry = {"retries": 1, "initialRetryTime": 100}
    produced, listed = kafkajs.run(broker_without_auto_create,
                                   produce_step(topic, [{"value": b"x"}], retry=quick_retry), {"op": "listTopics"})
    assert not produced["ok"]
    error = produced["error"]
    assert (error["name"], error["cause"]["type"]) == ("KafkaJSNumberOfRetriesExceeded", "UNKNOWN_TOPIC_OR_PARTITION")
    assert topic not in listed["topics"]
