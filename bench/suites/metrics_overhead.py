"""What the Prometheus metrics cost: kbroker with prometheus.port set against the same kbroker without it.

Two `kbroker serve` processes run side by side, one with metrics on (prometheus.port) and one without;
the same client measures both in interleaved rounds (on off, off on, ...), each figure the median over
rounds. Shapes: produce throughput of 100 B values with acks=1 to 1 partition (the least broker work per
request, so the per-request timing weighs most) and of 1 KiB values with acks=all to 16 partitions (per-topic
counts for many partitions per request), then consume throughput of 100 B records from 1 partition (fetch:
per-topic byte counts). Each produce run
lasts 2 s (quick 0.6 s); each read takes the records one fill wrote (200,000; quick 20,000). After every
round the metrics-on broker is scraped once, outside the timed window, to show /metrics answers under a
real load; the scrape's duration is reported too. Both brokers are warmed up first with 0.3 s of
produce that is not measured.

Each produce shape also reports the CPU the broker process spent per million records (user + system, from
/proc), which a busy shared machine disturbs less than throughput. Full runs take at least 7 rounds.

Target: metrics on keep at least 0.95x the throughput of metrics off (floor 0.9x) and spend at most 1.05x
its broker CPU per record (floor 1.1x).
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from bench.harness import Context, Result, interleave, median
from bench.load import ProduceRun, fill, produce_for, read_window, reader, value_pool, watermarks
from bench.peers import KbrokerBroker, kbroker
from kbroker.testing import free_port

SUITE = "metrics_overhead"
TIME_BUDGET = (60, 600)
ON, OFF = "kbroker (metrics on)", "kbroker (metrics off)"  # no comma: names become log.dirs paths
PRODUCE_SHAPES = ((100, "1", 1), (1024, "all", 16))   # value size, acks, partitions
READ_VALUE_SIZE = 100
TARGET_RATIO, FLOOR_RATIO = 0.95, 0.9           # throughput, metrics on / metrics off
CPU_TARGET_RATIO, CPU_FLOOR_RATIO = 1.05, 1.1   # broker CPU per record, likewise
WARM_UP_S = 0.3
MIN_ROUNDS = 7  # a full run: the machine is often shared, and the median of 7 rounds steadies the figures
CPU_METRIC = "broker CPU s / 1M msgs"


def run(ctx: Context) -> list[Result]:
    seconds = 0.6 if ctx.quick else 2.0
    rounds = ctx.rounds if ctx.quick else max(ctx.rounds, MIN_ROUNDS)
    records_to_read = 20_000 if ctx.quick else 200_000
    metrics_port = free_port()
    results: list[Result] = []
    scrapes: list[float] = []
    with kbroker(ctx, f"prometheus.port={metrics_port}", name=ON) as on, kbroker(ctx, name=OFF) as off:
        targets = [on, off]

        def scraped() -> None:
            scrapes.append(_scrape_ms(metrics_port))

        for target in targets:  # warm-up, not measured: connections, imports and caches of both brokers
            _produce(target, (100, "1", 1), WARM_UP_S, None)
        for shape in PRODUCE_SHAPES:
            size, acks, partitions = shape
            label = f"produce {size} B, acks={acks}, {partitions} partition{'s' if partitions > 1 else ''}"
            if ctx.time_left() < 4 * seconds * rounds:
                ctx.notes.append(f"time budget spent: {label} not run")
                continue
            ctx.log(label)
            runs = interleave(targets, rounds, _producer(on, shape, seconds, scraped), key=str, ctx=ctx)
            results.append(_compare(label, {name: [r.msgs_per_s for r in done] for name, done in runs.items()}))
            results.append(_compare(label, {name: [r.broker_cpu_per_million for r in done]
                                            for name, done in runs.items()}, CPU_METRIC))
        if ctx.time_left() > 10:
            ctx.log(f"consume {records_to_read:,} records of {READ_VALUE_SIZE} B")
            with on.scratch_topic("metrics-read", 1) as on_topic, off.scratch_topic("metrics-read", 1) as off_topic:
                topics = {on.name: on_topic, off.name: off_topic}
                for target in targets:
                    fill(target, topics[target.name], 1, value_pool(READ_VALUE_SIZE), records_to_read, "none")
                reads = interleave(targets, rounds, lambda target: _read_rate(target, topics[target.name]),
                                   key=str, ctx=ctx)
            results.append(_compare(f"consume {READ_VALUE_SIZE} B, 1 partition", reads))
        else:
            ctx.notes.append("time budget spent: consume not run")
    if scrapes:
        results.append(Result(SUITE, "scrape of /metrics after a round", "ms", None, reference=median(scrapes),
                              higher_is_better=False, params={"scrapes_ms": scrapes},
                              note="one GET of /metrics on the metrics-on broker, outside the timed window"))
    return results


def _producer(on: KbrokerBroker, shape: tuple[int, str, int], seconds: float, scraped: Any) -> Any:
    """One produce measurement of `shape` for any target; the metrics-on one is scraped afterwards."""
    return lambda target: _produce(target, shape, seconds, scraped if target is on else None)


def _produce(target: KbrokerBroker, shape: tuple[int, str, int], seconds: float, after: Any) -> ProduceRun:
    size, acks, partitions = shape
    with target.scratch_topic(f"metrics-{size}-{acks}", partitions) as topic:
        produced = produce_for(target, topic, partitions, value_pool(size), seconds, 512 << 20, acks=acks)
    if after is not None:
        after()
    return produced


def _read_rate(target: KbrokerBroker, topic: str) -> float:
    consumer = reader(target, **{"fetch.max.bytes": 50 << 20})
    try:
        windows = watermarks(consumer, topic, 1)
        records, _, elapsed = read_window(consumer, topic, windows)
    finally:
        consumer.close()
    return records / elapsed


def _scrape_ms(port: int) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        if b"kafka_network_requestmetrics_requests_total" not in answer.read():
            raise RuntimeError("/metrics answered without the request counts")
    return (time.perf_counter() - started) * 1000


def _compare(shape: str, rounds: dict[str, list[float]], metric: str = "msgs/s") -> Result:
    on, off = rounds[ON], rounds[OFF]
    cpu = metric == CPU_METRIC  # lower is better
    target, floor = (CPU_TARGET_RATIO, CPU_FLOOR_RATIO) if cpu else (TARGET_RATIO, FLOOR_RATIO)
    return Result(SUITE, shape, metric, median(on), median(off), OFF, higher_is_better=not cpu,
                  target=f"{'<=' if cpu else '>='} {target:g}x metrics off", target_ratio=target, floor_ratio=floor,
                  params={"on_rounds": on, "off_rounds": off})
