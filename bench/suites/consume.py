"""Consume throughput from the page cache: re-read the newest window of records, kbroker against its peers.

Shapes: values of 100 B, 1 KiB and 10 KiB; compression none and lz4; 1 and 16 partitions
(12 shapes; --quick runs one). acks do not change what a consumer reads, so they are not a
dimension here.

librdkafka's mock keeps at most 5 MiB of batches per partition, so each partition gets 3 MiB
of values (31,457 records of 100 B, 3,072 of 1 KiB, 307 of 10 KiB) and every pass re-reads
exactly that window: assign every partition at its high watermark minus the window, read up to
the high watermark (fetch.wait.max.ms=10, or the next assign would wait out the long poll the
client left at the high watermark). Apache Kafka keeps everything written, but is read over the
same window, so every broker serves the same number of records per pass, and kbroker's and
Kafka's come from the page cache (just written). A round is as many passes as fit in 1.5 s (quick 0.5 s);
rounds alternate between brokers (A B, B A, ...) and the figure is the median.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer

from bench.harness import Context, Result, interleave, median, size_label
from bench.load import fill, read_window, reader, value_pool, watermarks
from bench.peers import Broker, kbroker, peers

SUITE = "consume"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
TIME_BUDGET = (40, 900)
SIZES = (100, 1024, 10 * 1024)
COMPRESSIONS = ("none", "lz4")
PARTITIONS = (1, 16)
WINDOW_BYTES = 3 * 1024 * 1024  # values per partition; the mock holds 5 MiB of batches
TARGET_RATIO, FLOOR_RATIO = 1.0, 0.8
# After a pass the consumer has a fetch waiting at the high watermark; the next assign() must wait
# for it to come back, so the client's 500 ms default would time the wait, not the reading.
READER_CONFIG = {"fetch.wait.max.ms": 10}


@dataclass(frozen=True)
class Shape:
    value_size: int
    compression: str
    partitions: int

    @property
    def label(self) -> str:
        size = size_label(self.value_size)
        plural = "partition" if self.partitions == 1 else "partitions"
        return f"{size}, {self.compression}, {self.partitions} {plural}"

    @property
    def per_partition(self) -> int:
        return WINDOW_BYTES // self.value_size


@dataclass
class Round:
    records: int
    value_bytes: int
    seconds: float
    passes: int

    @property
    def msgs_per_s(self) -> float:
        return self.records / self.seconds


def shapes(quick: bool) -> list[Shape]:
    if quick:
        return [Shape(100, "none", 1)]
    return [Shape(*combo) for combo in itertools.product(SIZES, COMPRESSIONS, PARTITIONS)]


def run(ctx: Context) -> list[Result]:
    round_seconds = 0.5 if ctx.quick else 1.5
    todo = shapes(ctx.quick)
    results: list[Result] = []
    with kbroker(ctx) as broker, peers(ctx) as others:
        targets: list[Broker] = [broker, *others]
        for index, shape in enumerate(todo):
            if ctx.time_left() < round_seconds * len(targets) * 3:
                ctx.notes.append(f"time budget spent: {len(todo) - index} of {len(todo)} shapes not run")
                break
            ctx.log(f"consume {shape.label} ({index + 1}/{len(todo)})")
            rounds, window = measure(ctx, targets, shape, round_seconds)
            results += compare(shape, rounds, window, broker, others)
    return results


def measure(ctx: Context, targets: list[Broker], shape: Shape, round_seconds: float
            ) -> tuple[dict[str, list[Round]], int]:
    values = value_pool(shape.value_size)
    with contextlib.ExitStack() as stack:
        topics, consumers = {}, {}
        for target in targets:
            topics[target.name] = stack.enter_context(target.scratch_topic("consume", shape.partitions))
            fill(target, topics[target.name], shape.partitions, values, shape.per_partition, shape.compression)
            consumers[target.name] = consumer = reader(target, **READER_CONFIG)
            stack.callback(consumer.close)
        held = {t.name: watermarks(consumers[t.name], topics[t.name], shape.partitions) for t in targets}
        # the same number of records from every broker: the smallest window any of them still holds
        window = min(min(high - low for low, high in marks) for marks in held.values())
        window = min(window, shape.per_partition)
        if window <= 0:
            raise RuntimeError(f"a broker holds no records of {topics}")
        windows = {name: [(high - window, high) for _, high in marks] for name, marks in held.items()}
        for target in targets:  # warm-up pass
            read_window(consumers[target.name], topics[target.name], windows[target.name])

        def one(target: Broker) -> Round:
            return passes(consumers[target.name], topics[target.name], windows[target.name], round_seconds)

        return interleave(targets, ctx.rounds, one, key=lambda t: t.name, ctx=ctx), window


def passes(consumer: Consumer, topic: str, windows: list[tuple[int, int]], seconds: float) -> Round:
    """Re-read the window until `seconds` are used (at least once)."""
    total = Round(0, 0, 0.0, 0)
    ends = time.perf_counter() + seconds
    while total.passes == 0 or time.perf_counter() < ends:
        records, value_bytes, elapsed = read_window(consumer, topic, windows)
        expected = sum(end - start for start, end in windows)
        if records != expected:
            raise RuntimeError(f"{topic}: read {records} records, expected {expected}")
        total = Round(total.records + records, total.value_bytes + value_bytes, total.seconds + elapsed,
                      total.passes + 1)
    return total


def compare(shape: Shape, rounds: dict[str, list[Round]], window: int, broker: Broker, others: list[Broker]
            ) -> list[Result]:
    mine = rounds[broker.name]
    kbroker_rate = median([r.msgs_per_s for r in mine])
    params = {**asdict(shape), "window_per_partition": window,
              "kbroker_rounds_msgs_per_s": [r.msgs_per_s for r in mine],
              "kbroker_mb_per_s": kbroker_rate * shape.value_size / 1e6,
              "kbroker_passes": [r.passes for r in mine]}
    results = []
    for other in others:
        theirs = rounds[other.name]
        peer_rate = median([r.msgs_per_s for r in theirs])
        mock = other.kind == "mock"
        results.append(Result(
            SUITE, f"consume {shape.label}", "msgs/s", kbroker_rate, peer_rate, other.name,
            target=f">= {TARGET_RATIO:g}x mock (floor {FLOOR_RATIO:g}x)" if mock else None,
            target_ratio=TARGET_RATIO if mock else None, floor_ratio=FLOOR_RATIO if mock else None,
            params={**params, "peer_rounds_msgs_per_s": [r.msgs_per_s for r in theirs],
                    "peer_mb_per_s": peer_rate * shape.value_size / 1e6,
                    "paired_round_ratios": [a.msgs_per_s / b.msgs_per_s for a, b in zip(mine, theirs, strict=False)]},
            note=f"newest {window:,} records of each partition"))
    return results
