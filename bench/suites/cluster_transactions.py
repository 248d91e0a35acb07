"""Cluster transactions: three kbroker brokers against three Apache Kafka 3.9 brokers, healthy and through kill -9s.

    python -m bench.suites.cluster_transactions [--quick] [--rounds N] [--no-kafka]

One ZooKeeper (from Kafka 3.9's jars); each cluster on a fresh chroot, run one after the other (kbroker first),
so that neither slows the other's measurements or failovers. Both have the cluster suite's settings
(zookeeper.session.timeout.ms=6000, auto.leader.rebalance.enable=false, __consumer_offsets with 5 partitions
and replication factor 3, group.initial.rebalance.delay.ms=0) plus replica.lag.time.max.ms=3000, and
`__transaction_state` at Kafka's defaults (50 partitions, replication factor 3, min ISR 2). Topics have
replication factor 3 and min.insync.replicas=2. The client is confluent-kafka.

1. Transactional produce: one transactional producer writes transactions of 1,000 records of 100 B,
   round-robin over 6 partitions, for 3 s (quick 1 s) per round, each committed before the next begins
   (bench/suites/transactions.py's loop); records / elapsed, median over rounds.
2. Commit latency: transactions of one record at 100 per second for 5 s (quick 1 s); the time
   commit_transaction() takes, p50 and p99. In a cluster EndTxn is answered once the Prepare record is
   replicated, as in Kafka; the markers follow.
3. Chaos, the long version of tests/cluster/test_transaction_history.py: four transactional producers run
   transactions of 6 records back to back (every third aborted) on a topic of 3 partitions, a read_committed
   consumer reads all along, and the nemesis of compat-tests/transaction_history.py kills, in turn, a
   transactional id's coordinator, a partition leader and the controller: 12 kills (quick: 1), each restarted
   once the producers have committed twice without it and waited for back in every ISR. The checker then reads
   the whole topic and counts violations of the transactional promise (a committed transaction not read once
   and in order, an aborted one's record read, an unknown one's read in part, a record the live reader saw
   gone). Figures: violations (target 0), transactions committed per second over the whole run (kills
   included), and the stall after a kill (from the kill until every producer has committed twice after it;
   it includes ZooKeeper's expiry of the dead broker's session), median and maximum.

Targets: no violation; transactional produce at least Kafka's (1x); commit p99 no worse than Kafka's.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench import kafka
from bench.harness import Context, Result, median, percentile
from bench.kafka import transaction_history  # compat-tests/transaction_history.py
from bench.load import value_pool
from bench.peers import CLIENT_LOGGING
from bench.suites._common import run_alone, run_part
from bench.suites.cluster import KAFKA_VERSION, Cluster, kafka_cluster, kbroker_cluster, started
from bench.suites.transactions import (
    COMMITS_PER_S,
    RECORDS_PER_TRANSACTION,
    VALUE_SIZE,
    commit_latencies,
    produce_transactions,
    transactional_producer,
)

SUITE = "cluster_transactions"
TIME_BUDGET = (240, 1800)
PRODUCE_PARTITIONS = 6
CHAOS_TOPIC, CHAOS_PARTITIONS = "chaos", 3
STATE_PARTITIONS = 50  # Kafka's default transaction.state.log.num.partitions
WRITERS = 4
OVERRIDES = {"replica.lag.time.max.ms": "3000"}
REPLICATED = {"min.insync.replicas": "2"}


def _shape(ctx: Context) -> dict[str, Any]:
    return {"produce_s": 1.0, "latency_s": 1.0, "kills": 1} if ctx.quick else \
        {"produce_s": 3.0, "latency_s": 5.0, "kills": 12}


def measure(ctx: Context, cluster: Cluster, shape: dict[str, Any]) -> dict[str, Any]:
    """The three parts' figures on one cluster."""
    figures: dict[str, Any] = {}
    with cluster.scratch_topic("txn", PRODUCE_PARTITIONS, REPLICATED) as topic:
        ctx.log(f"{cluster.name}: transactional produce")
        producer = transactional_producer(cluster)
        runs = [produce_transactions(producer, topic, PRODUCE_PARTITIONS, value_pool(VALUE_SIZE), shape["produce_s"])
                for _ in range(ctx.rounds)]
        producer.flush(10)
        figures["produce"] = [r.msgs_per_s for r in runs]
    with cluster.scratch_topic("txn-latency", 1, REPLICATED) as topic:
        ctx.log(f"{cluster.name}: commit latency")
        figures["latency"] = sorted(commit_latencies(cluster, topic, shape["latency_s"]))
    try:
        figures["chaos"] = chaos(ctx, cluster, shape["kills"])
    except Exception as error:  # the figures above still count; the failure is reported as a result
        if ctx.quick:
            raise
        figures["chaos_error"] = repr(error)
    return figures


def chaos(ctx: Context, cluster: Cluster, kills: int) -> tuple[transaction_history.History,
                                                               transaction_history.Verdict]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **CLIENT_LOGGING})
    admin.create_topics([NewTopic(CHAOS_TOPIC, CHAOS_PARTITIONS, 3, config=REPLICATED)])[CHAOS_TOPIC].result(60)
    ids = [f"chaos-{i}-{uuid.uuid4().hex[:6]}" for i in range(WRITERS)]
    ctx.log(f"{cluster.name}: {kills} kills under {WRITERS} transactional producers")
    return transaction_history.run_history(cluster.nodes, CHAOS_TOPIC, CHAOS_PARTITIONS, STATE_PARTITIONS, ids,
                                           kills)


def _results(figures: dict[str, dict[str, Any]], names: dict[str, str]) -> list[Result]:
    mine = figures["kbroker"]
    other = next((kind for kind in figures if kind != "kbroker"), None)
    theirs, their_name = (figures[other], names[other]) if other else ({}, None)
    label = f"{VALUE_SIZE} B, {RECORDS_PER_TRANSACTION:,} records per transaction, {PRODUCE_PARTITIONS} partitions, " \
            "replication factor 3"
    results = [
        Result(SUITE, f"transactional produce, {label}", "msgs/s", median(mine["produce"]),
               median(theirs["produce"]) if theirs else None, their_name, target=">= 1x Kafka", target_ratio=1.0,
               params={"rounds_kbroker": mine["produce"], "rounds_peer": theirs.get("produce")}),
    ]
    for q, name in ((0.50, "p50"), (0.99, "p99")):
        results.append(Result(
            SUITE, f"commit latency at {COMMITS_PER_S} transactions/s, replication factor 3, {name}", "ms",
            percentile(mine["latency"], q), percentile(theirs["latency"], q) if theirs else None, their_name,
            higher_is_better=False, **({"target": "<= 1x Kafka", "target_ratio": 1.0} if name == "p99" else {})))
    chaos_runs = {kind: found["chaos"] for kind, found in figures.items() if "chaos" in found}
    for kind, found in figures.items():
        if "chaos" not in found:
            results.append(Result(SUITE, f"chaos, {names[kind]}", "-", None, note=f"failed: {found['chaos_error']}"))
    if "kbroker" not in chaos_runs:
        return results
    kills = len(chaos_runs["kbroker"][0].nemesis.kills)
    shape = f"{kills} kills of a coordinator, a leader, the controller in turn"
    rows = [("violations of the transactional promise", "count", _violations, False),
            ("transactions committed per second through the kills", "txn/s", _committed_per_s, True),
            ("stall after a kill, median", "s", lambda run: median(_stalls(run)), False),
            ("stall after a kill, max", "s", lambda run: max(_stalls(run)), False)]
    peer_run = chaos_runs.get(other) if other else None
    for name, metric, figure, higher in rows:
        targets = {"target": "0", "target_value": 0} if metric == "count" else {}
        results.append(Result(SUITE, f"{name}, {shape}", metric, figure(chaos_runs["kbroker"]),
                              figure(peer_run) if peer_run else None, their_name if peer_run else None,
                              higher_is_better=higher, params=_chaos_params(chaos_runs, names) if metric == "count"
                              else {}, **targets))
    return results


def _violations(run: tuple[transaction_history.History, transaction_history.Verdict]) -> int:
    return len(run[1].violations)


def _committed_per_s(run: tuple[transaction_history.History, transaction_history.Verdict]) -> float:
    return run[1].outcomes["committed"] / run[0].seconds


def _stalls(run: tuple[transaction_history.History, transaction_history.Verdict]) -> list[float]:
    return [k.stall_s for k in run[0].nemesis.kills]


def _chaos_params(runs: dict[str, tuple[transaction_history.History, transaction_history.Verdict]],
                  names: dict[str, str]) -> dict[str, Any]:
    """Per cluster: outcomes, records read, each kill (role, broker, stall s, back in every ISR s), violations."""
    return {names[kind]: {"outcomes": dict(verdict.outcomes), "records_read": verdict.records_read,
                          "live_records": verdict.live_records, "seconds": round(history.seconds, 1),
                          "kills": [(k.role, k.broker_id, round(k.stall_s, 2), round(k.restored_s, 2))
                                    for k in history.nemesis.kills],
                          "first_violations": verdict.violations[:5]}
            for kind, (history, verdict) in runs.items()}


def run(ctx: Context) -> list[Result]:
    zookeeper_problem = kafka.unavailable(KAFKA_VERSION)
    if zookeeper_problem:
        ctx.notes.append(f"{SUITE}: no ZooKeeper (it comes with Kafka {KAFKA_VERSION}'s jars): {zookeeper_problem}")
        return [Result(SUITE, "cluster transactions", "-", None, note="not run: no ZooKeeper")]
    shape = _shape(ctx)
    figures: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    with kafka.kafka_process.ZooKeeperProcess(ctx.work_dir).started() as zookeeper:
        makers = {"kbroker": lambda: kbroker_cluster(ctx, zookeeper.connect, extra=OVERRIDES)}
        if ctx.kafka is not None:
            makers["kafka"] = lambda: kafka_cluster(ctx, zookeeper.connect, extra=OVERRIDES)
        else:
            ctx.notes.append(f"{SUITE}: kbroker alone (--no-kafka)")
        for kind, make in makers.items():
            with contextlib.ExitStack() as stack:
                cluster = stack.enter_context(started(make()))
                names[kind] = cluster.name
                figures[kind] = measure(ctx, cluster, shape)
    if "kbroker" not in figures:
        return [Result(SUITE, "cluster transactions", "-", None, note="kbroker's cluster did not run")]
    return run_part(ctx, SUITE, "results", lambda: _results(figures, names))


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
