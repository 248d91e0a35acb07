"""Cluster mode: three kbroker brokers over ZooKeeper against three Apache Kafka 3.9 brokers in ZooKeeper mode.

    python -m bench.suites.cluster [--quick] [--rounds N] [--no-kafka]

One ZooKeeper (the one Kafka 3.9 depends on, from Maven's jars) serves every cluster of the suite,
each cluster on a fresh chroot (`/bench-<uuid>`). Both clusters run on this machine at the same time,
three processes each, all on 127.0.0.1: kbroker as three `kbroker serve` subprocesses (broker.id 1-3),
Kafka as three JVMs (kafka-server-start.sh's 1 GiB heap). They get the same settings where both have
them: zookeeper.session.timeout.ms=6000, auto.leader.rebalance.enable=false, __consumer_offsets with
5 partitions and replication factor 3, group.initial.rebalance.delay.ms=0; everything else is each
broker's default. A cluster counts as formed when every broker id is in /brokers/ids and every broker's
Metadata names a controller and all three brokers; a topic is used once every broker's Metadata shows
a leader and a full ISR for each partition, and each partition has taken one acks=all record. The
client is confluent-kafka for everything. First each cluster's CPU with no load is read for 10 s (quick:
3 s; the three brokers together, in % of one core), since the other cluster keeps running while one is
measured. Before parts 1 and 3 each cluster takes 10 s (quick: 2 s) of that part's load, not measured
(the JVM compiles Kafka's hot paths in its first seconds, and Kafka runs interpreted and CPU-bound
until then). Measurements alternate between the clusters round by round (kbroker first in odd rounds,
Kafka first in even ones); figures are medians over rounds (quick: 1).

1. Produce throughput, replicated: a fresh topic per measurement with 6 partitions, replication factor
   3 and min.insync.replicas=2, written round-robin by one producer (acks=all, linger.ms=5, no
   compression) with 100-byte and 1 KiB values for 10 s or 1 GiB (quick: 2.5 s or 48 MiB), timed from
   the first produce() to the last acknowledgement. msgs/s and MB/s of values.
2. Broker CPU per million replicated records, from the same runs: the user + system CPU seconds
   (/proc/<pid>/stat) of the three broker processes together, between the first produce() and the last
   acknowledgement, per million records produced (each written by the leader and fetched and written by
   two followers).
3. End-to-end latency at a fixed rate: 10,000 msgs/s (quick: 500) of 100-byte values into one
   partition (replication factor 3, min.insync.replicas=2), acks=all, linger.ms=1, for 5 s after 1 s of
   warm-up (quick: 1.5 s after 0.3 s); a consumer in a second thread reads them back. Record i is due at
   t0 + i / rate and carries that time; its latency runs from then to the consumer handing it over
   (bench.load.latency_run: no coordinated omission). p50 and p99, and the same for the produce-ack
   latency (scheduled time to the delivery callback) of the same records. A record not read (or not
   acknowledged) 5 s (quick: 2 s) after the last was sent counts with the time it had waited by then.
4. Failover, both with zookeeper.session.timeout.ms=6000. (a) Leader kill: a topic of 3 partitions
   (replication factor 3, min.insync.replicas=2); a producer (acks=all, linger.ms=0,
   retry.backoff.ms=20, retry.backoff.max.ms=100, and topic.metadata.refresh.interval.ms=100, since
   librdkafka otherwise looks for a lost leader only on its once-a-second topic scan) has had a record
   acknowledged by the leader of a partition whose leader is not the controller; that leader gets
   kill -9, and from then on the producer sends a record every 10 ms to that partition. The figure is the
   time from the kill to the first acknowledgement of a record sent after it (so acknowledged by the new
   leader, with the ISR the controller shrank to the two survivors). (b) Controller kill: the broker
   /controller names (read with kazoo) gets kill -9 (the cluster then has two brokers), and the figure
   is the time until /controller names another broker. Both wait for ZooKeeper to expire the dead
   broker's session: 6 s after the session's last heartbeat (up to 2 s before the kill), rounded up to
   ZooKeeper's next tick (tickTime 500 ms here), so anywhere from about 4 to 6.5 s after the kill, and a
   single round is noisy by seconds; with more rounds the killed brokers are restarted and the ISRs
   refilled in between. So each is also given from the moment a kazoo watch saw ZooKeeper delete the
   dead broker's znode (/brokers/ids/<id> for the leader, /controller for the controller), the brokers'
   own part without the session expiry.
5. kbroker alone with 1, 2 and 3 brokers (Kafka not run): a fresh cluster of each size, one topic of 48
   partitions (quick: 12) with replication factor 1, spread over the brokers by the controller, written
   by several producer processes (2, or up to 4 with more cores) at once with 100-byte values, acks=1,
   linger.ms=5, for 10 s (quick: 2.5 s); the figure is all records over the span from the first
   producer's start to the last one's final acknowledgement. The 2- and 3-broker figures are compared
   with the 1-broker one. On a machine with few cores the producers and brokers share them, so this
   shows what a second and third process buys here, not a cluster of separate machines.

Without a JDK or Kafka 3.9's jars there is no ZooKeeper and nothing is measured; with --no-kafka kbroker
is measured alone. Targets (issue 14): replicated throughput at least Kafka's (1x), leader and controller
failover no slower than Kafka's, end-to-end p99 at 10,000 msgs/s within 10 ms.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import kafka
from bench.harness import Context, Result, cpu_seconds, interleave, median, rotated, size_label
from bench.kafka import cluster_processes  # the cluster tests' brokers and waits
from bench.load import PURGED, latency_run, produce_for, value_pool
from bench.peers import CLIENT_LOGGING, Broker, ExternalBroker, first_writes
from bench.suites._common import Deadline, per_peer, run_alone, run_part

SUITE = "cluster"
TIME_BUDGET = (240, 1800)
KAFKA_VERSION = "3.9"  # the last Kafka with ZooKeeper mode
BROKER_IDS = (1, 2, 3)
SESSION_MS = 6000
COMMON = {  # the same on both clusters
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "auto.leader.rebalance.enable": "false",  # leaderships move only when a broker dies
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
}
REPLICATED = {"min.insync.replicas": "2"}
THROUGHPUT_PARTITIONS = 6
VALUE_SIZES = (100, 1024)
FAILOVER_PARTITIONS = 3
SEND_EVERY_S = 0.01
FORM_TIMEOUT_S = 90
FAILOVER_LIMIT_S = SESSION_MS / 1000 + 40


def _shape(ctx: Context) -> dict[str, Any]:
    if ctx.quick:
        return {"seconds": 2.5, "max_bytes": 48 << 20, "warmup_s": 2.0, "idle_s": 3.0, "rate": 500,
                "latency": (1.5, 0.3, 2.0), "scale_partitions": 12, "scale_seconds": 2.5, "producers": 2}
    return {"seconds": 10.0, "max_bytes": 1 << 30, "warmup_s": 10.0, "idle_s": 10.0, "rate": 10_000,
            "latency": (5.0, 1.0, 5.0), "scale_partitions": 48, "scale_seconds": 10.0,
            "producers": max(2, min(4, (os.cpu_count() or 2) // 2))}


# --- the clusters (their brokers: compat-tests/cluster_processes.py) ------------------------------


def _kazoo(hosts: str):
    from kazoo.client import KazooClient

    logging.getLogger("kazoo").setLevel(logging.ERROR)  # errors only: the suite's output is its figures
    return KazooClient(hosts=hosts, timeout=10)


class Cluster(Broker):
    """Brokers sharing a ZooKeeper chroot, seen by the load generators as one Broker: the bootstrap lists every
    live broker and the CPU is the sum over them."""

    def __init__(self, kind: str, name: str, connect: str, nodes: dict[int, cluster_processes.ClusterBroker]) -> None:
        self.kind = kind
        self.name = name
        self.connect = connect
        self.nodes = nodes
        self.zk = None

    @property
    def bootstrap(self) -> str:  # type: ignore[override]
        return ",".join(n.bootstrap for n in self.live())

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return None

    def live(self) -> list[cluster_processes.ClusterBroker]:
        return [n for n in self.nodes.values() if n.pid is not None]

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(n.pid) for n in self.live() if n.pid is not None)

    def rss_mib(self) -> float | None:
        return None

    # --- forming -------------------------------------------------------------------------------

    def start(self, timeout: float = FORM_TIMEOUT_S) -> None:
        root, chroot = self.connect.split("/", 1)
        client = _kazoo(root)
        client.start(timeout=30)
        try:
            client.ensure_path(f"/{chroot}")  # so that the suite's own session on the chroot finds it
        finally:
            client.stop()
            client.close()
        cluster_processes.start_all(self.nodes.values())
        self.wait_formed(timeout)

    def wait_formed(self, timeout: float = FORM_TIMEOUT_S) -> None:
        if self.zk is None:
            self.zk = cluster_processes.wait_until(self._zk_client, f"{self.name}: ZooKeeper session", timeout)
        cluster_processes.wait_formed(self.zk, self.live(), timeout, self.name)

    def _zk_client(self):
        client = _kazoo(self.connect)
        client.start(timeout=10)
        return client

    # --- topics --------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None,
                     replication: int = 3, timeout: float = 60) -> None:
        admin = _admin(self.bootstrap)  # kept referenced until the future is done: it dies with its client
        admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                            request_timeout=timeout)[name].result(timeout)
        cluster_processes.wait_until(lambda: self.in_sync(name, partitions, replication),
                                     f"{self.name}: {name} fully in sync", timeout)
        first_writes(self.bootstrap, {name: partitions}, timeout)

    def delete_topic(self, name: str) -> None:
        with contextlib.suppress(KafkaException, RuntimeError):
            admin = _admin(self.bootstrap)
            admin.delete_topics([name], request_timeout=30)[name].result(30)

    def partitions(self, topic: str, via: str) -> dict[int, tuple[int, tuple[int, ...]]]:
        """partition -> (leader, sorted ISR) as the broker at `via` answers Metadata."""
        found = _admin(via).list_topics(topic, timeout=5).topics.get(topic)
        if found is None or found.error is not None:
            return {}
        return {p: (m.leader, tuple(sorted(m.isrs))) for p, m in found.partitions.items()}

    def in_sync(self, topic: str, partitions: int, replication: int) -> bool:
        """Every live broker tells the same, full picture: each partition led, with `replication` in sync."""
        views = [self.partitions(topic, n.bootstrap) for n in self.live()]
        return all(len(v) == partitions and v == views[0] and all(leader >= 0 and len(isr) == replication
                                                                  for leader, isr in v.values()) for v in views)

    def controller_id(self) -> int | None:
        if not self.zk.exists("/controller"):
            return None
        return json.loads(self.zk.get("/controller")[0])["brokerid"]

    def close(self) -> None:
        """kill -9 every broker: nothing of a benchmark cluster is kept, and a controlled shutdown takes long."""
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.kill()
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.stop()
                self.zk.close()
            self.zk = None


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGGING})


def _chroot(zookeeper: str, label: str) -> str:
    return f"{zookeeper}/bench-{label}-{uuid.uuid4().hex[:10]}"


def kbroker_cluster(ctx: Context, zookeeper: str, brokers: int = 3, label: str = "kbroker",
                    extra: dict[str, str] | None = None) -> Cluster:
    connect = _chroot(zookeeper, label)
    overrides = {**COMMON, "offsets.topic.replication.factor": str(min(3, brokers)), **(extra or {})}
    nodes = {i: cluster_processes.KbrokerProcess(ctx.work_dir / f"{label}-{uuid.uuid4().hex[:6]}-{i}", connect, i,
                                                 overrides, log_level="WARNING", event_loop=ctx.event_loop)
             for i in range(1, brokers + 1)}
    return Cluster("kbroker", "kbroker", connect, nodes)


def kafka_cluster(ctx: Context, zookeeper: str, extra: dict[str, str] | None = None) -> Cluster:
    connect = _chroot(zookeeper, "kafka")
    overrides = {**COMMON, "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
                 **(extra or {})}
    nodes = {i: cluster_processes.KafkaZkBroker(ctx.work_dir / "kafka", connect, i, overrides) for i in BROKER_IDS}
    version = nodes[1].kafka.full_version
    return Cluster("kafka", f"Apache Kafka {version} (ZooKeeper mode)", connect, nodes)


@contextlib.contextmanager
def started(cluster: Cluster) -> Iterator[Cluster]:
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


# --- 1, 2: replicated throughput and CPU ------------------------------------------------------------


def _throughput(ctx: Context, shape: dict[str, Any], clusters: list[Cluster], deadline: Deadline) -> list[Result]:
    results: list[Result] = []
    mine, others = clusters[0], clusters[1:]
    idle = {}
    for cluster in clusters:
        before, started_at = cluster.cpu_seconds(), time.monotonic()
        time.sleep(shape["idle_s"])
        idle[cluster.name] = [{"cpu_percent": 100 * (cluster.cpu_seconds() - before) / (time.monotonic() - started_at)}]
    results += _compare("broker CPU with no load, 3 brokers", "% of a core", idle, mine, others,
                        "cpu_percent", False, {"seconds": shape["idle_s"]},
                        "sum of the three broker processes, once the cluster formed (no topic yet)")
    for cluster in clusters:  # not measured: the JVM's JIT compiles Kafka's hot paths in the first seconds
        ctx.log(f"{cluster.name}: warm-up, {shape['warmup_s']:g} s of acks=all produce")
        with cluster.scratch_topic("warmup", THROUGHPUT_PARTITIONS, REPLICATED) as topic:
            produce_for(cluster, topic, THROUGHPUT_PARTITIONS, value_pool(VALUE_SIZES[0]), shape["warmup_s"],
                        shape["max_bytes"], acks="all")
    for size in VALUE_SIZES:
        deadline.check(f"replicated produce of {size_label(size)}")
        values = value_pool(size)

        def one(cluster: Cluster, size: int = size, values: list[bytes] = values) -> dict[str, float]:
            ctx.log(f"{cluster.name}: produce {size_label(size)} acks=all RF=3")
            with cluster.scratch_topic(f"rf3-{size}", THROUGHPUT_PARTITIONS, REPLICATED) as topic:
                run = produce_for(cluster, topic, THROUGHPUT_PARTITIONS, values, shape["seconds"],
                                  shape["max_bytes"], acks="all")
            return {"msgs_per_s": run.msgs_per_s, "mb_per_s": run.msgs_per_s * size / 1e6,
                    "cpu_per_million": run.broker_cpu_per_million, "records": run.records}

        rounds = interleave(clusters, ctx.rounds, one, key=lambda c: c.name, ctx=ctx)
        label = (f"produce {size_label(size)}, 3 brokers, RF=3, acks=all, min.insync.replicas=2, "
                 f"{THROUGHPUT_PARTITIONS} partitions")
        params = {"value_bytes": size, "partitions": THROUGHPUT_PARTITIONS, "brokers": 3, "replication_factor": 3,
                  "acks": "all", "min.insync.replicas": 2, "linger_ms": 5, "seconds": shape["seconds"]}
        for metric, key, better, name in (
                ("msgs/s", "msgs_per_s", True, label),
                ("MB/s", "mb_per_s", True, label),
                ("CPU s per M records", "cpu_per_million", False,
                 f"broker CPU per million replicated records, {size_label(size)}, 3 brokers, RF=3, acks=all")):
            results += _compare(name, metric, rounds, mine, others, key, better,
                                {**params, "kbroker_rounds": [r[key] for r in rounds[mine.name]]},
                                "sum of the three broker processes' user + system CPU"
                                if key == "cpu_per_million" else "", AT_LEAST_KAFKA if key == "msgs_per_s" else None)
    return results


# issue 14's targets: replicated throughput at least Kafka's, failover no slower, end-to-end p99 within 10 ms
AT_LEAST_KAFKA = {"target": ">= 1x Kafka", "target_ratio": 1.0}
NO_SLOWER_THAN_KAFKA = {"target": "<= 1x Kafka", "target_ratio": 1.0}
END_TO_END_P99 = {"target": "<= 10 ms", "target_value": 10.0}


def _compare(name: str, metric: str, rounds: dict[str, list[dict[str, Any]]], mine: Cluster, others: list[Cluster],
             key: str, higher_is_better: bool, params: dict[str, Any], note: str = "",
             target: dict[str, Any] | None = None) -> list[Result]:
    """per_peer of each cluster's median of `key` over its rounds (each peer's rounds in its params); a ratio
    target only where there is a peer to compare with."""

    def figure(cluster: Cluster) -> float | None:
        return median([r.get(key) for r in rounds[cluster.name]])

    target = {k: v for k, v in (target or {}).items() if others or k != "target_ratio"}
    return per_peer(SUITE, name, metric, figure(mine), {o.name: figure(o) for o in others},
                    {o.name: {"peer_rounds": [r[key] for r in rounds[o.name]]} for o in others},
                    higher_is_better=higher_is_better, params=params, note=note, **target)


# --- 3: end-to-end latency ---------------------------------------------------------------------------


def _latency(ctx: Context, shape: dict[str, Any], clusters: list[Cluster], deadline: Deadline) -> list[Result]:
    rate = shape["rate"]
    seconds, warmup, drain = shape["latency"]
    deadline.check("end-to-end latency")
    topics = {}
    for cluster in clusters:
        topics[cluster.name] = f"bench-cluster-latency-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topics[cluster.name], 1, REPLICATED)
    for cluster in clusters:  # not measured: the request path of small requests, warmed as in part 1
        ctx.log(f"{cluster.name}: warm-up, {shape['warmup_s']:g} s at {rate:,} msgs/s")
        latency_run(cluster, topics[cluster.name], rate, shape["warmup_s"], 0, drain, read_back=True, acks="all",
                    linger_ms=1)

    def one(cluster: Cluster) -> dict[str, Any]:
        ctx.log(f"{cluster.name}: end-to-end latency at {rate:,} msgs/s, acks=all RF=3")
        figures = latency_run(cluster, topics[cluster.name], rate, seconds, warmup, drain, read_back=True,
                              acks="all", linger_ms=1)
        return {**figures["e2e"], **{f"ack_{k}": v for k, v in figures["ack"].items()},
                "send_behind_ms": figures["send_behind_ms"], "broker_cpu_percent": figures["broker_cpu_percent"]}

    try:
        rounds = interleave(clusters, ctx.rounds, one, key=lambda c: c.name, ctx=ctx)
    finally:
        for cluster in clusters:
            cluster.delete_topic(topics[cluster.name])
    mine = clusters[0]
    missing = {c.name: sum(r["missing"] for r in rounds[c.name]) for c in clusters}
    note = "; ".join(f"{'kbroker' if c is mine else c.name}: {missing[c.name]:,} records never read (counted with "
                     "the time they had waited)" for c in clusters if missing[c.name])
    params = {"rate": rate, "seconds": seconds, "value_bytes": 100, "partitions": 1, "replication_factor": 3,
              "acks": "all", "min.insync.replicas": 2, "linger_ms": 1,
              "kbroker_max_ms": max(r["max_ms"] for r in rounds[mine.name]),
              "brokers_cpu_percent": {c.name: median([r["broker_cpu_percent"] for r in rounds[c.name]])
                                      for c in clusters},
              "send_behind_ms": max(r["send_behind_ms"] for r in rounds[mine.name])}
    results: list[Result] = []
    for kind, prefix, kind_note in (("end-to-end", "", note), ("produce-ack", "ack_", "")):
        for label, key in (("p50", "p50_ms"), ("p99", "p99_ms")):
            results += _compare(f"{kind} latency at {rate:,} msgs/s, 3 brokers, RF=3, acks=all, linger.ms=1",
                                f"{label} ms", rounds, mine, clusters[1:], prefix + key, False,
                                {**params, "percentile": label}, kind_note,
                                END_TO_END_P99 if (kind, label) == ("end-to-end", "p99") else None)
    return results


# --- 4: failover -------------------------------------------------------------------------------------


def _deletion_watch(cluster: Cluster, path: str) -> dict[str, float]:
    """{"at": perf_counter()} filled in when ZooKeeper tells that `path` is gone (a kazoo watch)."""
    seen: dict[str, float] = {}

    def changed(event) -> None:
        if event.type == "DELETED":
            seen.setdefault("at", time.perf_counter())

    if not cluster.zk.exists(path, watch=changed):
        seen["at"] = time.perf_counter()
    return seen


def _since(seen: dict[str, float], killed_at: float, done_at: float) -> tuple[float | None, float | None]:
    """(kill to the deletion, deletion to `done_at`), None when the watch has not fired."""
    if "at" not in seen:
        return None, None
    return seen["at"] - killed_at, done_at - seen["at"]


def leader_failover(cluster: Cluster, topic: str) -> dict[str, Any]:
    """kill -9 the leader of a partition (one the controller does not lead) -> the first acks=all record sent
    after the kill and acknowledged (by the new leader)."""
    controller = cluster.controller_id()
    view = cluster.partitions(topic, cluster.live()[0].bootstrap)
    candidates = [(p, v) for p, v in sorted(view.items()) if v[0] != controller]
    if not candidates:
        raise RuntimeError(f"{cluster.name}: the controller leads every partition of {topic}: no leader to kill")
    partition, (leader, isr) = candidates[0]
    acked: list[float] = []
    errors: list[str] = []

    def delivered(error, message) -> None:
        now = time.perf_counter()
        if error is not None:
            if error.code() not in PURGED:
                errors.append(str(error))
        elif message.key() != b"warm":
            acked.append(now)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "retry.backoff.ms": 20, "retry.backoff.max.ms": 100, "message.timeout.ms": 120_000,
                         # else librdkafka looks for a lost leader on its 1 s topic scan: a 1 s-grained figure
                         "topic.metadata.refresh.interval.ms": 100,
                         "on_delivery": delivered, **CLIENT_LOGGING, "log_level": 0})  # refused connections expected
    try:
        producer.produce(topic, b"warm", key=b"warm", partition=partition)
        if producer.flush(30) or errors:
            raise RuntimeError(f"{cluster.name}: the warm-up record was not acknowledged: {errors}")
        registration = _deletion_watch(cluster, f"/brokers/ids/{leader}")
        killed_at = time.perf_counter()
        cluster.nodes[leader].kill()
        next_send, sent = killed_at, 0
        while not acked:
            now = time.perf_counter()
            if now - killed_at > FAILOVER_LIMIT_S:
                raise TimeoutError(f"{cluster.name}: no record acknowledged {FAILOVER_LIMIT_S:.0f} s after "
                                   f"killing the leader of {topic}-{partition}")
            if now >= next_send:
                producer.produce(topic, b"x" * 100, key=b"%d" % sent, partition=partition)
                sent += 1
                next_send += SEND_EVERY_S
            producer.poll(0.002)
        seconds = min(acked) - killed_at
        expired_s, after_expiry_s = _since(registration, killed_at, min(acked))
    finally:
        producer.purge()
        producer.flush(1)

    def leader_now() -> int:  # Metadata's -1, no leader yet, as 0: not yet
        return max(0, cluster.partitions(topic, cluster.live()[0].bootstrap).get(partition, (-1,))[0])

    new_leader = cluster_processes.wait_until(leader_now, "the new leader in Metadata", 30)
    return {"seconds": seconds, "expired_s": expired_s, "after_expiry_s": after_expiry_s, "killed": leader,
            "controller": controller, "partition": partition, "new_leader": new_leader, "isr_before": list(isr),
            "errors": errors[:3]}


def controller_failover(cluster: Cluster) -> dict[str, Any]:
    """kill -9 the broker /controller names -> /controller naming another broker."""
    controller = cluster.controller_id()
    if controller is None:
        raise RuntimeError(f"{cluster.name}: no /controller")
    znode = _deletion_watch(cluster, "/controller")
    killed_at = time.perf_counter()
    cluster.nodes[controller].kill()
    while True:
        now = time.perf_counter()
        if now - killed_at > FAILOVER_LIMIT_S:
            raise TimeoutError(f"{cluster.name}: no new controller {FAILOVER_LIMIT_S:.0f} s after killing {controller}")
        with contextlib.suppress(Exception):
            found = cluster.controller_id()
            if found is not None and found != controller:
                done_at = time.perf_counter()
                expired_s, after_expiry_s = _since(znode, killed_at, done_at)
                return {"seconds": done_at - killed_at, "expired_s": expired_s, "after_expiry_s": after_expiry_s,
                        "killed": controller, "new_controller": found}
        time.sleep(0.005)


def _failover(ctx: Context, shape: dict[str, Any], clusters: list[Cluster], deadline: Deadline) -> list[Result]:
    rounds: dict[str, list[dict[str, Any]]] = {c.name: [] for c in clusters}
    for round_index in range(ctx.rounds):
        if round_index:
            if deadline.left() < 2 * len(clusters) * (FAILOVER_LIMIT_S + 20):
                ctx.notes.append(f"cluster: failover measured in {round_index} round(s) only (time budget)")
                break
            for cluster in clusters:  # back to three brokers
                ctx.log(f"{cluster.name}: restarting the killed brokers")
                for node in cluster.nodes.values():
                    if node.pid is None:
                        node.start()
                cluster.wait_formed()
        # a fresh topic each round: the last round's kills left every leadership on one broker (no rebalance)
        topics = {cluster.name: f"bench-cluster-failover-{uuid.uuid4().hex[:8]}" for cluster in clusters}
        for cluster in clusters:
            cluster.create_topic(topics[cluster.name], FAILOVER_PARTITIONS, REPLICATED)
        for cluster in rotated(clusters, round_index):
            deadline.check("failover")
            ctx.log(f"{cluster.name}: kill -9 of a partition leader")
            leader = leader_failover(cluster, topics[cluster.name])
            ctx.log(f"{cluster.name}: kill -9 of the controller")
            controller = controller_failover(cluster)
            rounds[cluster.name].append({"leader_s": leader["seconds"], "controller_s": controller["seconds"],
                                         "leader_after_expiry_s": leader["after_expiry_s"],
                                         "controller_after_expiry_s": controller["after_expiry_s"],
                                         "leader": leader, "controller": controller})
    mine = clusters[0]
    params = {"zookeeper.session.timeout.ms": SESSION_MS, "rounds": len(rounds[mine.name]),
              "details": {c.name: [{k: r[k] for k in ("leader", "controller")} for r in rounds[c.name]]
                          for c in clusters}}
    expiry = f"includes ZooKeeper's expiry of the dead broker's session ({SESSION_MS} ms, on tickTime boundaries)"
    leader = "leader kill -9 to the first acks=all produce acknowledged by the new leader (RF=3, min.insync.replicas=2)"
    controller = "controller kill -9 to a new /controller in ZooKeeper"
    return [
        *_compare(leader, "s", rounds, mine, clusters[1:], "leader_s", False, params, expiry, NO_SLOWER_THAN_KAFKA),
        *_compare("leader failover after ZooKeeper expired the dead leader's session", "s", rounds, mine,
                  clusters[1:], "leader_after_expiry_s", False, params,
                  "from the deletion of /brokers/ids/<killed> (a kazoo watch) to the acknowledgement"),
        *_compare(controller, "s", rounds, mine, clusters[1:], "controller_s", False, params, expiry,
                  NO_SLOWER_THAN_KAFKA),
        *_compare("controller failover after ZooKeeper deleted /controller", "s", rounds, mine, clusters[1:],
                  "controller_after_expiry_s", False, params,
                  "the brokers' own part: from the old /controller's deletion (a kazoo watch) to the new one"),
    ]


# --- 5: kbroker with 1, 2 and 3 brokers ---------------------------------------------------------------


def _produce_worker(bootstrap: str, topic: str, partitions: int, value_size: int, seconds: float, index: int,
                    barrier, results) -> None:
    """One producer process: produce_for with acks=1 and no byte cap, its clock started once every producer is
    connected (`barrier`), from another partition than the others; puts (index, records, start, end, error)
    with time.monotonic() times, one clock for every process on the machine."""
    try:
        run = produce_for(ExternalBroker(bootstrap), topic, partitions, value_pool(value_size, seed=index + 1),
                          seconds, sys.maxsize, drain_s=60, ready=lambda: barrier.wait(60), first=index)
        results.put((index, run.records, run.started_at, run.started_at + run.seconds, None))
    except Exception as error:
        results.put((index, 0, 0.0, 0.0, repr(error)))


def aggregate_produce(bootstrap: str, topic: str, partitions: int, value_size: int, seconds: float,
                      producers: int) -> dict[str, float]:
    spawn = multiprocessing.get_context("spawn")
    barrier, results = spawn.Barrier(producers), spawn.Queue()
    workers = [spawn.Process(target=_produce_worker, daemon=True,
                             args=(bootstrap, topic, partitions, value_size, seconds, i, barrier, results))
               for i in range(producers)]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=seconds + 150) for _ in workers]
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
                worker.join()
    failures = [r[4] for r in reports if r[4]]
    if failures:
        raise RuntimeError(f"producer processes failed: {failures}")
    records = sum(r[1] for r in reports)
    span = max(r[3] for r in reports) - min(r[2] for r in reports)
    return {"msgs_per_s": records / span, "mb_per_s": records * value_size / span / 1e6, "records": records,
            "span_s": span}


def _scaling(ctx: Context, shape: dict[str, Any], zookeeper: str, deadline: Deadline) -> list[Result]:
    partitions, producers, size = shape["scale_partitions"], shape["producers"], 100
    figures: dict[int, dict[str, float]] = {}
    for brokers in (1, 2, 3):
        if deadline.left() < 30 + shape["scale_seconds"]:
            ctx.notes.append(f"cluster: kbroker with {brokers} broker(s) not run (time budget)")
            break
        ctx.log(f"kbroker, {brokers} broker(s): {producers} producer processes, {partitions} partitions, RF=1")
        with started(kbroker_cluster(ctx, zookeeper, brokers, label=f"kbroker{brokers}")) as cluster:
            topic = f"bench-cluster-scale-{uuid.uuid4().hex[:8]}"
            cluster.create_topic(topic, partitions, replication=1)
            runs = [aggregate_produce(cluster.bootstrap, topic, partitions, size, shape["scale_seconds"], producers)
                    for _ in range(ctx.rounds)]
        figures[brokers] = {"msgs_per_s": median([r["msgs_per_s"] for r in runs]),
                            "mb_per_s": median([r["mb_per_s"] for r in runs]),
                            "rounds": [r["msgs_per_s"] for r in runs]}
    results = []
    one = figures.get(1, {}).get("msgs_per_s")
    for brokers, figure in figures.items():
        compared = brokers > 1 and one is not None
        results.append(Result(
            SUITE, f"kbroker produce {size_label(size)}, {brokers} broker(s), RF=1, acks=1, {partitions} partitions, "
                   f"{producers} producer processes", "msgs/s", figure["msgs_per_s"],
            one if compared else None, "kbroker, 1 broker" if compared else None,
            params={"brokers": brokers, "partitions": partitions, "producers": producers, "value_bytes": size,
                    "seconds": shape["scale_seconds"], "mb_per_s": figure["mb_per_s"], "rounds": figure["rounds"],
                    "logical_cpus": os.cpu_count()},
            note=f"{figure['mb_per_s']:.1f} MB/s; {os.cpu_count()} logical CPUs shared by brokers and producers"))
    return results


# --- the suite ---------------------------------------------------------------------------------------------


def _kafka_problem(ctx: Context) -> str | None:
    if ctx.kafka is None:
        return "Apache Kafka left out of this run (--no-kafka, or no Apache Kafka here)"
    problem = kafka.unavailable(KAFKA_VERSION)
    return f"Apache Kafka {KAFKA_VERSION} is unavailable: {problem}" if problem else None


def run(ctx: Context) -> list[Result]:
    shape = _shape(ctx)
    deadline = Deadline.for_suite(ctx, TIME_BUDGET[0 if ctx.quick else 1])
    zookeeper_problem = kafka.unavailable(KAFKA_VERSION)
    if zookeeper_problem:
        ctx.notes.append(f"cluster: no ZooKeeper (it comes with Kafka {KAFKA_VERSION}'s jars): {zookeeper_problem}")
        return [Result(SUITE, "cluster mode", "-", None, note="not run: no ZooKeeper")]
    kafka_problem = _kafka_problem(ctx)
    if kafka_problem:
        ctx.notes.append(f"cluster: kbroker measured alone: {kafka_problem}")
    results: list[Result] = []
    ctx.log("starting ZooKeeper")
    with kafka.kafka_process.ZooKeeperProcess(ctx.work_dir).started() as zookeeper:
        with contextlib.ExitStack() as stack:
            ctx.log("starting three kbroker brokers")
            clusters = [stack.enter_context(started(kbroker_cluster(ctx, zookeeper.connect)))]
            if kafka_problem is None:
                ctx.log(f"starting three Apache Kafka {KAFKA_VERSION} brokers (ZooKeeper mode)")
                try:
                    clusters.append(stack.enter_context(started(kafka_cluster(ctx, zookeeper.connect))))
                except Exception as error:
                    ctx.notes.append(f"cluster: kbroker measured alone: Apache Kafka {KAFKA_VERSION} did not "
                                     f"start: {error}")
            results += run_part(ctx, SUITE, "replicated produce", lambda: _throughput(ctx, shape, clusters, deadline))
            results += run_part(ctx, SUITE, "end-to-end latency", lambda: _latency(ctx, shape, clusters, deadline))
            results += run_part(ctx, SUITE, "failover", lambda: _failover(ctx, shape, clusters, deadline))
        results += run_part(ctx, SUITE, "kbroker with 1, 2, 3 brokers",
                            lambda: _scaling(ctx, shape, zookeeper.connect, deadline))
    return results


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
