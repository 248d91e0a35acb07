"""Fault injection's cost on the hot path when no fault fires (kbroker.faults, docs/testing.md).

With no fault and no recording, `broker.faults` is None and dispatch pays one attribute check per request.
A fault set for another API (DeleteTopics, never sent here) sends every request through `Faults.intercept`,
the most a test pays for faults it is not exercising. Two measurements, each interleaved round by round
(none, idle fault, idle fault, none, ...), medians over rounds:

- dispatch: CPU µs per request through kbroker.apis.dispatch, in process (ApiVersions: the cheapest request,
  so the largest relative cost; Produce acks=1 of one 100 B record);
- produce: msgs/s of confluent-kafka (acks=1, linger.ms=0: many small requests) against a `kbroker serve`
  whose faults are switched over its HTTP endpoint (kbroker.faults.port) between rounds.

The "peer" column is the same broker with no fault at all: a ratio near 1.0 means the idle fault costs nothing.
On a shared machine the throughput rounds vary by several per cent either way; the medians are what to read.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.harness import Context, Result, interleave
from bench.suites._common import kbroker_process, produce_rate
from kbroker.broker import Broker
from kbroker.commands.faults import call
from kbroker.config import build
from kbroker.faults import Faults
from kbroker.testing import free_port
from wire import headers, messages
from wire.records import Record, build_batch

SUITE = "faults_overhead"
TIME_BUDGET = (60, 600)
MODES = ("no faults", "idle fault")
IDLE_FAULT = {"api": "DeleteTopics", "error": "NOT_CONTROLLER"}
BASELINE = "no faults (broker.faults None)"


def run(ctx: Context) -> list[Result]:
    return [*_dispatch_cost(ctx), *_produce_throughput(ctx)]


# --- per request, in process ------------------------------------------------------------------------------


def _frame(api_key: int, version: int, request) -> bytes:
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                    client_id="bench")
    body = bytes(messages.encode(request, version, headers.encode_request_header(header)))
    return len(body).to_bytes(4, "big") + body


def _requests() -> dict[str, bytes]:
    versions = messages.ApiVersionsRequest(client_software_name="bench", client_software_version="1")
    produce = messages.ProduceRequest
    batch = build_batch([Record(0, int(time.time() * 1000), None, b"x" * 100, ())])
    records = produce(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[produce.TopicProduceData(
        name="bench", partition_data=[produce.PartitionProduceData(index=0, records=batch)])])
    return {"ApiVersions v3": _frame(18, 3, versions), "Produce v9 acks=1 100 B": _frame(0, 9, records)}


def _dispatch_cost(ctx: Context) -> list[Result]:
    from kbroker.apis.dispatch import dispatch

    per_round, rounds = (200, 4) if ctx.quick else (500, max(ctx.rounds, 40))  # many short rounds: less noise
    results = []
    with tempfile.TemporaryDirectory(dir=ctx.work_dir) as data:
        broker = Broker(build({"log.dirs": data, "listeners": "PLAINTEXT://127.0.0.1:0"}))
        broker.create_topic("bench", 1)
        faults = Faults(broker)
        loop = asyncio.new_event_loop()
        try:
            for name, frame in _requests().items():
                async def timed(count: int, frame: bytes = frame) -> float:
                    started = time.process_time()
                    for _ in range(count):
                        await dispatch(broker, frame, 4)
                    return (time.process_time() - started) / count * 1e6

                def measure(mode: str, count: int = per_round, timed=timed) -> float:
                    fault = faults.inject(**IDLE_FAULT) if mode == "idle fault" else None
                    try:
                        return loop.run_until_complete(timed(count))
                    finally:
                        if fault is not None:
                            fault.remove()

                measure("no faults", per_round // 3)  # warm the codecs and the log
                figures = interleave(MODES, rounds, measure, ctx=ctx)
                none, idle = statistics.median(figures["no faults"]), statistics.median(figures["idle fault"])
                ctx.log(f"dispatch {name}: {none:.2f} µs without faults, {idle:.2f} µs with an idle fault")
                results.append(Result(SUITE, f"dispatch {name}, an idle fault set", "CPU µs/request", idle, none,
                                      BASELINE, higher_is_better=False, target="<= 1.1x no faults",
                                      target_ratio=1.1, params={"rounds": rounds, "requests_per_round": per_round,
                                                                "no_faults": figures["no faults"],
                                                                "idle_fault": figures["idle fault"]}))
        finally:
            loop.close()
            broker.logs.close()
    return results


# --- throughput, over the network ------------------------------------------------------------------------------


def _produce_throughput(ctx: Context) -> list[Result]:
    count, rounds = (5_000, 2) if ctx.quick else (30_000, max(ctx.rounds, 20))
    endpoint_port = free_port()
    broker = kbroker_process(ctx, "faults-overhead", f"kbroker.faults.port={endpoint_port}",
                             "num.partitions=1").start()
    endpoint = f"127.0.0.1:{endpoint_port}"
    try:
        produce_rate(broker.bootstrap, [("bench", 0)], count // 5, **{"linger.ms": 0})  # creates the topic, warms up

        def measure(mode: str) -> float:
            call(endpoint, "DELETE", "/faults")
            if mode == "idle fault":
                call(endpoint, "POST", "/faults", IDLE_FAULT)
            rate, errors = produce_rate(broker.bootstrap, [("bench", 0)], count, **{"linger.ms": 0})
            if errors:
                raise RuntimeError(f"{errors} delivery errors")
            return rate

        figures = interleave(MODES, rounds, measure, ctx=ctx)
        call(endpoint, "DELETE", "/faults")
    finally:
        broker.stop()
    none, idle = statistics.median(figures["no faults"]), statistics.median(figures["idle fault"])
    ctx.log(f"produce: {none:,.0f} msgs/s without faults, {idle:,.0f} msgs/s with an idle fault")
    return [Result(SUITE, "produce 100 B acks=1 linger.ms=0 (confluent-kafka), an idle fault set", "msgs/s", idle,
                   none, BASELINE, target=">= 0.95x no faults", target_ratio=0.95,
                   params={"rounds": rounds, "count": count, "no_faults": figures["no faults"],
                           "idle_fault": figures["idle fault"]})]


if __name__ == "__main__":  # pragma: no cover - `python -m bench faults_overhead` is the way to run it
    print(run(Context(quick=True, work_dir=Path(tempfile.mkdtemp()))))
