"""Single-node broker benchmark: kbroker against librdkafka's mock cluster, same client.

    python -m bench.broker_throughput [--quick] [--output results.json] [--profile] [--no-uvloop]

What it measures, with confluent-kafka as the client and 100-byte values, on one
partition of one topic:

1. produce throughput, acks=1, linger.ms=5 (msgs/s and MB/s of values);
2. consume throughput: each pass re-reads the newest WINDOW records (assign at high
   watermark - WINDOW, read up to the high watermark). The mock keeps only about 4.5 MB per
   partition, so the window is one the mock still holds;
3. produce-ack latency at a steady 10,000 msgs/s, acks=1, once with linger.ms=0 (judged
   against the target) and once with linger.ms=5: message i is due at t0 + i / rate and its
   latency runs from that scheduled time to its delivery callback, so a stalled client or
   broker is charged for every message it held up (no coordinated omission). librdkafka's
   statistics add records per ProduceRequest, requests per second and the round trip, and
   for kbroker the broker's CPU time per request;
4. two ceilings: loopback TCP throughput of a plain socket pair (physical), and the rate at
   which the client alone accepts produce() calls (no broker involved).

The peer is librdkafka's built-in mock cluster (`test.mock.num.brokers=1`): a C broker
running inside this process, so its figures are in practice the client's own ceiling.
kbroker runs as a `kbroker serve` subprocess, with the default asyncio loop and, when
uvloop is installed and `serve --event-loop` exists, a second uvloop process.

Why this shape: the brokers are measured in one run, interleaved round by round (the order
rotates every round: A B C, B C A, ...), and each figure is the median over rounds, so drift
on a shared machine hits all brokers alike. Every loop is bounded by a count and a deadline,
everything listens on 127.0.0.1, and a watchdog ends the run if it overruns.

When a kbroker variant misses a target (or with --profile), the broker process is sampled
with py-spy during an extra produce run (and, in a full run, an extra latency run when the
latency target was missed) and the hottest functions are reported: self time (the sampled
leaf) and inclusive time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import machine_facts, median, percentile, rotated
from bench.peers import KbrokerBroker, MockBroker
from bench.suites.limits import loopback_send as loopback_tcp
from kbroker.testing import BrokerProcess, free_port

VALUE_SIZE = 100
TOPIC = "bench-throughput"
LATENCY_TOPIC = "bench-latency"
WINDOW = 30_000  # records re-read per consume pass
LATENCY_RATE = 10_000  # msgs/s
# Latency runs with linger.ms=0 (the client sends at once, so the figure is the broker's) and
# with linger.ms=5 (the produce benchmark's setting; the client itself then holds a record up
# to 5 ms, so p99 <= 5 ms is out of reach by construction). The target is judged on the first.
LATENCY_LINGERS_MS = (0, 5)
LATENCY_DRAIN_S = 10  # how long a latency run waits for its last acks
PRODUCE_LINGER_MS = 5

TARGET_PRODUCE_RATIO = 1.0
FLOOR_PRODUCE_RATIO = 0.8
TARGET_CONSUME_RATIO = 1.0
TARGET_P99_MS = 5.0

MOCK = "mock"
KBROKER = "kbroker"
KBROKER_UVLOOP = "kbroker-uvloop"

CLIENT_LOGGING = {"log_level": 4, "log.connection.close": False}  # warnings and worse
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    produce_rounds: int
    produce_messages: int
    consume_rounds: int
    consume_passes: int
    latency_rounds: int
    latency_seconds: float  # measured part of a round
    latency_warmup: float  # sent first and not counted
    profile_seconds: int
    profile_latency: bool  # also profile the latency run when its target is missed
    loopback_seconds: float
    watchdog_seconds: int


FULL = Settings(produce_rounds=7, produce_messages=300_000, consume_rounds=7, consume_passes=8,
                latency_rounds=3, latency_seconds=3.0, latency_warmup=0.5, profile_seconds=8,
                profile_latency=True, loopback_seconds=1.0, watchdog_seconds=235)
QUICK = Settings(produce_rounds=3, produce_messages=100_000, consume_rounds=3, consume_passes=3,
                 latency_rounds=1, latency_seconds=1.5, latency_warmup=0.3, profile_seconds=4,
                 profile_latency=False, loopback_seconds=0.5, watchdog_seconds=58)


class BenchTimeout(Exception):
    """The watchdog fired: the run took longer than its budget."""


# --- brokers ---------------------------------------------------------------------------


def kbroker_event_loops() -> list[str]:
    """The loops `kbroker serve` accepts that are also installed here."""
    loops = ["asyncio"]
    help_text = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--help"], capture_output=True,
                               text=True, timeout=30, cwd=REPO).stdout
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return loops
    if "--event-loop" in help_text and "uvloop" in help_text:
        loops.append("uvloop")
    return loops


@dataclass
class Target:
    """One broker under test and the clients the benchmark keeps open to it."""

    name: str
    server: Any  # KbrokerBroker or MockBroker
    producer: Producer | None = None
    consumer: Consumer | None = None
    delivery_errors: list = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    def open_clients(self) -> None:
        self.producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": 1, "linger.ms": PRODUCE_LINGER_MS,
            "delivery.report.only.error": True, "on_delivery": self._on_error, **CLIENT_LOGGING})
        self.consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": "bench", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": False, "fetch.wait.max.ms": 10,
            **CLIENT_LOGGING})

    def _on_error(self, error, message) -> None:
        if error is not None:
            self.delivery_errors.append(str(error))

    def close_clients(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


# --- measurements ----------------------------------------------------------------------


def produce_run(target: Target, count: int, value: bytes, time_limit: float = 60) -> float:
    """Produce `count` records to partition 0 and wait for every ack; returns seconds."""
    producer = target.producer
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    deadline = started + time_limit
    sent = 0
    while sent < count:
        try:
            produce(TOPIC, value, partition=0)
        except BufferError:  # the client's queue is full: let it drain
            poll(0.0005)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{target.name}: produce stalled after {sent} records") from None
            continue
        sent += 1
        if not sent & 0x3FFF:
            poll(0)
    left = producer.flush(max(1.0, deadline - time.perf_counter()))
    elapsed = time.perf_counter() - started
    if left:
        raise TimeoutError(f"{target.name}: {left} records still unacknowledged")
    if target.delivery_errors:
        raise RuntimeError(f"{target.name}: delivery failed: {target.delivery_errors[:3]}")
    return elapsed


def watermarks(target: Target, topic: str = TOPIC) -> tuple[int, int]:
    return target.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)


def consume_pass(target: Target, start: int, end: int, time_limit: float = 30) -> float:
    """Read offsets [start, end) of partition 0 from an assignment at `start`; returns seconds."""
    consumer = target.consumer
    started = time.perf_counter()
    deadline = started + time_limit
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    seen = 0
    last = start - 1
    while last < end - 1:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{target.name}: consumed {seen} of {end - start} records in {time_limit} s")
        batch = consumer.consume(10_000, 0.5)
        for message in batch:
            if message.error() is not None:
                raise RuntimeError(f"{target.name}: consume error {message.error()}")
        if batch:
            last = batch[-1].offset()
            seen += len(batch)
    elapsed = time.perf_counter() - started
    consumer.unassign()
    if seen != end - start:
        raise RuntimeError(f"{target.name}: expected {end - start} records, got {seen}")
    return elapsed


def latency_round(target: Target, seconds: float, warmup_seconds: float, value: bytes,
                  linger_ms: int = LATENCY_LINGERS_MS[0]) -> dict[str, Any]:
    """Produce at LATENCY_RATE on a fixed schedule; latency = delivery time - scheduled time.

    A record still unacknowledged when the run gives up counts with the time it had waited
    by then (a lower bound), so a stalled broker cannot improve its own percentiles."""
    # librdkafka's statistics (request counts, round trips), each with the broker's CPU time then
    snapshots: list[tuple[float, float | None, str]] = []
    producer = Producer({"bootstrap.servers": target.bootstrap, "acks": 1, "linger.ms": linger_ms,
                         "statistics.interval.ms": 500, **CLIENT_LOGGING,
                         "stats_cb": lambda text: snapshots.append((time.perf_counter(), _cpu(target), text))})
    producer.produce(LATENCY_TOPIC, value, partition=0)  # connect and learn the leader first
    if producer.flush(10):
        raise TimeoutError(f"{target.name}: latency warm-up record not acknowledged")
    interval = 1.0 / LATENCY_RATE
    warmup = int(warmup_seconds * LATENCY_RATE)
    total = warmup + int(seconds * LATENCY_RATE)
    latencies = [math.nan] * total
    errors: list[str] = []
    perf_counter = time.perf_counter
    t0 = perf_counter() + 0.01

    def delivered(index: int, error, message) -> None:
        latencies[index] = perf_counter() - (t0 + index * interval)
        if error is not None:
            errors.append(str(error))

    produce, poll = producer.produce, producer.poll
    deadline = t0 + seconds + warmup_seconds + 5
    cpu_before, client_before = _cpu(target), time.process_time()
    sent = 0
    while sent < total and perf_counter() < deadline:
        now = perf_counter()
        while sent < total and t0 + sent * interval <= now:
            try:
                produce(LATENCY_TOPIC, value, partition=0, on_delivery=functools.partial(delivered, sent))
            except BufferError:
                poll(0.0005)
                break
            sent += 1
        poll(0)
        wait = t0 + sent * interval - perf_counter()
        if wait > 0:
            time.sleep(wait)
    producer.flush(LATENCY_DRAIN_S)
    gave_up = perf_counter()
    producer.poll(0)
    elapsed = gave_up - t0
    cpu = _cpu(target) - cpu_before if cpu_before is not None else None
    client_cpu = time.process_time() - client_before
    producer.purge()
    producer.flush(1)
    measured = latencies[warmup:]
    lost = sum(1 for x in measured if math.isnan(x))
    ordered = sorted(1000 * (gave_up - (t0 + (warmup + i) * interval)) if math.isnan(x) else 1000 * x
                     for i, x in enumerate(measured))
    if errors:
        raise RuntimeError(f"{target.name}: {len(errors)} delivery errors: {errors[:3]}")
    return {"linger_ms": linger_ms, "messages": len(ordered), "unacknowledged": lost,
            "p50_ms": percentile(ordered, 0.50), "p99_ms": percentile(ordered, 0.99),
            "p999_ms": percentile(ordered, 0.999), "max_ms": ordered[-1],
            "broker_cpu_percent": None if cpu is None else 100 * cpu / elapsed,
            "client_process_cpu_percent": 100 * client_cpu / elapsed, **_request_facts(snapshots)}


def _request_facts(snapshots: list[tuple[float, float | None, str]]) -> dict[str, Any]:
    """From librdkafka's statistics: records per ProduceRequest, requests per second, the broker
    round trip the client saw, and (kbroker) the broker's CPU time per ProduceRequest."""
    rtt_p50, rtt_p99, counts = [], [], []
    for at, cpu, text in snapshots:
        stats = json.loads(text)
        brokers = [b for b in stats["brokers"].values() if b["nodeid"] >= 0]
        counts.append((at, cpu, stats["txmsgs"], sum(b["req"].get("Produce", 0) for b in brokers)))
        for broker in brokers:
            if broker["rtt"]["cnt"]:
                rtt_p50.append(broker["rtt"]["p50"] / 1000)
                rtt_p99.append(broker["rtt"]["p99"] / 1000)
    facts: dict[str, Any] = {"records_per_request": None, "requests_per_s": None, "broker_cpu_us_per_request": None,
                             "rtt_p50_ms": median(rtt_p50) if rtt_p50 else None,
                             "rtt_p99_ms_worst": max(rtt_p99, default=None)}
    if len(counts) >= 2 and counts[-1][3] > counts[0][3]:
        (t0, cpu0, records0, requests0), (t1, cpu1, records1, requests1) = counts[0], counts[-1]
        requests = requests1 - requests0
        facts.update(records_per_request=(records1 - records0) / requests, requests_per_s=requests / (t1 - t0))
        if cpu0 is not None:
            facts["broker_cpu_us_per_request"] = 1e6 * (cpu1 - cpu0) / requests
    return facts


def _cpu(target: Target) -> float | None:
    return target.server.cpu_seconds()  # None for the mock, which runs inside this process


def client_produce_ceiling(count: int, value: bytes) -> float:
    """produce() calls per second with nothing listening: the client's own cost per record."""
    port = free_port()  # nothing listens there, so every record stays queued in the client
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "queue.buffering.max.messages": count + 1000,
                         "log_level": 0, "reconnect.backoff.ms": 1000})
    produce = producer.produce
    started = time.perf_counter()
    for _ in range(count):
        produce(TOPIC, value, partition=0)
    elapsed = time.perf_counter() - started
    producer.purge()
    producer.flush(1)
    return count / elapsed


# --- profiling -------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::\d+)?\)$")


def _frame_key(frame: str) -> str:
    match = _FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for prefix in (str(REPO) + os.sep, "site-packages" + os.sep):
        at = path.find(prefix)
        if at >= 0:
            path = path[at + len(prefix):]
            break
    else:
        path = os.path.basename(path)
    return f"{match['function']} ({path})"


# Leaf frames that are not Python work: the event loop waiting in epoll (asyncio), or
# anything below uvloop's loop, which is C (its epoll wait, its transports, its callbacks).
_NOT_PYTHON_WORK = {
    "EpollSelector.select (selectors.py)": "waiting in epoll",
    "Runner.run (runners.py)": "in uvloop's C loop: epoll wait, transports",
}


def summarize_profile(raw: str, seconds: float, rate: int, top: int = 15) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_key(f) for f in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for key in set(frames):
            inclusive[key] += count

    def entries(counter: Counter[str], annotate: bool) -> list[dict[str, Any]]:
        return [{"function": key, "percent": round(100 * n / samples, 1),
                 "note": _NOT_PYTHON_WORK.get(key) if annotate else None}
                for key, n in counter.most_common(top)]

    # frames on (nearly) every stack are the interpreter and the event loop's entry: drop them
    inclusive = Counter({k: n for k, n in inclusive.items() if n < 0.98 * samples})
    return {"samples": samples, "sampled_percent_of_wall": round(100 * samples / (seconds * rate), 1),
            "self": entries(own, True) if samples else [], "inclusive": entries(inclusive, False) if samples else []}


def profile_broker(target: Target, seconds: int, workload, rate: int = 100) -> dict[str, Any]:
    """Sample the broker with py-spy while `workload(spy_running)` loads it; returns the summary."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    with tempfile.TemporaryDirectory(prefix="kbroker-profile-") as scratch:
        raw_path = Path(scratch) / "stacks.txt"
        spy = subprocess.Popen([py_spy, "record", "--pid", str(target.server.pid), "--duration", str(seconds),
                                "--rate", str(rate), "--format", "raw", "--output", str(raw_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)  # let py-spy attach
            cpu_before, started = _cpu(target), time.perf_counter()
            facts = workload(lambda: spy.poll() is None)
            elapsed = time.perf_counter() - started
            broker_cpu = 100 * (_cpu(target) - cpu_before) / elapsed
            _, errors = spy.communicate(timeout=30)
        finally:
            if spy.poll() is None:
                spy.kill()
                spy.wait(5)
        if spy.returncode != 0 or not raw_path.exists():
            return {"error": f"py-spy failed ({spy.returncode}): {errors.strip()[-500:]}"}
        summary = summarize_profile(raw_path.read_text(encoding="utf-8"), seconds, rate)
    summary.update(target=target.name, seconds=seconds, rate_hz=rate, broker_cpu_percent=broker_cpu, **facts)
    return summary


def profile_produce(target: Target, seconds: int, value: bytes) -> dict[str, Any]:
    """The produce benchmark (acks=1, linger.ms=5) for as long as py-spy samples."""

    def workload(spy_running) -> dict[str, Any]:
        produced, started = 0, time.perf_counter()
        while spy_running() and time.perf_counter() - started < seconds + 15:
            produce_run(target, 50_000, value)
            produced += 50_000
        return {"workload": "produce, acks=1, linger.ms=5",
                "produce_msgs_per_s": produced / (time.perf_counter() - started)}

    return profile_broker(target, seconds, workload)


def profile_latency(target: Target, seconds: int, value: bytes) -> dict[str, Any]:
    """The latency run (10,000 msgs/s, linger.ms=0) for as long as py-spy samples."""

    def workload(spy_running) -> dict[str, Any]:
        figures = latency_round(target, seconds, 0.0, value, linger_ms=LATENCY_LINGERS_MS[0])
        return {"workload": f"{LATENCY_RATE:,} msgs/s, acks=1, linger.ms={LATENCY_LINGERS_MS[0]}",
                "latency_p50_ms": figures["p50_ms"], "latency_p99_ms": figures["p99_ms"]}

    return profile_broker(target, seconds, workload)


# --- the run ---------------------------------------------------------------------------


class LoadSampler:
    """/proc/loadavg at phase boundaries: the machine is shared, so the load is part of the result."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []

    def sample(self, label: str) -> None:
        with open("/proc/loadavg", encoding="ascii") as handle:
            one, five, fifteen = (float(x) for x in handle.read().split()[:3])
        self.samples.append({"at": label, "load1": one, "load5": five, "load15": fifteen})


def run(settings: Settings, use_uvloop: bool, force_profile: bool) -> dict[str, Any]:
    value = bytes(range(VALUE_SIZE))
    load = LoadSampler()
    load.sample("start")
    result: dict[str, Any] = {"machine": machine_facts(), "notes": []}
    loops = kbroker_event_loops()
    if "uvloop" not in loops:
        result["notes"].append("uvloop variant skipped: uvloop is not installed or `kbroker serve` has no "
                               "--event-loop option")
    elif not use_uvloop:
        result["notes"].append("uvloop variant skipped (--no-uvloop)")
        loops = ["asyncio"]

    print(f"loopback TCP: 3 x {settings.loopback_seconds} s", flush=True)
    loopback = [loopback_tcp(settings.loopback_seconds) / 1e6 for _ in range(3)]
    result["ceilings"] = {"loopback_tcp_mb_per_s": median(loopback), "loopback_tcp_runs_mb_per_s": loopback}

    targets: list[Target] = []
    with contextlib.ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kbroker-bench-")))
        for loop in loops:
            name = KBROKER if loop == "asyncio" else KBROKER_UVLOOP
            server = KbrokerBroker(BrokerProcess(scratch / name, event_loop=loop).start(), name)
            cleanup.callback(server.close)
            targets.append(Target(name, server))
        mock = MockBroker()
        cleanup.callback(mock.close)
        targets.append(Target(MOCK, mock))
        for target in targets:
            target.open_clients()
            cleanup.callback(target.close_clients)
        result["pids"] = {t.name: t.server.pid for t in targets}
        raw: dict[str, dict[str, list]] = {t.name: {"produce_s": [], "produce_broker_cpu": [], "produce_client_cpu": [],
                                                    "consume_s": [], "latency": []} for t in targets}

        # 1. produce throughput
        print(f"produce: {settings.produce_rounds} rounds x {settings.produce_messages:,} records", flush=True)
        for target in targets:
            produce_run(target, 20_000, value)  # creates the topic, warms connections and caches
        client_alone = []
        for round_index in range(settings.produce_rounds):
            # the client's own ceiling, measured in every round too, so it sees the same machine
            client_alone.append(client_produce_ceiling(settings.produce_messages, value))
            for target in rotated(targets, round_index):
                cpu_before, client_before = _cpu(target), time.process_time()
                elapsed = produce_run(target, settings.produce_messages, value)
                figures = raw[target.name]
                figures["produce_s"].append(elapsed)
                figures["produce_client_cpu"].append(100 * (time.process_time() - client_before) / elapsed)
                if cpu_before is not None:
                    figures["produce_broker_cpu"].append(100 * (_cpu(target) - cpu_before) / elapsed)
        result["ceilings"].update(client_produce_calls_per_s=median(client_alone),
                                  client_produce_calls_rounds=client_alone)
        load.sample("after produce")

        # 2. consume throughput over the newest WINDOW records
        print(f"consume: {settings.consume_rounds} rounds x {settings.consume_passes} passes "
              f"x {WINDOW:,} records", flush=True)
        windows = {}
        for target in targets:
            low, high = watermarks(target)
            if high - low < WINDOW:
                raise RuntimeError(f"{target.name} holds only {high - low} records, fewer than {WINDOW}")
            windows[target.name] = (high - WINDOW, high)
            result.setdefault("consume_windows", {})[target.name] = {"log_start": low, "high_watermark": high}
            consume_pass(target, *windows[target.name])  # warm-up pass
        for round_index in range(settings.consume_rounds):
            for target in rotated(targets, round_index):
                elapsed = sum(consume_pass(target, *windows[target.name]) for _ in range(settings.consume_passes))
                raw[target.name]["consume_s"].append(elapsed / settings.consume_passes)
        load.sample("after consume")

        # 3. produce-ack latency at a fixed rate, for each linger.ms
        print(f"latency: {settings.latency_rounds} rounds x {settings.latency_seconds} s at {LATENCY_RATE:,} msgs/s, "
              f"linger.ms in {LATENCY_LINGERS_MS}", flush=True)
        for round_index in range(settings.latency_rounds):
            for linger in LATENCY_LINGERS_MS:
                for target in rotated(targets, round_index):
                    raw[target.name]["latency"].append(latency_round(
                        target, settings.latency_seconds, settings.latency_warmup, value, linger_ms=linger))
        load.sample("after latency")

        result.update(summarize(settings, raw))

        # 4. profile every kbroker variant that missed a target
        profiles: dict[str, dict[str, Any]] = {}
        for target in targets:
            if target.name == MOCK:
                continue
            missed = [k for k, v in result["targets"][target.name].items() if not v["met"]]
            if not (missed or force_profile):
                continue
            print(f"profiling {target.name} with py-spy, {settings.profile_seconds} s per workload "
                  f"(missed: {', '.join(missed) or 'none'})", flush=True)
            profiles[target.name] = {"produce": profile_produce(target, settings.profile_seconds, value)}
            if settings.profile_latency and ("latency_p99" in missed or force_profile):
                profiles[target.name]["latency"] = profile_latency(target, settings.profile_seconds, value)
        result["profiles"] = profiles
        load.sample("end")

    result["load"] = load.samples
    return result


def summarize(settings: Settings, raw: dict[str, dict[str, list]]) -> dict[str, Any]:
    mb = VALUE_SIZE / 1e6
    brokers: dict[str, dict[str, Any]] = {}
    for name, figures in raw.items():
        produce_rates = [settings.produce_messages / s for s in figures["produce_s"]]
        consume_rates = [WINDOW / s for s in figures["consume_s"]]
        summary = {
            "produce_msgs_per_s": median(produce_rates),
            "produce_mb_per_s": median(produce_rates) * mb,
            "produce_rounds_msgs_per_s": produce_rates,
            "produce_broker_cpu_percent": median(figures["produce_broker_cpu"]) if figures["produce_broker_cpu"]
            else None,
            "produce_client_process_cpu_percent": median(figures["produce_client_cpu"]),
            "consume_msgs_per_s": median(consume_rates),
            "consume_mb_per_s": median(consume_rates) * mb,
            "consume_rounds_msgs_per_s": consume_rates,
            "latency_rounds": figures["latency"],
        }
        for linger in LATENCY_LINGERS_MS:
            rounds = [r for r in figures["latency"] if r["linger_ms"] == linger]
            summary[f"latency_linger{linger}_p50_ms"] = median([r["p50_ms"] for r in rounds])
            summary[f"latency_linger{linger}_p99_ms"] = median([r["p99_ms"] for r in rounds])
            summary[f"latency_linger{linger}_p99_worst_round_ms"] = max(r["p99_ms"] for r in rounds)
            summary[f"latency_linger{linger}_unacknowledged"] = sum(r["unacknowledged"] for r in rounds)
            cpu = [r["broker_cpu_percent"] for r in rounds if r["broker_cpu_percent"] is not None]
            summary[f"latency_linger{linger}_broker_cpu_percent"] = median(cpu) if cpu else None
            for key in ("records_per_request", "requests_per_s", "broker_cpu_us_per_request", "rtt_p50_ms"):
                known = [r[key] for r in rounds if r[key] is not None]
                summary[f"latency_linger{linger}_{key}"] = median(known) if known else None
        brokers[name] = summary
    mock = brokers[MOCK]
    judged = f"latency_linger{LATENCY_LINGERS_MS[0]}_p99_ms"
    verdicts: dict[str, dict[str, Any]] = {}
    for name, figures in brokers.items():
        p99 = figures[judged]
        latency_verdict = {"value": p99, "target": TARGET_P99_MS, "met": p99 <= TARGET_P99_MS,
                           "margin_ms": TARGET_P99_MS - p99, "linger_ms": LATENCY_LINGERS_MS[0]}
        if name == MOCK:
            verdicts[name] = {"latency_p99": latency_verdict}  # for reference: can the machine do it at all?
            continue
        produce_ratio = figures["produce_msgs_per_s"] / mock["produce_msgs_per_s"]
        consume_ratio = figures["consume_msgs_per_s"] / mock["consume_msgs_per_s"]
        figures["produce_ratio"] = produce_ratio
        figures["consume_ratio"] = consume_ratio
        # paired ratios, round r of this broker against round r of the mock: their spread shows the noise
        figures["produce_round_ratios"] = [a / b for a, b in zip(figures["produce_rounds_msgs_per_s"],
                                                                  mock["produce_rounds_msgs_per_s"], strict=True)]
        figures["consume_round_ratios"] = [a / b for a, b in zip(figures["consume_rounds_msgs_per_s"],
                                                                  mock["consume_rounds_msgs_per_s"], strict=True)]
        verdicts[name] = {
            "produce": {"value": produce_ratio, "target": TARGET_PRODUCE_RATIO, "floor": FLOOR_PRODUCE_RATIO,
                        "met": produce_ratio >= TARGET_PRODUCE_RATIO,
                        "floor_met": produce_ratio >= FLOOR_PRODUCE_RATIO,
                        "margin_percent": 100 * (produce_ratio / TARGET_PRODUCE_RATIO - 1)},
            "consume": {"value": consume_ratio, "target": TARGET_CONSUME_RATIO,
                        "met": consume_ratio >= TARGET_CONSUME_RATIO,
                        "margin_percent": 100 * (consume_ratio / TARGET_CONSUME_RATIO - 1)},
            "latency_p99": latency_verdict,
        }
    return {"brokers": brokers, "targets": verdicts}


# --- report ----------------------------------------------------------------------------


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def table(result: dict[str, Any]) -> list[str]:
    """The results as a Markdown table, one column per broker, then kbroker / mock ratios."""
    brokers = result["brokers"]
    names = [n for n in (KBROKER, KBROKER_UVLOOP) if n in brokers]
    lines = ["| Measure | " + " | ".join([*names, MOCK]) + " | " + " | ".join(f"{n} / mock" for n in names) + " |",
             "|---" + "|---:" * (2 * len(names) + 1) + "|"]

    def row(label: str, key: str, digits: int, ratio: bool = False, mock_cell: str | None = None) -> None:
        cells = [_n(brokers[n][key], digits) for n in names]
        cells.append(mock_cell if mock_cell is not None else _n(brokers[MOCK][key], digits))
        ratios = [f"{brokers[n][key] / brokers[MOCK][key]:.2f}x" if ratio else "" for n in names]
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")

    row("produce msgs/s (acks=1, linger.ms=5)", "produce_msgs_per_s", 0, ratio=True)
    row("produce MB/s (values)", "produce_mb_per_s", 1, ratio=True)
    row("consume msgs/s (newest 30,000 records)", "consume_msgs_per_s", 0, ratio=True)
    row("consume MB/s (values)", "consume_mb_per_s", 1, ratio=True)
    for linger in LATENCY_LINGERS_MS:
        label = f"latency at {LATENCY_RATE:,} msgs/s, linger.ms={linger}"
        row(f"{label}: p50 ms", f"latency_linger{linger}_p50_ms", 2)
        row(f"{label}: p99 ms", f"latency_linger{linger}_p99_ms", 2)
        row(f"{label}: p99 ms, worst round", f"latency_linger{linger}_p99_worst_round_ms", 2)
    first = LATENCY_LINGERS_MS[0]
    row(f"records per ProduceRequest, latency linger.ms={first}", f"latency_linger{first}_records_per_request", 1)
    row(f"ProduceRequests per second, latency linger.ms={first}", f"latency_linger{first}_requests_per_s", 0)
    row(f"broker CPU µs per ProduceRequest, latency linger.ms={first}",
        f"latency_linger{first}_broker_cpu_us_per_request", 0, mock_cell="in client")
    row(f"client-measured round trip p50 ms, latency linger.ms={first}", f"latency_linger{first}_rtt_p50_ms", 2)
    row("broker CPU % of one core, produce", "produce_broker_cpu_percent", 0, mock_cell="in client")
    row(f"broker CPU % of one core, latency linger.ms={first}", f"latency_linger{first}_broker_cpu_percent", 0,
        mock_cell="in client")
    row("client process CPU %, produce (mock: with the mock)", "produce_client_process_cpu_percent", 0)
    return lines


def verdict_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for name, verdict in result["targets"].items():
        p99 = verdict["latency_p99"]
        latency = (f"{name}: p99 latency at {LATENCY_RATE:,} msgs/s, linger.ms={p99['linger_ms']}: "
                   f"{p99['value']:.2f} ms (target <= {TARGET_P99_MS:g} ms): {'met' if p99['met'] else 'MISSED'}, "
                   f"margin {p99['margin_ms']:+.2f} ms")
        if name == MOCK:
            lines.append(f"{latency} (reference: the target applied to the mock itself)")
            continue
        produce, consume = verdict["produce"], verdict["consume"]
        produce_state = "met" if produce["met"] else ("MISSED the target, above the floor" if produce["floor_met"]
                                                      else "MISSED (below the floor too)")
        lines.append(f"{name}: produce {produce['value']:.2f}x mock (target >= {TARGET_PRODUCE_RATIO:g}x, floor "
                     f"{FLOOR_PRODUCE_RATIO:g}x): {produce_state}, {produce['margin_percent']:+.0f}%")
        lines.append(f"{name}: consume {consume['value']:.2f}x mock (target >= {TARGET_CONSUME_RATIO:g}x): "
                     f"{'met' if consume['met'] else 'MISSED'}, {consume['margin_percent']:+.0f}%")
        lines.append(latency)
    return lines


def profile_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for name, workloads in result.get("profiles", {}).items():
        for profile in workloads.values():
            lines.append("")
            if "error" in profile:
                lines.append(f"profile of {name}: {profile['error']}")
                continue
            during = (f"{_n(profile['produce_msgs_per_s'])} msgs/s" if "produce_msgs_per_s" in profile else
                      f"p50 {profile['latency_p50_ms']:.1f} ms, p99 {profile['latency_p99_ms']:.1f} ms")
            lines.append(f"py-spy on {name}, {profile['workload']} ({profile['seconds']} s at {profile['rate_hz']} Hz, "
                         f"{profile['samples']} samples; broker CPU {profile['broker_cpu_percent']:.0f}% of one core; "
                         f"{during} while sampled)")
            lines.append("  self:")
            lines += [f"    {e['percent']:5.1f}%  {e['function']}" + (f"  [{e['note']}]" if e["note"] else "")
                      for e in profile["self"]]
            lines.append("  inclusive (below the event loop):")
            lines += [f"    {e['percent']:5.1f}%  {e['function']}" for e in profile["inclusive"]]
    return lines


def report(result: dict[str, Any]) -> str:
    ceilings = result["ceilings"]
    lines = ["", *table(result), "",
             f"loopback TCP, one socket pair: {ceilings['loopback_tcp_mb_per_s']:,.0f} MB/s",
             f"client alone, produce() calls/s with nothing listening: {ceilings['client_produce_calls_per_s']:,.0f}",
             "(the mock broker's figures are the client's ceiling in practice)", "",
             *verdict_lines(result), *profile_lines(result), "",
             "load average (1 min) at phase ends: " + ", ".join(f"{s['at']} {s['load1']:.2f}" for s in result["load"]),
             *result["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds (about 30-60 s)")
    parser.add_argument("--output", type=Path, help="write every figure as JSON here")
    parser.add_argument("--profile", action="store_true", help="profile kbroker with py-spy even if targets are met")
    parser.add_argument("--no-uvloop", action="store_true", help="skip the uvloop variant")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL

    def watchdog(signum, frame):
        raise BenchTimeout(f"the run exceeded {settings.watchdog_seconds} s")

    previous = signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(settings.watchdog_seconds)
    started = time.monotonic()
    try:
        result = run(settings, use_uvloop=not args.no_uvloop, force_profile=args.profile)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    result.update(
        command="python -m " + " ".join(shlex.quote(a) for a in ["bench.broker_throughput", *(argv or sys.argv[1:])]),
        date=datetime.date.today().isoformat(), seconds=round(time.monotonic() - started, 1),
        settings=dataclasses.asdict(settings), value_size=VALUE_SIZE, window=WINDOW, latency_rate=LATENCY_RATE,
        latency_lingers_ms=LATENCY_LINGERS_MS, produce_linger_ms=PRODUCE_LINGER_MS)
    print(report(result))
    print(f"\nrun took {result['seconds']} s")
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
