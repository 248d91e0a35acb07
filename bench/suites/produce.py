"""Produce throughput: kbroker against librdkafka's mock and Apache Kafka (and `--peer`), same client, same shapes.

Shapes: values of 100 B, 1 KiB and 10 KiB; acks 0, 1 and all; compression none and lz4;
1 and 16 partitions (36 shapes; --quick runs two of them). The client is confluent-kafka with
linger.ms=5 (librdkafka's default) and a 64 MiB buffer; records go round-robin over the
partitions. Values are half random and half repeated (lz4 roughly halves them).

Each run produces for a fixed time (2 s; quick 0.6 s) or until 512 MiB of values are out,
then waits for every acknowledgement; the rate is records / (first produce() to last ack).
Brokers are interleaved round by round (A B, B A, ...) on a fresh topic per shape, and each
figure is the median over rounds. Every round also times the client alone (produce() calls per
second into a client with no broker, 0.3 s); when the mock reaches 80% of that, the figure
measures the client rather than the brokers, and the result says so. Below each shape, the CPU
a record costs the broker: CPU seconds (user + system, /proc/<pid>/stat) of the broker process
alone per million records, over the measured window; kbroker and Apache Kafka are processes of
their own, the mock runs inside the client, so it has no figure there.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import asdict, dataclass

from bench.harness import Context, Result, median, rotated, size_label
from bench.load import ProduceRun, client_produce_ceiling, produce_for, value_pool
from bench.peers import Broker, kbroker, peers

SUITE = "produce"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
TIME_BUDGET = (45, 1800)
SIZES = (100, 1024, 10 * 1024)
ACKS = ("0", "1", "all")
COMPRESSIONS = ("none", "lz4")
PARTITIONS = (1, 16)
TARGET_RATIO, FLOOR_RATIO = 1.0, 0.8
CLIENT_BOUND = 0.8  # the mock at this share of the client's own ceiling: the client is the limit
CEILING_SECONDS = 0.3


@dataclass(frozen=True)
class Shape:
    value_size: int
    acks: str
    compression: str
    partitions: int

    @property
    def label(self) -> str:
        size = size_label(self.value_size)
        plural = "partition" if self.partitions == 1 else "partitions"
        return f"{size}, acks={self.acks}, {self.compression}, {self.partitions} {plural}"


def shapes(quick: bool) -> list[Shape]:
    if quick:
        return [Shape(100, "1", "none", 1), Shape(1024, "all", "lz4", 16)]
    return [Shape(*combo) for combo in itertools.product(SIZES, ACKS, COMPRESSIONS, PARTITIONS)]


def run(ctx: Context) -> list[Result]:
    seconds = 0.6 if ctx.quick else 2.0
    max_bytes = (64 if ctx.quick else 512) * 1024 * 1024
    todo = shapes(ctx.quick)
    results: list[Result] = []
    with kbroker(ctx) as broker, peers(ctx) as others:
        targets: list[Broker] = [broker, *others]
        for index, shape in enumerate(todo):
            if ctx.time_left() < seconds * len(targets) * 2:
                ctx.notes.append(f"time budget spent: {len(todo) - index} of {len(todo)} shapes not run")
                break
            ctx.log(f"produce {shape.label} ({index + 1}/{len(todo)})")
            runs, ceilings = measure(ctx, targets, shape, seconds, max_bytes)
            results += compare(shape, runs, broker, others, median(ceilings))
    return results


def measure(ctx: Context, targets: list[Broker], shape: Shape, seconds: float, max_bytes: int
            ) -> tuple[dict[str, list[ProduceRun]], list[float]]:
    """Rounds of every broker in rotating order, each round also timing the client alone (same machine state)."""
    values = value_pool(shape.value_size)
    with contextlib.ExitStack() as stack:
        topics = {t.name: stack.enter_context(t.scratch_topic("produce", shape.partitions)) for t in targets}

        def one(target: Broker, run_seconds: float = seconds) -> ProduceRun:
            return produce_for(target, topics[target.name], shape.partitions, values, run_seconds, max_bytes,
                               acks=shape.acks, compression=shape.compression)

        if not ctx.quick:
            for target in targets:  # segments created, connections and caches warm
                one(target, 0.2)
        runs: dict[str, list[ProduceRun]] = {t.name: [] for t in targets}
        ceilings: list[float] = []
        for round_index in range(ctx.rounds):
            if round_index and ctx.time_left() <= 0:
                break
            ceilings.append(client_produce_ceiling(values, CEILING_SECONDS))
            for target in rotated(targets, round_index):
                runs[target.name].append(one(target))
        return runs, ceilings


def compare(shape: Shape, runs: dict[str, list[ProduceRun]], broker: Broker, others: list[Broker],
            ceiling: float) -> list[Result]:
    mine = runs[broker.name]
    kbroker_rate = median([r.msgs_per_s for r in mine])
    cpu = [100 * r.broker_cpu_seconds / r.seconds for r in mine if r.broker_cpu_seconds is not None]
    params = {**asdict(shape), "client_ceiling_msgs_per_s": ceiling,
              "kbroker_rounds_msgs_per_s": [r.msgs_per_s for r in mine],
              "kbroker_mb_per_s": kbroker_rate * shape.value_size / 1e6,
              "kbroker_cpu_percent": median(cpu),
              "client_cpu_percent_with_kbroker": median([100 * r.client_cpu_seconds / r.seconds for r in mine])}
    results = []
    for other in others:
        theirs = runs[other.name]
        peer_rate = median([r.msgs_per_s for r in theirs])
        mock = other.kind == "mock"
        note = ""
        if mock and peer_rate >= CLIENT_BOUND * ceiling:
            note = (f"client-bound: the mock reaches {100 * peer_rate / ceiling:.0f}% of the client's own "
                    f"produce() ceiling ({ceiling:,.0f}/s)")
        results.append(Result(
            SUITE, f"produce {shape.label}", "msgs/s", kbroker_rate, peer_rate, other.name,
            target=f">= {TARGET_RATIO:g}x mock (floor {FLOOR_RATIO:g}x)" if mock else None,
            target_ratio=TARGET_RATIO if mock else None, floor_ratio=FLOOR_RATIO if mock else None,
            params={**params, "peer_rounds_msgs_per_s": [r.msgs_per_s for r in theirs],
                    "peer_mb_per_s": peer_rate * shape.value_size / 1e6,
                    "paired_round_ratios": [a.msgs_per_s / b.msgs_per_s for a, b in zip(mine, theirs, strict=False)]},
            note=note))
    return results + cpu_cost(SUITE, f"produce {shape.label}", mine,
                              {o.name: runs[o.name] for o in others if o.pid is not None})


CPU_METRIC = "broker CPU s / 1M records"


def cpu_cost(suite: str, name: str, mine: list[ProduceRun], theirs: dict[str, list[ProduceRun]]) -> list[Result]:
    """The broker CPU each million records cost: kbroker's against each peer that is a process of its own."""
    kbroker_cost = median([r.broker_cpu_per_million for r in mine])
    params = {"kbroker_rounds": [r.broker_cpu_per_million for r in mine]}
    if not theirs:
        return [Result(suite, name, CPU_METRIC, kbroker_cost, higher_is_better=False, params=params)]
    return [Result(suite, name, CPU_METRIC, kbroker_cost, median([r.broker_cpu_per_million for r in runs]), peer,
                   higher_is_better=False, params={**params, "peer_rounds": [r.broker_cpu_per_million for r in runs]})
            for peer, runs in theirs.items()]
