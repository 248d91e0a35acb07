"""PySpark's Kafka source and sink (spark-sql-kafka-0-10) against the broker under test.

The Spark session and its connector jars (Maven's, for the pinned pyspark) come from spark_session.py.
Without a JDK, pyspark or the jars every test here skips locally and fails under CI.

Records are produced and checked with confluent-kafka, so every read is also a cross-client check.
The connector's calls into the Java clients (Admin.listOffsets over every partition, listTopics,
the executors' assign/seek/poll) are also covered without Spark in test_java_client.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import spark_session
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from confluent_client import consume, produce

pytestmark = [pytest.mark.client("pyspark"), pytest.mark.xdist_group("spark")]  # one Spark JVM per run

BASE_TIMESTAMP = 1_700_000_000_000  # November 2023: older than any retention below but "forever"
KEEP_FOREVER = {"retention.ms": "-1"}  # else the broker's retention check deletes records stamped BASE_TIMESTAMP
POLL_TIMEOUT_MS = "20000"  # the executors' consumer poll; Spark's default is 120 s
QUERY_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def spark() -> Iterator:
    """One local Spark session for the module, with the Kafka connector on its classpath."""
    with spark_session.local_session("kbroker-compat") as session:
        yield session


# ---- helpers --------------------------------------------------------------------------------

def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None,
                 config: dict[str, str] = KEEP_FOREVER) -> str:
    topic = name or f"compat-spark-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)
    admin.create_topics([new])[topic].result(15)
    return topic


def kafka_options(bootstrap: str, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "kafkaConsumer.pollTimeoutMs": POLL_TIMEOUT_MS, **options}


def read_batch(spark, bootstrap: str, **options: str):
    return spark.read.format("kafka").options(**kafka_options(bootstrap, **options)).load()


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


def rows(df) -> list[tuple]:
    """(topic, partition, offset, key, value, timestamp ms, timestampType) of every row, sorted."""
    selected = df.selectExpr("topic", "partition", "offset", "key", "value",
                             "unix_millis(timestamp) AS timestamp_ms", "timestampType")
    return sorted((r.topic, r.partition, r.offset, _bytes(r.key), _bytes(r.value), r.timestamp_ms, r.timestampType)
                  for r in selected.collect())


def offsets(df) -> dict[int, list[int]]:
    """The offsets read from each partition."""
    found: dict[int, list[int]] = {}
    for row in df.select("partition", "offset").collect():
        found.setdefault(row.partition, []).append(row.offset)
    return {partition: sorted(read) for partition, read in sorted(found.items())}


def wait_for(condition, what: str, query=None, timeout: float = 90) -> None:
    """Poll `condition` until true; fail after `timeout` s, or at once if the streaming query died."""
    deadline = time.monotonic() + timeout
    while not condition():
        if query is not None and query.exception() is not None:
            pytest.fail(f"streaming query failed while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.25)


# ---- the records Spark reads ----------------------------------------------------------------

def source_records() -> list[dict]:
    """Five records in each of three partitions: record i of partition p has timestamp
    BASE + 1000 * i + p, a null key at i = 4, a null value at (p, i) = (2, 3), and headers with a
    repeated name and a null value."""
    return [{"key": None if i == 4 else f"k{p}-{i}".encode(),
             "value": None if (p, i) == (2, 3) else f"v{p}-{i}".encode(),
             "headers": [("h", f"{p}{i}".encode()), ("nul", None), ("h", b"\x00\xff")],
             "timestamp": BASE_TIMESTAMP + 1000 * i + p, "partition": p}
            for p in range(3) for i in range(5)]


@pytest.fixture(scope="module")
def source_topic(bootstrap: str) -> str:
    topic = create_topic(bootstrap, partitions=3)
    produce(bootstrap, topic, source_records())
    return topic


def source_records_by_offset() -> dict[tuple[int, int], dict]:
    """source_records() keyed by the (partition, offset) each lands at."""
    return {(record["partition"], index % 5): record for index, record in enumerate(source_records())}


def expected_rows(topic: str, keep=lambda partition, offset: True) -> list[tuple]:
    return sorted((topic, partition, offset, record["key"], record["value"], record["timestamp"], 0)  # 0: CreateTime
                  for (partition, offset), record in source_records_by_offset().items() if keep(partition, offset))


# ---- batch reads ----------------------------------------------------------------------------

@pytest.mark.scenario("Spark batch read: subscribe, subscribePattern, assign")
@pytest.mark.scenario("Produce and consume: keys, null keys, null values")
@pytest.mark.scenario("Explicit timestamps")
def test_batch_read_with_subscribe_returns_every_record_with_its_columns(spark, bootstrap, source_topic):
    assert rows(read_batch(spark, bootstrap, subscribe=source_topic)) == expected_rows(source_topic)


@pytest.mark.scenario("Spark batch read: subscribe, subscribePattern, assign")
def test_batch_read_with_subscribe_pattern_reads_every_matching_topic(spark, bootstrap, source_topic):
    prefix = f"compat-spark-pattern-{uuid.uuid4().hex[:8]}"
    matching = [create_topic(bootstrap, name=f"{prefix}-{suffix}") for suffix in ("a", "b")]
    for topic in matching:
        produce(bootstrap, topic, [{"value": topic.encode(), "partition": 0}])
    found = read_batch(spark, bootstrap, subscribePattern=f"{prefix}-.*").select("topic", "value").collect()
    assert sorted((row.topic, bytes(row.value)) for row in found) == [(t, t.encode()) for t in matching]


@pytest.mark.scenario("Spark batch read: subscribe, subscribePattern, assign")
def test_batch_read_with_assign_reads_only_the_assigned_partitions(spark, bootstrap, source_topic):
    df = read_batch(spark, bootstrap, assign=json.dumps({source_topic: [0, 2]}))
    assert rows(df) == expected_rows(source_topic, keep=lambda partition, _: partition in (0, 2))


@pytest.mark.scenario("Spark batch read: starting and ending offsets")
def test_batch_read_between_explicit_offsets_per_partition(spark, bootstrap, source_topic):
    # -2 is earliest and -1 latest, as in Spark's JSON offsets
    df = read_batch(spark, bootstrap, subscribe=source_topic,
                    startingOffsets=json.dumps({source_topic: {"0": 1, "1": -2, "2": 3}}),
                    endingOffsets=json.dumps({source_topic: {"0": 4, "1": 2, "2": -1}}))
    assert offsets(df) == {0: [1, 2, 3], 1: [0, 1], 2: [3, 4]}


@pytest.mark.scenario("Spark batch read: starting and ending offsets")
def test_batch_read_from_earliest_to_latest_is_the_default(spark, bootstrap, source_topic):
    explicit = read_batch(spark, bootstrap, subscribe=source_topic, startingOffsets="earliest", endingOffsets="latest")
    assert offsets(explicit) == {p: [0, 1, 2, 3, 4] for p in range(3)}


@pytest.mark.scenario("Consume by timestamp")
def test_batch_read_from_a_starting_timestamp_starts_at_the_first_record_at_or_after_it(spark, bootstrap,
                                                                                         source_topic):
    df = read_batch(spark, bootstrap, subscribe=source_topic, startingTimestamp=str(BASE_TIMESTAMP + 2500))
    assert offsets(df) == {p: [3, 4] for p in range(3)}


@pytest.mark.scenario("Consume by timestamp")
def test_batch_read_from_per_partition_timestamps(spark, bootstrap, source_topic):
    by_partition = {"0": BASE_TIMESTAMP + 1000, "1": BASE_TIMESTAMP + 3500, "2": BASE_TIMESTAMP + 10**9}
    df = read_batch(spark, bootstrap, subscribe=source_topic,
                    startingOffsetsByTimestamp=json.dumps({source_topic: by_partition}),
                    startingOffsetsByTimestampStrategy="latest")  # partition 2 has no record that late
    assert offsets(df) == {0: [1, 2, 3, 4], 1: [4]}


@pytest.mark.scenario("Headers")
def test_include_headers_returns_every_header_in_order_with_null_values(spark, bootstrap, source_topic):
    df = read_batch(spark, bootstrap, subscribe=source_topic, includeHeaders="true")
    found = {(row.partition, row.offset): [(h.key, _bytes(h.value)) for h in row.headers]
             for row in df.select("partition", "offset", "headers").collect()}
    assert found == {place: record["headers"] for place, record in source_records_by_offset().items()}


@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_a_read_committed_batch_read_skips_aborted_records(spark, bootstrap):
    """kafka.isolation.level=read_committed: Spark's offsets end at the last stable offset and its executors drop
    the aborted transaction's records (the offsets it leaves, and the markers', are gaps Spark steps over)."""
    from confluent_kafka import Producer

    topic = create_topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-{topic}", "log_level": 0})
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    committed = read_batch(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert [_bytes(row.value) for row in committed.orderBy("offset").collect()] == [b"c1", b"c2", b"c3"]
    everything = read_batch(spark, bootstrap, subscribe=topic)
    assert [_bytes(row.value) for row in everything.orderBy("offset").collect()] == [b"c1", b"c2", b"a1", b"c3"]


# ---- failOnDataLoss -------------------------------------------------------------------------

RETENTION_MS = 24 * 3600 * 1000  # a day: records stamped BASE_TIMESTAMP are past it, records stamped now are not


def _deleted_records(bootstrap: str) -> str:
    """One partition of 10 records whose first 4 DeleteRecords removed."""
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, [{"value": f"{i}".encode(), "partition": 0} for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the future resolves: a dropped client cancels it
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 4)]).values()
    assert deleted.result(15).low_watermark == 4
    return topic


def _log_start_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        consumer.close()


def _expired_records(own_broker) -> tuple[str, str]:
    """On a broker checking retention every 500 ms: one partition whose first 4 records (stamped in 2023)
    time retention removed, and 6 records stamped now. The 2023 segment rolls when the first record stamped
    now arrives (segment.ms measures from the segment's first timestamp), and retention deletes it."""
    broker = own_broker("spark-retention", "log.retention.check.interval.ms=500", "log.initial.task.delay.ms=0")
    topic = create_topic(broker.bootstrap, config={"retention.ms": str(RETENTION_MS)})
    produce(broker.bootstrap, topic, [{"value": f"{i}".encode(), "partition": 0, "timestamp": BASE_TIMESTAMP + i}
                                      for i in range(4)])
    produce(broker.bootstrap, topic, [{"value": f"{i}".encode(), "partition": 0} for i in range(4, 10)])
    wait_for(lambda: _log_start_offset(broker.bootstrap, topic) == 4, "retention to delete the 2023 records")
    return broker.bootstrap, topic


@pytest.fixture(scope="module", params=[
    pytest.param("DeleteRecords", marks=pytest.mark.scenario("Spark failOnDataLoss after DeleteRecords")),
    pytest.param("retention", marks=pytest.mark.scenario("Spark failOnDataLoss after retention"))])
def trimmed_topic(request: pytest.FixtureRequest, bootstrap: str) -> tuple[str, str]:
    """(bootstrap, topic): one partition of 10 records whose first 4 are gone (log start offset 4), removed by
    DeleteRecords on the broker under test or by time retention on a broker of the same kind."""
    if request.param == "DeleteRecords":
        return bootstrap, _deleted_records(bootstrap)
    return _expired_records(request.getfixturevalue("own_broker"))


def test_reading_removed_records_fails_the_query_by_default(spark, trimmed_topic):
    bootstrap, topic = trimmed_topic
    df = read_batch(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 0}}))
    with pytest.raises(Exception, match="failOnDataLoss"):  # Py4JJavaError or a pyspark error class
        df.collect()


def test_without_fail_on_data_loss_the_read_resumes_at_the_log_start_offset(spark, trimmed_topic):
    bootstrap, topic = trimmed_topic
    df = read_batch(spark, bootstrap, subscribe=topic, failOnDataLoss="false",
                    startingOffsets=json.dumps({topic: {"0": 0}}))
    assert offsets(df) == {0: [4, 5, 6, 7, 8, 9]}


# ---- streaming ------------------------------------------------------------------------------

def start_stream(spark, bootstrap: str, topic: str, checkpoint: Path, trigger: dict, **options: str):
    """A streaming read of `topic` into a memory table named like the returned query."""
    name = f"compat_{uuid.uuid4().hex[:10]}"
    stream = (spark.readStream.format("kafka").options(**kafka_options(bootstrap, subscribe=topic, **options))
              .load().selectExpr("partition", "offset", "value"))
    return (stream.writeStream.format("memory").queryName(name).outputMode("append")
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def stream_rows(spark, query) -> list[tuple]:
    return sorted((r.partition, r.offset, _bytes(r.value)) for r in spark.sql(f"SELECT * FROM {query.name}").collect())


def batch_sizes(query) -> list[int]:
    return [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]


def start_collecting(spark, bootstrap: str, topic: str, checkpoint: Path, collected: list[tuple], trigger: dict,
                     **options: str):
    """A streaming read of `topic` whose every micro-batch appends its (partition, offset, value) rows to
    `collected` (foreachBatch: unlike a memory sink, it restarts from a checkpoint)."""
    stream = (spark.readStream.format("kafka").options(**kafka_options(bootstrap, subscribe=topic, **options))
              .load().selectExpr("partition", "offset", "value"))
    return (stream.writeStream.option("checkpointLocation", str(checkpoint)).trigger(**trigger)
            .foreachBatch(lambda batch, _: collected.extend(
                (r.partition, r.offset, _bytes(r.value)) for r in batch.collect()))
            .start())


def await_available_now(query) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), f"the availableNow query did not finish within {QUERY_TIMEOUT_S} s"
    assert query.exception() is None, query.exception()


@pytest.fixture(scope="module")
def available_now_runs(spark, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two availableNow runs sharing a checkpoint, with maxOffsetsPerTrigger 4: the first over 10 records,
    the second after 3 more arrived."""
    topic = create_topic(bootstrap)
    checkpoint = tmp_path_factory.mktemp("spark-available-now") / "checkpoint"
    runs = {}
    for run, values in (("first", range(10)), ("second", range(10, 13))):
        produce(bootstrap, topic, [{"value": f"{i}".encode(), "partition": 0} for i in values])
        collected: list[tuple] = []
        query = start_collecting(spark, bootstrap, topic, checkpoint, collected, {"availableNow": True},
                                 startingOffsets="earliest", maxOffsetsPerTrigger="4")
        await_available_now(query)
        runs[run] = {"rows": sorted(collected), "batch_sizes": batch_sizes(query)}
    return runs


@pytest.mark.scenario("Spark streaming: availableNow and maxOffsetsPerTrigger")
def test_available_now_reads_everything_then_stops(available_now_runs):
    assert available_now_runs["first"]["rows"] == [(0, i, f"{i}".encode()) for i in range(10)]


@pytest.mark.scenario("Spark streaming: availableNow and maxOffsetsPerTrigger")
def test_max_offsets_per_trigger_caps_each_micro_batch(available_now_runs):
    assert available_now_runs["first"]["batch_sizes"] == [4, 4, 2]


@pytest.mark.scenario("Spark streaming: availableNow and maxOffsetsPerTrigger")
def test_available_now_resumes_from_its_checkpoint(available_now_runs):
    assert available_now_runs["second"]["rows"] == [(0, i, f"{i}".encode()) for i in range(10, 13)]


@pytest.mark.scenario("Spark streaming: micro-batches while producing")
@pytest.mark.scenario("Consume from latest")
def test_micro_batches_pick_up_records_produced_while_the_query_runs(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, [{"value": b"before", "partition": p} for p in (0, 1)])
    checkpoint = tmp_path / "checkpoint"
    query = start_stream(spark, bootstrap, topic, checkpoint, {"processingTime": "200 milliseconds"},
                         startingOffsets="latest")
    try:
        # The source writes the offsets "latest" resolved to before its first batch: from then on, records count.
        wait_for(lambda: (checkpoint / "sources" / "0" / "0").is_file(), "the initial offsets", query)
        for round_ in range(3):
            produce(bootstrap, topic, [{"value": f"r{round_}-{i}".encode(), "partition": i % 2} for i in range(4)])
            wait_for(lambda n=4 * (round_ + 1): len(stream_rows(spark, query)) >= n, f"round {round_}", query)
        found = stream_rows(spark, query)
        # a batch's progress is reported after its rows reach the sink
        wait_for(lambda: sum(batch_sizes(query)) >= len(found), "the progress of the last batch", query)
        sizes = batch_sizes(query)
    finally:
        query.stop()
    assert sorted(value for _, _, value in found) == sorted(f"r{r}-{i}".encode() for r in range(3) for i in range(4))
    assert sorted((p, o) for p, o, _ in found) == [(p, o) for p in (0, 1) for o in range(1, 7)]
    assert len(sizes) >= 3 and sum(sizes) == 12


@pytest.mark.scenario("Spark streaming: checkpoint, stop and restart")
def test_a_query_restarted_from_its_checkpoint_reads_what_arrived_meanwhile_once(spark, bootstrap, tmp_path):
    """The restarted query ignores startingOffsets=earliest: it resumes at the offsets its checkpoint committed."""
    topic = create_topic(bootstrap, partitions=2)
    collected: list[tuple] = []
    for count, run in ((6, "a"), (12, "b")):  # records of run b arrive while the query is stopped
        produce(bootstrap, topic, [{"value": f"{run}{i}".encode(), "partition": i % 2} for i in range(6)])
        query = start_collecting(spark, bootstrap, topic, tmp_path / "checkpoint", collected,
                                 {"processingTime": "200 milliseconds"}, startingOffsets="earliest")
        try:
            wait_for(lambda n=count: len(collected) >= n, f"run {run}", query)
            query.processAllAvailable()  # a duplicate would be in a batch this waits for
        finally:
            query.stop()
    assert sorted(value for _, _, value in collected) == [f"{run}{i}".encode() for run in "ab" for i in range(6)]
    assert sorted((p, o) for p, o, _ in collected) == [(p, o) for p in (0, 1) for o in range(6)]


# ---- the Kafka sink -------------------------------------------------------------------------

@pytest.mark.scenario("Spark write: df.write.format(\"kafka\")")
@pytest.mark.scenario("Cross-client: produced by another client")
def test_dataframe_write_produces_keys_values_and_headers_to_the_chosen_partitions(spark, bootstrap):
    topic = create_topic(bootstrap, partitions=2)
    records = [(None if i == 3 else f"wk{i}".encode(), None if i == 5 else f"wv{i}".encode(), i % 2,
                [("h", f"{i}".encode()), ("nul", None)])
               for i in range(8)]
    schema = "key binary, value binary, partition int, headers array<struct<key: string, value: binary>>"
    (spark.createDataFrame(records, schema).coalesce(1)  # one writer task, so each partition keeps the row order
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())
    for partition in (0, 1):
        received = consume(bootstrap, topic, partition, 4)
        assert [(m.key(), m.value(), m.headers()) for m in received] == [
            (key, value, headers) for key, value, p, headers in records if p == partition]
        assert [m.offset() for m in received] == [0, 1, 2, 3]


@pytest.mark.scenario("Spark write: streaming kafka sink")
def test_a_streaming_query_copies_a_topic_into_another_through_the_kafka_sink(spark, bootstrap, tmp_path):
    source, target = create_topic(bootstrap, partitions=2), create_topic(bootstrap, partitions=2)
    produce(bootstrap, source, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2}
                                for i in range(10)])
    stream = (spark.readStream.format("kafka").options(**kafka_options(bootstrap, subscribe=source,
                                                                       startingOffsets="earliest"))
              .load().selectExpr("key", "value", "partition"))
    query = (stream.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    await_available_now(query)
    copied = {p: [(m.key(), m.value()) for m in consume(bootstrap, target, p, 5)] for p in (0, 1)}
    assert copied == {p: [(f"k{i}".encode(), f"v{i}".encode()) for i in range(p, 10, 2)] for p in (0, 1)}


# ---- partitions and restarts ----------------------------------------------------------------

@pytest.mark.scenario("Spark batch read: minPartitions")
def test_min_partitions_splits_kafka_partitions_into_more_spark_tasks_without_changing_the_rows(spark, bootstrap,
                                                                                               source_topic):
    df = read_batch(spark, bootstrap, subscribe=source_topic, minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    assert rows(df) == expected_rows(source_topic)


@pytest.mark.scenario("Spark streaming: broker restart during a query")
def test_a_streaming_query_survives_a_broker_restart_without_loss_or_duplicates(spark, fresh_broker, tmp_path):
    broker = fresh_broker("spark-restart")
    topic = create_topic(broker.bootstrap, partitions=2)
    query = start_stream(spark, broker.bootstrap, topic, tmp_path / "checkpoint",
                         {"processingTime": "200 milliseconds"}, startingOffsets="earliest")
    try:
        produce(broker.bootstrap, topic, [{"value": f"a{i}".encode(), "partition": i % 2} for i in range(6)])
        wait_for(lambda: len(stream_rows(spark, query)) >= 6, "the records before the restart", query)
        broker.stop()  # SIGTERM: a clean shutdown while the query keeps polling
        broker.start()
        produce(broker.bootstrap, topic, [{"value": f"b{i}".encode(), "partition": i % 2} for i in range(6)])
        wait_for(lambda: len(stream_rows(spark, query)) >= 12, "the records after the restart", query, timeout=120)
        query.processAllAvailable()  # a duplicate would be in a batch this waits for
        found = stream_rows(spark, query)
    finally:
        query.stop()
    assert sorted(value for _, _, value in found) == sorted(
        f"{prefix}{i}".encode() for prefix in "ab" for i in range(6))
    assert sorted((p, o) for p, o, _ in found) == [(p, o) for p in (0, 1) for o in range(6)]
