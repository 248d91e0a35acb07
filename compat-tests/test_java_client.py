"""The official Java kafka-clients against the broker under test, in two generations: 3.9 and the newest 4.x.

The client jars are resolved by Maven (compat-tests/java/pom.xml, jar sets clients-3.9 and clients-4), and
compat-tests/java/KafkaHarness.java is compiled with javac once per session and generation (java_harness.py).
Each harness call is one short JVM printing JSON lines, so tests batch their work into as few calls as they
can. The calls cover what Spark's Kafka connector relies on: AdminClient topic descriptions and
listOffsets, consumer assign/seek/poll without a group, and the (idempotent) producer.

Without a JDK or the jars these tests skip locally and fail under CI (CI set in the env).
"""

from __future__ import annotations

import base64
import itertools
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from confluent_client import consume, produce
from group_clients import once_coordinator_ready
from java_harness import JavaHarness, compile_harness, generations
from matrix import codec_params

pytestmark = pytest.mark.client("java")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TIMESTAMP = 1_700_000_000_000  # KafkaHarness.BASE_TIMESTAMP: record i carries BASE + 1000 * i
KEEP_FOREVER = {"retention.ms": "-1"}  # records stamped in 2023 are past the default 7-day retention


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic whose time retention never deletes: the broker's retention check (Kafka's first runs 30 s after
    start, then every 5 min) would otherwise delete the old-stamped records these tests write under them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=KEEP_FOREVER)
    admin.create_topics([new])[topic].result(15)


@generations()
def java(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    """The harness on kafka-clients of each generation: every test here runs once per generation."""
    return compile_harness(tmp_path_factory.mktemp(f"java-harness-{request.param}"), request.param)


@pytest.fixture
def new_topic(bootstrap: str, topic_name: str) -> str:
    """conftest's fresh 3-partition topic, kept past time retention (see _create_topic)."""
    _create_topic(bootstrap, topic_name, 3)
    return topic_name


# ---- helpers --------------------------------------------------------------------------------

def _bytes(encoded: str | None) -> bytes | None:
    return None if encoded is None else base64.b64decode(encoded)


def _record(line: dict) -> tuple:
    """(key, value, headers, timestamp) of a harness line, with bytes decoded."""
    headers = [(name, _bytes(value)) for name, value in line["headers"]]
    return _bytes(line["key"]), _bytes(line["value"]), headers, line.get("sent_timestamp", line.get("timestamp"))


def _of_type(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["type"] == kind]


def _topic_partitions(bootstrap: str, topic: str) -> list[int] | None:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    found = metadata.topics.get(topic)
    return None if found is None or found.error is not None else sorted(found.partitions)


# ---- producer and consumer ------------------------------------------------------------------

# kafka-clients 3.x producers are idempotent by default (acks=all), so the uncompressed run covers that too.
@pytest.mark.parametrize("codec", codec_params(CODECS, "Produce and consume: keys, null keys, null values", "Headers",
                                                "Explicit timestamps", "Idempotent producer"))
def test_java_records_round_trip_with_keys_headers_and_timestamps(java, bootstrap, new_topic, codec):
    lines = java.run("produce", bootstrap, new_topic, 1, 30, codec,
                     "--", "consume-assign", bootstrap, new_topic, 1, "earliest", 30)
    produced, consumed = _of_type(lines, "record_metadata"), _of_type(lines, "record")
    assert [(m["partition"], m["offset"], m["timestamp"]) for m in produced] == [
        (1, i, BASE_TIMESTAMP + 1000 * i) for i in range(30)]
    assert [_record(r) for r in consumed] == [_record(m) for m in produced]
    assert [r["offset"] for r in consumed] == list(range(30))
    assert {r["timestamp_type"] for r in consumed} == {"CreateTime"}
    assert _of_type(lines, "end")[0]["position"] == 30


@pytest.mark.scenario("Producer acks=1")
def test_producer_with_acks_1_skips_idempotence_and_still_delivers(java, bootstrap, new_topic):
    produced = _of_type(java.run("produce", bootstrap, new_topic, 0, 10, "none", "1"), "record_metadata")
    assert [m["offset"] for m in produced] == list(range(10))
    assert [m.value() for m in consume(bootstrap, new_topic, 0, 10)] == [
        _record(m)[1] for m in produced]


@pytest.mark.scenario("Consume from explicit offset")
def test_consumer_seeks_to_an_explicit_offset(java, bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": f"v{i}".encode(), "partition": 2} for i in range(20)])
    lines = java.run("consume-assign", bootstrap, new_topic, 2, 12, 5)
    assert _of_type(lines, "start")[0]["position"] == 12
    consumed = _of_type(lines, "record")
    assert [(r["offset"], _bytes(r["value"])) for r in consumed] == [(i, f"v{i}".encode()) for i in range(12, 17)]


@pytest.mark.scenario("Consume from latest")
def test_consumer_seek_to_end_lands_on_the_log_end_offset(java, bootstrap, new_topic):
    produce(bootstrap, new_topic, [{"value": b"x", "partition": 0} for _ in range(7)])
    lines = java.run("consume-assign", bootstrap, new_topic, 0, "latest", 0)
    assert _of_type(lines, "start")[0]["position"] == 7
    assert _of_type(lines, "end")[0] == {"type": "end", "received": 0, "position": 7}


# ---- cross-client ---------------------------------------------------------------------------

@pytest.mark.scenario("Cross-client: produced by another client")
def test_records_produced_by_java_are_read_identically_by_confluent_kafka(java, bootstrap, new_topic):
    produced = _of_type(java.run("produce", bootstrap, new_topic, 0, 25), "record_metadata")
    received = consume(bootstrap, new_topic, 0, 25)
    assert [(m.key(), m.value(), m.headers() or [], m.timestamp()[1]) for m in received] == [
        _record(m) for m in produced]
    assert [m.offset() for m in received] == [m["offset"] for m in produced]


@pytest.mark.scenario("Cross-client: produced by another client")
def test_records_produced_by_confluent_kafka_are_read_identically_by_java(java, bootstrap, new_topic):
    records = [{"key": None if i % 6 == 5 else f"ck{i}".encode(),
                "value": None if i % 6 == 3 else bytes([i, 0, 255]) + f"cv{i}".encode() * (i % 3 + 1),
                "headers": [("a", f"{i}".encode()), ("nul", None), ("a", b"\x00\xfe")],
                "timestamp": BASE_TIMESTAMP + 7 * i, "partition": 2}
               for i in range(25)]
    produce(bootstrap, new_topic, records)
    consumed = _of_type(java.run("consume-assign", bootstrap, new_topic, 2, "earliest", 25), "record")
    assert [_record(r) for r in consumed] == [
        (r["key"], r["value"], r["headers"], r["timestamp"]) for r in records]
    assert [r["offset"] for r in consumed] == list(range(25))


# ---- AdminClient.listOffsets ----------------------------------------------------------------

# Offset 6 holds the largest timestamp, so max-timestamp is not merely the last record.
OFFSET_TIMESTAMPS = [BASE_TIMESTAMP + 1000 * t for t in (0, 10, 20, 30, 40, 50, 500, 60, 70, 80)]
OFFSET_SPECS = {"earliest": "earliest", "latest": "latest",
                "between": f"timestamp:{BASE_TIMESTAMP + 25_000}",
                "exact": f"timestamp:{BASE_TIMESTAMP + 40_000}",
                "beyond": f"timestamp:{BASE_TIMESTAMP + 900_000}",
                "max": "max-timestamp"}


@pytest.fixture(scope="module")
def listed_offsets(java, bootstrap) -> dict[str, dict]:
    """One harness call answering every OFFSET_SPECS query for partition 1 of a fresh topic."""
    topic = f"compat-offsets-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"value": f"{i}".encode(), "partition": 1, "timestamp": ts}
                                          for i, ts in enumerate(OFFSET_TIMESTAMPS)])
    lines = java.run("list-offsets", bootstrap, topic, 1, *OFFSET_SPECS.values())
    by_spec = {line["spec"]: line for line in _of_type(lines, "offset")}
    return {name: by_spec[spec] for name, spec in OFFSET_SPECS.items()}


@pytest.mark.scenario("Watermarks: earliest and latest offsets")
def test_list_offsets_earliest(listed_offsets):
    assert listed_offsets["earliest"]["offset"] == 0


@pytest.mark.scenario("Watermarks: earliest and latest offsets")
def test_list_offsets_latest_is_the_log_end_offset(listed_offsets):
    assert listed_offsets["latest"]["offset"] == len(OFFSET_TIMESTAMPS)


@pytest.mark.scenario("Consume by timestamp")
def test_list_offsets_for_timestamp_finds_the_first_record_at_or_after(listed_offsets):
    assert (listed_offsets["between"]["offset"], listed_offsets["between"]["timestamp"]) == (3, OFFSET_TIMESTAMPS[3])
    assert (listed_offsets["exact"]["offset"], listed_offsets["exact"]["timestamp"]) == (4, OFFSET_TIMESTAMPS[4])


@pytest.mark.scenario("Consume by timestamp")
def test_list_offsets_for_timestamp_after_every_record_finds_nothing(listed_offsets):
    assert listed_offsets["beyond"]["offset"] == -1


@pytest.mark.scenario("List offsets: max timestamp")
def test_list_offsets_max_timestamp_finds_the_record_with_the_largest_timestamp(listed_offsets):
    assert (listed_offsets["max"]["offset"], listed_offsets["max"]["timestamp"]) == (6, OFFSET_TIMESTAMPS[6])


# ---- AdminClient topics ---------------------------------------------------------------------

@pytest.mark.scenario("Create/describe/delete topics")
def test_describe_topics_reports_partitions_leaders_replicas_isr_and_topic_id(java, bootstrap, new_topic):
    (broker_id,) = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    (description,) = _of_type(java.run("admin-describe", bootstrap, new_topic), "topic_description")
    assert (description["topic"], description["internal"]) == (new_topic, False)
    assert description["topic_id"] not in ("AAAAAAAAAAAAAAAAAAAAAA", "")  # Uuid.ZERO_UUID
    assert description["partitions"] == [
        {"partition": p, "leader": broker_id, "replicas": [broker_id], "isr": [broker_id]} for p in range(3)]


@pytest.mark.scenario("Create/describe/delete topics")
def test_create_topics(java, bootstrap, topic_name):
    (created,) = _of_type(java.run("admin-create", bootstrap, topic_name, 4), "created")
    assert (created["partitions"], created["replication_factor"]) == (4, 1)
    assert created["topic_id"] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert _topic_partitions(bootstrap, topic_name) == [0, 1, 2, 3]


@pytest.mark.scenario("Create/describe/delete topics")
def test_delete_topics(java, bootstrap, new_topic):
    assert _of_type(java.run("admin-delete", bootstrap, new_topic), "deleted") == [
        {"type": "deleted", "topic": new_topic}]
    assert _topic_partitions(bootstrap, new_topic) is None


# ---- what Spark's Kafka connector calls -----------------------------------------------------
# spark-sql-kafka-0-10 resolves offsets on the driver with one Admin.listOffsets call for every
# partition it reads (under the consumer's isolation.level), finds subscribePattern topics with
# Admin.listTopics (relying on it to leave internal topics out), and reads on executors with a
# consumer that has a group.id but never joins: auto.offset.reset=none, assign, seek, poll, then
# seekToBeginning/seekToEnd + position for the available range. An offset below the log start
# offset must surface as OffsetOutOfRangeException: that is how failOnDataLoss sees deleted records.

SPARK_TIMESTAMP = BASE_TIMESTAMP + 5_500


@pytest.fixture(scope="module")
def spark_calls(java, bootstrap) -> dict:
    """One harness run making each Spark-style call against two topics. Topic `wide` has 3 partitions:
    10 records (timestamps BASE + 1000 * i) in partition 0 of which DeleteRecords removed the first 4,
    3 early records in partition 1, none in 2. Topic `narrow` has 5 records after every timestamp."""
    wide, narrow = (f"compat-spark-{name}-{uuid.uuid4().hex[:8]}" for name in ("wide", "narrow"))
    for topic, partitions in ((wide, 3), (narrow, 1)):
        _create_topic(bootstrap, topic, partitions)
    produce(bootstrap, wide, [{"value": f"w{i}".encode(), "partition": 0, "timestamp": BASE_TIMESTAMP + 1000 * i}
                              for i in range(10)]
            + [{"value": b"early", "partition": 1, "timestamp": BASE_TIMESTAMP + i} for i in range(3)])
    produce(bootstrap, narrow, [{"value": b"n", "partition": 0, "timestamp": BASE_TIMESTAMP + 10_000 + i}
                                for i in range(5)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (deleted,) = admin.delete_records([TopicPartition(wide, 0, 4)]).values()
    assert deleted.result(15).low_watermark == 4
    _commit_one_offset(bootstrap, narrow)  # so __consumer_offsets exists for the listing with internal topics

    calls = [("list-offsets-all", bootstrap, "read_uncommitted", "earliest", wide, narrow),
             ("list-offsets-all", bootstrap, "read_uncommitted", "latest", wide, narrow),
             ("list-offsets-all", bootstrap, "read_committed", "latest", wide, narrow),
             ("list-offsets-all", bootstrap, "read_uncommitted", f"timestamp:{SPARK_TIMESTAMP}", wide, narrow),
             ("admin-list-topics", bootstrap),
             ("spark-fetch", bootstrap, wide, 0, 7, 10_000), ("spark-fetch", bootstrap, wide, 0, 2, 10_000),
             ("spark-fetch", bootstrap, wide, 1, 3, 300),
             ("admin-list-topics", bootstrap, "internal")]  # apart from the first, so their lines stay apart
    lines = java.run(*[arg for call in calls for arg in ("--", *call)][1:], timeout=120)
    offsets: dict[tuple[str, str], dict] = {}
    for line in _of_type(lines, "offset"):
        offsets.setdefault((line["isolation"], line["spec"]), {})[(line["topic"], line["partition"])] = line
    listings = [list(run) for kind, run in itertools.groupby(lines, key=lambda line: line["type"])
                if kind == "topic_listing"]
    fetch_lines = [line for line in lines if line["type"] in ("record", "polled", "offset_out_of_range",
                                                              "available_range")]
    return {"wide": wide, "narrow": narrow, "offsets": offsets, "listings": listings,
            "fetches": _split_after(fetch_lines, "available_range")}


def _commit_one_offset(bootstrap: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compat-spark-{uuid.uuid4().hex[:8]}"})
    try:
        once_coordinator_ready(lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False))
    finally:
        consumer.close()


def _split_after(lines: list[dict], kind: str) -> list[list[dict]]:
    """`lines` cut into groups, each ending with a `kind` line."""
    groups, current = [], []
    for line in lines:
        current.append(line)
        if line["type"] == kind:
            groups.append(current)
            current = []
    return groups


def _offsets(spark_calls: dict, isolation: str, spec: str) -> dict[tuple[str, int], int]:
    wide, narrow = spark_calls["wide"], spark_calls["narrow"]
    found = spark_calls["offsets"][(isolation, spec)]
    assert set(found) == {(wide, 0), (wide, 1), (wide, 2), (narrow, 0)}
    return {("wide" if topic == wide else "narrow", partition): line["offset"]
            for (topic, partition), line in found.items()}


@pytest.mark.scenario("Spark offset lookups via Java AdminClient")
@pytest.mark.scenario("Delete records")
def test_spark_earliest_offsets_start_at_each_partitions_log_start_offset(spark_calls):
    assert _offsets(spark_calls, "read_uncommitted", "earliest") == {
        ("wide", 0): 4, ("wide", 1): 0, ("wide", 2): 0, ("narrow", 0): 0}


@pytest.mark.scenario("Spark offset lookups via Java AdminClient")
def test_spark_latest_offsets_are_each_partitions_log_end_offset(spark_calls):
    assert _offsets(spark_calls, "read_uncommitted", "latest") == {
        ("wide", 0): 10, ("wide", 1): 3, ("wide", 2): 0, ("narrow", 0): 5}


@pytest.mark.scenario("Spark offset lookups via Java AdminClient")
def test_spark_latest_offsets_under_read_committed_match_without_transactions(spark_calls):
    assert _offsets(spark_calls, "read_committed", "latest") == _offsets(spark_calls, "read_uncommitted", "latest")


@pytest.mark.scenario("Spark offset lookups via Java AdminClient")
@pytest.mark.scenario("Consume by timestamp")
def test_spark_timestamp_offsets_find_the_first_record_at_or_after_in_every_partition(spark_calls):
    assert _offsets(spark_calls, "read_uncommitted", f"timestamp:{SPARK_TIMESTAMP}") == {
        ("wide", 0): 6, ("wide", 1): -1, ("wide", 2): -1, ("narrow", 0): 0}
    found = spark_calls["offsets"][("read_uncommitted", f"timestamp:{SPARK_TIMESTAMP}")]
    assert found[(spark_calls["wide"], 0)]["timestamp"] == BASE_TIMESTAMP + 6000


@pytest.mark.scenario("Spark topic discovery via Java AdminClient")
def test_spark_list_topics_leaves_internal_topics_out_unless_asked(spark_calls):
    default, with_internal = ({line["topic"]: line["internal"] for line in listing}
                              for listing in spark_calls["listings"])
    assert {spark_calls["wide"], spark_calls["narrow"]} <= set(default)
    assert not any(default.values())
    assert with_internal["__consumer_offsets"] is True
    assert {name for name, internal in with_internal.items() if not internal} == set(default)


@pytest.mark.scenario("Spark executor reads via Java consumer")
def test_spark_executor_read_returns_the_records_from_the_seeked_offset(spark_calls):
    from_seven = spark_calls["fetches"][0]
    assert [(r["offset"], _bytes(r["value"])) for r in _of_type(from_seven, "record")] == [
        (i, f"w{i}".encode()) for i in range(7, 10)]
    assert _of_type(from_seven, "polled") == [{"type": "polled", "position": 10}]
    assert from_seven[-1] == {"type": "available_range", "earliest": 4, "latest": 10}


@pytest.mark.scenario("Spark executor reads via Java consumer")
@pytest.mark.scenario("Offset out of range: auto.offset.reset")
def test_spark_executor_read_below_the_log_start_offset_is_out_of_range(spark_calls):
    below_start = spark_calls["fetches"][1]
    assert [line["type"] for line in below_start] == ["offset_out_of_range", "available_range"]
    assert below_start[0]["offset"] == 2
    assert below_start[-1] == {"type": "available_range", "earliest": 4, "latest": 10}


@pytest.mark.scenario("Spark executor reads via Java consumer")
def test_spark_executor_read_at_the_log_end_returns_nothing(spark_calls):
    at_end = spark_calls["fetches"][2]
    assert at_end == [{"type": "polled", "position": 3}, {"type": "available_range", "earliest": 0, "latest": 3}]
