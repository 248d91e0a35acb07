"""Console overhead: a broker's produce throughput with the web console open and polling, against none.

Three set-ups, interleaved round by round on fresh topics: a broker with no console; the same broker
with `kbroker console` (a process of its own) polling it; and a broker started with `kbroker serve
--console-port`, whose console runs in a thread of the broker process and polls it from there. "Polling"
is what an open console page costs at most: every second the topics, the topic page, the groups, the
group page and 50 messages are fetched (one page refresh a second, faster than a person clicks), while
the console also samples the group's lag every 5 s. Produce: confluent-kafka, 100-byte values, acks=1,
4 partitions, 5 s (quick 0.6 s) per run; figures are medians over rounds (run it with --rounds 7: the
difference sought is a few per cent); below each, the broker's CPU seconds per million records.
Target: >= 0.95x the throughput with no console.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.harness import Context, Result, median
from bench.load import ProduceRun, produce_for, value_pool
from bench.peers import CLIENT_LOGGING, KbrokerBroker, create_topics, first_writes, kbroker
from kbroker.testing import BrokerProcess, free_port

SUITE = "console_overhead"
TIME_BUDGET = (60, 600)
PARTITIONS, VALUE_SIZE = 4, 100
GROUP = "console-bench"
PAGE_PATHS = ("api/topics", "api/topics/{topic}", "api/groups", f"api/groups/{GROUP}",
              "api/topics/{topic}/messages?partition=0&limit=50")
TARGET_RATIO = 0.95
_topics = itertools.count()


class BrokerWithConsole(BrokerProcess):
    """`kbroker serve --console-port PORT`: the console in a thread of the broker process."""

    def __init__(self, data_dir: Path, console_port: int, event_loop: str) -> None:
        super().__init__(data_dir, event_loop=event_loop)
        self.console_port = console_port

    def start(self, timeout: float = 20) -> BrokerWithConsole:
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve", "--event-loop",
                self.event_loop, "--console-port", str(self.console_port)]
        for override in self.overrides:
            args += ["--override", override]
        self.process = subprocess.Popen(args)
        _wait_listening(self.port, timeout)
        _wait_listening(self.console_port, timeout)
        return self


def _wait_listening(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def separate_console(bootstrap: str) -> Iterator[str]:
    """`kbroker console` in a process of its own; yields its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "console",
                                "--bootstrap-server", bootstrap, "--port", str(port)], stdout=subprocess.DEVNULL)
    try:
        _wait_listening(port, 20)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)


@contextlib.contextmanager
def polling(url: str, topic: str, interval_s: float = 1.0) -> Iterator[list[int]]:
    """A page refreshing every `interval_s`: every endpoint it reads, fetched in turn; yields the pages served."""
    served = [0]
    stop = threading.Event()

    def refresh() -> None:
        while not stop.is_set():
            for path in PAGE_PATHS:
                with contextlib.suppress(OSError), urllib.request.urlopen(url + path.format(topic=topic), timeout=10):
                    pass
            served[0] += 1
            stop.wait(interval_s)

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    try:
        time.sleep(interval_s)  # the first refresh is under way before the clock starts
        yield served
    finally:
        stop.set()
        thread.join(15)


def commit_group_offsets(bootstrap: str, topic: str) -> None:
    """A consumer group with committed offsets on `topic`, so the group and lag pages have work to do."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         **CLIENT_LOGGING})
    consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(PARTITIONS)], asynchronous=False)
    consumer.close()


def produce_once(broker: KbrokerBroker, seconds: float, page_url: str | None) -> ProduceRun:
    topic = f"console-bench-{next(_topics)}"
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    first_writes(broker.bootstrap, {topic: PARTITIONS})
    commit_group_offsets(broker.bootstrap, topic)
    values = value_pool(VALUE_SIZE)
    if page_url is None:
        return produce_for(broker, topic, PARTITIONS, values, seconds, 1 << 30)
    with polling(page_url, topic) as served:
        run = produce_for(broker, topic, PARTITIONS, values, seconds, 1 << 30)
    if not served[0]:
        raise RuntimeError("the console served no page during the run")
    return run


def run(ctx: Context) -> list[Result]:
    seconds = 0.6 if ctx.quick else 5.0
    plain_runs: list[ProduceRun] = []
    beside_runs: list[ProduceRun] = []
    inside_runs: list[ProduceRun] = []
    console_port = free_port()
    inside_dir = ctx.work_dir / "kbroker-console-inside"
    inside_dir.mkdir(parents=True, exist_ok=True)
    inside_process = BrokerWithConsole(inside_dir, console_port, ctx.event_loop).start()
    inside = KbrokerBroker(inside_process, "kbroker serve --console-port")
    try:
        with kbroker(ctx) as plain, separate_console(plain.bootstrap) as beside_url:
            for round_index in range(ctx.rounds):
                ctx.log(f"round {round_index + 1}/{ctx.rounds}")
                plain_runs.append(produce_once(plain, seconds, None))
                beside_runs.append(produce_once(plain, seconds, beside_url))
                inside_runs.append(produce_once(inside, seconds, f"http://127.0.0.1:{console_port}/"))
    finally:
        inside.close()
    baseline = median([r.msgs_per_s for r in plain_runs])
    cpu_plain = median([r.broker_cpu_per_million for r in plain_runs if r.broker_cpu_per_million is not None])
    results = []
    for label, runs in (("`kbroker console` (own process) polling the broker", beside_runs),
                        ("`kbroker serve --console-port` (console thread in the broker) polling", inside_runs)):
        cpu = median([r.broker_cpu_per_million for r in runs if r.broker_cpu_per_million is not None])
        results.append(Result(
            SUITE, f"produce 100 B acks=1 {PARTITIONS} partitions, {label}", "msgs/s",
            median([r.msgs_per_s for r in runs]), baseline, "the broker with no console",
            target=f">= {TARGET_RATIO}x no console", target_ratio=TARGET_RATIO, floor_ratio=0.9,
            params={"seconds": seconds, "rounds": ctx.rounds},
            note=f"broker CPU s per million records: {_fmt(cpu)} with the console, {_fmt(cpu_plain)} without"))
    return results


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
