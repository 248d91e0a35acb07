"""Clicks per user per minute: a PySpark Structured Streaming job from one Kafka topic to another, on kbroker.

    kbroker serve
    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 pipeline.py

1. produce_events() writes JSON click events, each stamped with the time it happened (its event time).
2. start_job() parses them, counts clicks per user in one-minute event-time windows and writes each count
   to the results topic once its window is closed: when the watermark (the latest event time seen, less
   WATERMARK_DELAY) has passed the window's end. Events later than that are dropped, not counted.
3. read_results() reads the counts back.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"  # the same version as pyspark
EVENT_SCHEMA = "user STRING, action STRING, time TIMESTAMP"
WINDOW = "1 minute"
WATERMARK_DELAY = "30 seconds"
MINUTE_MS = 60_000
SAMPLE_CLICKS = {0: {"ana": 3, "bo": 1}, 1: {"ana": 1, "bo": 2, "cy": 4}, 2: {"cy": 2}}  # minute: user: clicks


def sample_events(start_ms: int) -> list[dict]:
    """SAMPLE_CLICKS from `start_ms` (a whole minute) on, then one click five minutes later: it moves the
    watermark past the first three minutes, so their windows close and are written."""
    events = [{"user": user, "action": "click", "time": start_ms + minute * MINUTE_MS + 7_000 * i}
              for minute, clicks in SAMPLE_CLICKS.items() for user, count in clicks.items() for i in range(count)]
    return [*events, {"user": "ana", "action": "click", "time": start_ms + 5 * MINUTE_MS}]


def produce_events(bootstrap: str, topic: str, events: list[dict]) -> None:
    """Each event as JSON (time in ISO 8601), keyed by user, with its event time as the record timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for event in events:
        iso_time = datetime.fromtimestamp(event["time"] / 1000, UTC).isoformat(timespec="milliseconds")
        producer.produce(topic, key=event["user"], value=json.dumps({**event, "time": iso_time}),
                         timestamp=event["time"])
    if producer.flush(30):
        raise RuntimeError("events not delivered within 30 s")


def windowed_counts(spark: SparkSession, bootstrap: str, events_topic: str) -> DataFrame:
    """Per user and event-time window: {"user", "window_start" (epoch ms), "clicks"} as the record value."""
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", events_topic)
              .option("startingOffsets", "earliest")
              .load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("event"))
              .select("event.*"))
    counts = (events.withWatermark("time", WATERMARK_DELAY)
              .groupBy(F.window("time", WINDOW), "user")
              .count())
    return counts.select(
        F.col("user").alias("key"),
        F.to_json(F.struct("user", F.unix_millis("window.start").alias("window_start"),
                           F.col("count").alias("clicks"))).alias("value"))


def start_job(spark: SparkSession, bootstrap: str, events_topic: str, results_topic: str, checkpoint: str,
              trigger: dict) -> StreamingQuery:
    """Append mode: each window's count is written once, when the watermark closes the window."""
    return (windowed_counts(spark, bootstrap, events_topic)
            .writeStream.format("kafka")
            .outputMode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", results_topic)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start())


def read_results(bootstrap: str, topic: str, timeout: float = 30) -> list[dict]:
    """Every record of the results topic, up to the end offsets it had when called."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-check", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        results, deadline = [], time.monotonic() + timeout
        while any(end > 0 for end in ends.values()) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                results.append(json.loads(message.value()))
                if message.offset() + 1 >= ends[message.partition()]:
                    ends[message.partition()] = 0
        return results
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", default="clicks", help="topic of the events")
    parser.add_argument("--results", default="clicks-per-minute", help="topic of the counts")
    args = parser.parse_args()
    spark = (SparkSession.builder.appName("clicks-per-minute")
             .config("spark.jars.packages", CONNECTOR)  # what --packages says, for `python pipeline.py`
             .config("spark.sql.shuffle.partitions", "2")  # small data: 2 state partitions, not 200
             .getOrCreate())
    this_minute = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
    produce_events(args.bootstrap, args.events, sample_events(this_minute - 10 * MINUTE_MS))
    query = start_job(spark, args.bootstrap, args.events, args.results, tempfile.mkdtemp(), {"availableNow": True})
    query.awaitTermination()
    for result in sorted(read_results(args.bootstrap, args.results), key=lambda r: (r["window_start"], r["user"])):
        window = datetime.fromtimestamp(result["window_start"] / 1000, UTC).strftime("%H:%M")
        print(f"{window} UTC  {result['user']:>4}  {result['clicks']} clicks")
    spark.stop()


if __name__ == "__main__":
    main()
