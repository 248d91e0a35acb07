"""Latency at fixed rates, free of coordinated omission: produce-ack and end-to-end percentiles.

Rates: 1,000, 10,000 and 50,000 msgs/s (quick: 10,000). 100-byte values to one partition,
confluent-kafka with acks=1 and linger.ms=0 and 1 (quick: 1). librdkafka's default linger.ms=5
makes the client itself hold a record up to 5 ms, which would hide the broker. linger.ms=0 sends
one ProduceRequest per record (about 9,000 requests/s at 10,000 msgs/s), a request-rate test;
linger.ms=1 lets the client group what arrives within a millisecond (about 12 records a request
at 10,000 msgs/s), the setting a latency-minded user picks, and the one the target is judged on.
Produce-ack latency comes from
runs with no consumer; end-to-end latency from separate runs in which a consumer in a second
thread, with the client's defaults (it long-polls: fetch.wait.max.ms=500), reads the records back.

Record i is due at t0 + i / rate and carries that scheduled time in its payload. Produce-ack
latency runs from the scheduled time to the delivery callback, end-to-end latency from the
scheduled time to the consumer handing the record over. A stalled client or broker is thus
charged for every record it delayed, and a record never acknowledged or read counts with the
time it had waited when the run gave up. A run is 1 s of warm-up (not counted) and 5 s
measured (quick: 0.3 s and 1.5 s), then up to 5 s (quick 2 s) for the last acks and reads.
Brokers alternate round by round; each percentile is the median over rounds.

Target: end-to-end p99 at 10,000 msgs/s <= 5 ms.
"""

from __future__ import annotations

from typing import Any

from bench.harness import Context, Result, interleave, median
from bench.load import latency_run
from bench.peers import Broker, kbroker, peers

SUITE = "latency"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
TIME_BUDGET = (90, 900)
RATES = (1_000, 10_000, 50_000)
QUICK_RATES = (10_000,)
LINGERS_MS = (0, 1)
QUICK_LINGERS_MS = (1,)
JUDGED_LINGER_MS = 1
PERCENTILES = (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms"))
KINDS = (("e2e", "end-to-end"), ("ack", "produce-ack"))
TARGET_RATE, TARGET_P99_MS = 10_000, 5.0
MOCK_FETCH_NOTE = ("librdkafka's mock answers a waiting fetch only when fetch.wait.max.ms expires (no wake-up when "
                   "a record arrives) and returns one batch per partition per fetch, so its end-to-end figures show "
                   "those shortcuts, not what a broker can do; judge kbroker's end-to-end figures by the target")


def run(ctx: Context) -> list[Result]:
    seconds, warmup, drain = (1.5, 0.3, 2.0) if ctx.quick else (5.0, 1.0, 5.0)
    rates = QUICK_RATES if ctx.quick else RATES
    lingers = QUICK_LINGERS_MS if ctx.quick else LINGERS_MS
    results: list[Result] = []
    with kbroker(ctx) as broker, peers(ctx) as others:
        targets: list[Broker] = [broker, *others]
        if any(other.kind == "mock" for other in others):
            ctx.notes.append(MOCK_FETCH_NOTE)
        for linger in lingers:
            for rate in rates:
                for kind, kind_label in KINDS:
                    results += _measure(ctx, targets, broker, others, rate, kind, kind_label, linger,
                                        (seconds, warmup, drain))
    return results


def _measure(ctx: Context, targets: list[Broker], broker: Broker, others: list[Broker], rate: int, kind: str,
             kind_label: str, linger: int, timing: tuple[float, float, float]) -> list[Result]:
    seconds, warmup, drain = timing
    shape = f"{kind_label} at {rate:,} msgs/s, linger.ms={linger}"
    if ctx.time_left() < (seconds + warmup + drain) * len(targets):
        ctx.notes.append(f"time budget spent: {shape} not run")
        return []
    ctx.log(f"{shape} latency")
    topics = {t.name: f"bench-latency-{kind}-{rate}-{linger}" for t in targets}
    for target in targets:
        target.create_topic(topics[target.name], 1)

    def one(target: Broker) -> dict[str, Any]:
        figures = latency_run(target, topics[target.name], rate, seconds, warmup, drain,
                              read_back=kind == "e2e", linger_ms=linger)
        return {**figures[kind], "broker_cpu_percent": figures["broker_cpu_percent"],
                "send_behind_ms": figures["send_behind_ms"]}

    try:
        rounds = interleave(targets, ctx.rounds, one, key=lambda t: t.name, ctx=ctx)
    finally:
        for target in targets:
            target.delete_topic(topics[target.name])
    return compare(rate, kind, kind_label, linger, rounds, broker, others)


def compare(rate: int, kind: str, kind_label: str, linger: int, rounds: dict[str, list[dict[str, Any]]], broker: Broker,
            others: list[Broker]) -> list[Result]:
    mine = rounds[broker.name]
    missing = sum(r["missing"] for r in mine)
    lost = f"kbroker: {missing:,} records never {'read' if kind == 'e2e' else 'acknowledged'}" if missing else ""
    results = []
    for other in others:
        theirs = rounds[other.name]
        note = lost
        if kind == "e2e" and other.kind == "mock":
            note = "; ".join(x for x in (lost, "mock: see the note below") if x)
        for label, key in PERCENTILES:
            judged = kind == "e2e" and label == "p99" and rate == TARGET_RATE and linger == JUDGED_LINGER_MS
            results.append(Result(
                SUITE, f"{kind_label} latency at {rate:,} msgs/s, linger.ms={linger}", f"{label} ms",
                median([r[key] for r in mine]), median([r[key] for r in theirs]), other.name,
                higher_is_better=False, target=f"<= {TARGET_P99_MS:g} ms" if judged else None,
                target_value=TARGET_P99_MS if judged else None,
                params={"rate": rate, "kind": kind, "percentile": label, "linger_ms": linger,
                        "kbroker_rounds_ms": [r[key] for r in mine], "peer_rounds_ms": [r[key] for r in theirs],
                        "kbroker_max_ms": max(r["max_ms"] for r in mine),
                        "kbroker_cpu_percent": median([r["broker_cpu_percent"] for r in mine
                                                       if r["broker_cpu_percent"] is not None]),
                        "send_behind_ms": max(r["send_behind_ms"] for r in mine)},
                note=note))
    return results
