"""Kafka's own producer benchmark as the client: kafka-producer-perf-test against kbroker and Apache Kafka.

    python -m bench.suites.perftest [--quick] [--rounds N] [--kafka-version 3.9|4]

The client is org.apache.kafka.tools.ProducerPerformance (what kafka-producer-perf-test.sh runs)
from the kafka-4 jar set of compat-tests/java/pom.xml: the Java producer with its defaults
(batch.size 16 KiB, linger.ms 5) but acks, writing as fast as it can (--throughput -1) into a
fresh one-partition topic. Shapes: acks=1 and acks=all, values of 100 B and 1 KiB (quick: 100 B,
acks=1, fewer records). Each run is a new JVM; brokers are interleaved round by round (A B, B A,
...) and every figure is the median over rounds. The figures are the tool's own summary line:
records/s, MB/s, average and maximum latency and its percentiles (ms, from send() to the
acknowledgement, so they include the client's batching and queueing at full speed); the broker's
CPU is its process's user + system time over the run, per million records. librdkafka's mock is
not a peer here: it answers the Java client's ApiVersions v4 wrongly.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from dataclasses import dataclass

from bench import kafka
from bench.harness import Context, Result, median, rotated, size_label
from bench.peers import Broker, kbroker, run_kafka
from bench.suites._common import per_peer, run_alone

SUITE = "perftest"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
TIME_BUDGET = (60, 1200)
MAIN = "org.apache.kafka.tools.ProducerPerformance"
SIZES = (100, 1024)
ACKS = ("1", "all")
RECORDS = {100: 1_000_000, 1024: 200_000}  # about 100 and 200 MB of values
QUICK_RECORDS = 50_000
RUN_TIMEOUT_S = 180
SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<records_per_s>[\d.]+) records/sec \((?P<mb_per_s>[\d.]+) MB/sec\), "
    r"(?P<avg_ms>[\d.]+) ms avg latency, (?P<max_ms>[\d.]+) ms max latency, (?P<p50_ms>\d+) ms 50th, "
    r"(?P<p95_ms>\d+) ms 95th, (?P<p99_ms>\d+) ms 99th, (?P<p999_ms>\d+) ms 99.9th")
ROWS = (("records_per_s", "records/s", True), ("mb_per_s", "MB/s", True), ("avg_ms", "avg latency ms", False),
        ("p50_ms", "p50 ms", False), ("p99_ms", "p99 ms", False), ("p999_ms", "p99.9 ms", False),
        ("max_ms", "max latency ms", False), ("cpu_per_million", "broker CPU s / 1M records", False))


@dataclass(frozen=True)
class Shape:
    value_size: int
    acks: str
    records: int

    @property
    def label(self) -> str:
        return f"producer-perf-test {size_label(self.value_size)}, acks={self.acks}, 1 partition"


def shapes(quick: bool) -> list[Shape]:
    if quick:
        return [Shape(100, "1", QUICK_RECORDS)]
    return [Shape(size, acks, RECORDS[size]) for size in SIZES for acks in ACKS]


def parse_summary(output: str) -> dict[str, float]:
    """The figures of the tool's last line (the summary: the progress lines have no percentiles)."""
    found = list(SUMMARY.finditer(output))
    if not found:
        raise RuntimeError(f"no summary line in ProducerPerformance's output:\n{output[-2000:]}")
    return {key: float(value) for key, value in found[-1].groupdict().items()}


def perf_test(broker: Broker, topic: str, shape: Shape) -> dict[str, float]:
    """One ProducerPerformance run; its summary plus the broker's CPU seconds per million records."""
    command = kafka.java_command(MAIN, "--topic", topic, "--num-records", str(shape.records),
                                 "--record-size", str(shape.value_size), "--throughput", "-1",
                                 "--command-property", f"bootstrap.servers={broker.bootstrap}", f"acks={shape.acks}")
    cpu_before = broker.cpu_seconds()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    cpu_after = broker.cpu_seconds()
    if done.returncode != 0:
        raise RuntimeError(f"ProducerPerformance against {broker} exited with {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-2000:]}")
    figures = parse_summary(done.stdout)
    if figures["records"] != shape.records:
        raise RuntimeError(f"{broker}: {figures['records']:.0f} of {shape.records} records sent")
    cpu = None if cpu_before is None else 1e6 * (cpu_after - cpu_before) / shape.records
    return {**figures, "cpu_per_million": cpu}


def run(ctx: Context) -> list[Result]:
    problem = kafka.unavailable(kafka.TOOLS_VERSION)
    if problem is not None:
        ctx.notes.append(f"not run: Kafka's ProducerPerformance needs a JDK and the kafka-4 jars: {problem}")
        return []
    results: list[Result] = []
    todo = shapes(ctx.quick)
    with kbroker(ctx) as broker, contextlib.ExitStack() as stack:
        targets: list[Broker] = [broker, *run_kafka(ctx, stack)]
        for index, shape in enumerate(todo):
            if index and ctx.time_left() < 30 * len(targets) * ctx.rounds:
                ctx.notes.append(f"time budget spent: {len(todo) - index} of {len(todo)} shapes not run")
                break
            ctx.log(f"{shape.label}, {shape.records:,} records ({index + 1}/{len(todo)})")
            results += compare(shape, measure(ctx, targets, shape), broker, targets[1:])
    return results


def measure(ctx: Context, targets: list[Broker], shape: Shape) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {t.name: [] for t in targets}
    for round_index in range(ctx.rounds):
        if round_index and ctx.time_left() <= 0:
            break
        for target in rotated(targets, round_index):
            with target.scratch_topic("perftest", 1) as topic:
                runs[target.name].append(perf_test(target, topic, shape))
    return runs


def compare(shape: Shape, runs: dict[str, list[dict[str, float]]], broker: Broker, others: list[Broker]
            ) -> list[Result]:
    mine = runs[broker.name]
    params = {"value_size": shape.value_size, "acks": shape.acks, "records": shape.records, "partitions": 1,
              "client": f"{MAIN} ({kafka.TOOLS_JAR_SET} jars)", "kbroker_rounds": mine}
    results = []
    for key, metric, higher_is_better in ROWS:
        theirs = {o.name: median([r[key] for r in runs[o.name] if r[key] is not None]) for o in others}
        rounds = {f"{o.name}_rounds": runs[o.name] for o in others} if key == "records_per_s" else {}
        results += per_peer(SUITE, shape.label, metric, median([r[key] for r in mine if r[key] is not None]), theirs,
                            higher_is_better=higher_is_better,
                            params={**params, **rounds} if key == "records_per_s" else {})
    return results


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
