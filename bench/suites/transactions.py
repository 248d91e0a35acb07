"""Transactions: transactional produce against Apache Kafka, read_committed against read_uncommitted, commit latency.

- Transactional produce: one confluent-kafka transactional producer writes transactions of 1,000 records of
  100 B (round-robin over 1 or 16 partitions) for 2 s (quick 0.6 s), each committed before the next begins;
  the rate is records / elapsed. kbroker and Apache Kafka alternate round by round; figures are medians.
  Target: kbroker / Kafka >= 1.0.
- read_committed against read_uncommitted: the records the produce rounds committed to kbroker are read
  from the start with each isolation level (alternating, medians). Target: read_committed >= 0.9x.
- Commit latency: a producer commits transactions of one record at 100 transactions/s for 5 s (quick 1 s);
  the time commit_transaction() takes (EndTxn, which on a single node returns once every marker is written)
  at p50 and p99. Target: p99 <= 10 ms on kbroker.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.harness import Context, Result, median, percentile, rotated
from bench.load import value_pool
from bench.peers import CLIENT_LOGGING, Broker, kbroker, peers

SUITE = "transactions"
COMPARES_WITH_KAFKA = True
TIME_BUDGET = (60, 600)
VALUE_SIZE = 100
RECORDS_PER_TRANSACTION = 1000
PARTITIONS = (1, 16)
PRODUCE_RATIO, READ_RATIO, COMMIT_P99_MS = 1.0, 0.9, 10.0
COMMITS_PER_S = 100
TIMEOUT_S = 60


@dataclass
class Run:
    records: int
    seconds: float

    @property
    def msgs_per_s(self) -> float:
        return self.records / self.seconds


def transactional_producer(broker: Broker) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, "queue.buffering.max.kbytes": 65536, **CLIENT_LOGGING})
    producer.init_transactions(TIMEOUT_S)
    return producer


def produce_transactions(producer: Producer, topic: str, partitions: int, values: list[bytes],
                         seconds: float) -> Run:
    """Whole transactions until `seconds` pass (at least one)."""
    records, started = 0, time.perf_counter()
    while records == 0 or time.perf_counter() - started < seconds:
        producer.begin_transaction()
        for index in range(RECORDS_PER_TRANSACTION):
            while True:
                try:
                    producer.produce(topic, values[index % len(values)], partition=index % partitions)
                    break
                except BufferError:
                    producer.poll(0.001)
        producer.commit_transaction(TIMEOUT_S)
        records += RECORDS_PER_TRANSACTION
    return Run(records, time.perf_counter() - started)


def read_all(broker: Broker, topic: str, partitions: int, expected: int, isolation: str) -> Run:
    """Every record of the topic from the start, by a consumer of `isolation`."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, **CLIENT_LOGGING})
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records = 0
        while records < expected:
            if time.perf_counter() - started > TIMEOUT_S:
                raise TimeoutError(f"{topic}: {records} of {expected} records read ({isolation})")
            for message in consumer.consume(min(10_000, expected - records), 0.2):
                if message.error() is None:
                    records += 1
        return Run(records, time.perf_counter() - started)
    finally:
        consumer.close()


def commit_latencies(broker: Broker, topic: str, seconds: float) -> list[float]:
    """commit_transaction() durations in ms, one transaction of one record every 1/COMMITS_PER_S s."""
    producer = transactional_producer(broker)
    latencies, interval = [], 1 / COMMITS_PER_S
    next_at = time.perf_counter()
    ends = next_at + seconds
    while next_at < ends:
        time.sleep(max(0.0, next_at - time.perf_counter()))
        producer.begin_transaction()
        producer.produce(topic, b"x" * VALUE_SIZE, partition=0)
        producer.flush(TIMEOUT_S)
        started = time.perf_counter()
        producer.commit_transaction(TIMEOUT_S)
        latencies.append((time.perf_counter() - started) * 1000)
        next_at += interval
    return latencies


def run(ctx: Context) -> list[Result]:
    seconds = 0.6 if ctx.quick else 2.0
    values = value_pool(VALUE_SIZE)
    results: list[Result] = []
    with kbroker(ctx) as broker, peers(ctx) as others:
        kafkas = [other for other in others if other.kind in ("kafka", "external")]  # the mock has no coordinator
        targets: list[Broker] = [broker, *kafkas]
        for partitions in PARTITIONS:
            label = f"{VALUE_SIZE} B, {RECORDS_PER_TRANSACTION:,} records per transaction, {partitions} " \
                    f"partition{'s' if partitions > 1 else ''}"
            ctx.log(f"transactional produce {label}")
            with contextlib.ExitStack() as stack:
                topics = {t.name: stack.enter_context(t.scratch_topic("txn", partitions)) for t in targets}
                producers = {t.name: transactional_producer(t) for t in targets}
                for target in targets:
                    stack.callback(producers[target.name].flush, 10)
                runs: dict[str, list[Run]] = {t.name: [] for t in targets}
                for round_index in range(ctx.rounds):
                    if round_index and ctx.time_left() <= 0:
                        break
                    for target in rotated(targets, round_index):
                        runs[target.name].append(produce_transactions(
                            producers[target.name], topics[target.name], partitions, values, seconds))
                mine = median([r.msgs_per_s for r in runs[broker.name]])
                for other in kafkas:
                    results.append(Result(
                        SUITE, f"transactional produce {label}", "msgs/s", mine,
                        median([r.msgs_per_s for r in runs[other.name]]), other.name,
                        target=f">= {PRODUCE_RATIO:g}x Kafka", target_ratio=PRODUCE_RATIO,
                        params={"rounds_kbroker": [r.msgs_per_s for r in runs[broker.name]],
                                "rounds_peer": [r.msgs_per_s for r in runs[other.name]]}))
                written = sum(r.records for r in runs[broker.name])
                reads: dict[str, list[Run]] = {"read_committed": [], "read_uncommitted": []}
                for round_index in range(ctx.rounds):
                    for isolation in rotated(list(reads), round_index):
                        reads[isolation].append(read_all(broker, topics[broker.name], partitions, written, isolation))
                committed = median([r.msgs_per_s for r in reads["read_committed"]])
                uncommitted = median([r.msgs_per_s for r in reads["read_uncommitted"]])
                results.append(Result(
                    SUITE, f"read_committed consume {label}", "msgs/s", committed, uncommitted,
                    "kbroker read_uncommitted", target=f">= {READ_RATIO:g}x read_uncommitted",
                    target_ratio=READ_RATIO, params={"records": written}))
        ctx.log("commit latency")
        with broker.scratch_topic("txn-latency", 1) as topic:
            latencies = sorted(commit_latencies(broker, topic, 1.0 if ctx.quick else 5.0))
        results.append(Result(SUITE, f"commit latency at {COMMITS_PER_S} transactions/s, p50", "ms",
                              percentile(latencies, 0.50), higher_is_better=False))
        results.append(Result(SUITE, f"commit latency at {COMMITS_PER_S} transactions/s, p99", "ms",
                              percentile(latencies, 0.99), higher_is_better=False, target=f"<= {COMMIT_P99_MS:g} ms",
                              target_value=COMMIT_P99_MS, params={"transactions": len(latencies)}))
    return results
