"""Scale: many partitions, many idle connections, many consumer groups, on one `kbroker serve`.

    python -m bench.suites.scale [--quick] [--rounds N] [--peer host:port]

1. Partitions (1, 100, 1,000, 10,000; quick: 1 and 100). A fresh broker per count: create the
   topics (up to 100 partitions each), write 2 records of 100 bytes into every partition, then
   produce 100-byte records round-robin across all of them with confluent-kafka (acks=1,
   linger.ms=5) and read the broker's RSS (VmRSS of the subprocess). Then a clean restart
   (SIGTERM, start again) is timed until Metadata is answered, and RSS read again. The peers
   (librdkafka's mock, Apache Kafka up to 1,000 partitions, and --peer) get the same topics for
   the throughput figure; RSS and restart have no peer (the run's one Kafka is not restarted).
   kbroker keeps one descriptor per written partition (its active .log; indexes and idle old
   segments hold none, see kbroker.log._handles), so a count that needs more than the
   open-file hard limit is reported as not run rather than attempted.
2. Idle connections (1,000; quick: 100): plain sockets that each complete an ApiVersions
   exchange and stay open while a producer loads 10 partitions. Throughput with and without
   them, interleaved; every idle connection must still answer an ApiVersions at the end.
3. Consumer groups (100; quick: 5), one confluent-kafka consumer each, on a broker (and a mock)
   with group.initial.rebalance.delay.ms=0, so the figure is the broker's work rather than
   Kafka's deliberate wait: the time from the last subscribe() to every member holding its
   assignment, then the members' aggregate rate of synchronous commits (one partition each).
   Apache Kafka keeps its default delay (3 s), so it is compared on commits only.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import time
import uuid

from bench.harness import Context, Result, median, rotated, rss_mib
from bench.suites._common import (
    Deadline,
    RawConnection,
    api_versions,
    comparison_peers,
    create_peer_topics,
    create_topics,
    kbroker_process,
    per_peer,
    produce_rate,
    run_alone,
    run_members,
    run_parts,
    set_initial_rebalance_delay,
    stop_cleanly,
    targets,
    timed_start,
)

SUITE = "scale"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
TIME_BUDGET = (80, 1500)
TOPIC_WIDTH = 100            # partitions per topic once a count exceeds it
FILL_RECORDS = 2             # records written into every partition before measuring
DESCRIPTORS_PER_PARTITION = 1
DESCRIPTOR_HEADROOM = 1_000  # sockets, the listener, Python itself, the shared LRU of old segments' files
RSS_TARGETS_MIB = {1_000: 250, 10_000: 1024}
RESTART_TARGETS_S = {1_000: 3.0}
LOAD_PARTITIONS = 10         # the topic of the idle-connection and group parts
KAFKA_MAX_PARTITIONS = 1_000  # Apache Kafka is a peer up to this many (one JVM serves the whole run)


def _shape(quick: bool) -> dict:
    if quick:
        return {"partitions": (1, 100), "produce": 20_000, "idle": 100, "groups": 5, "commit_s": 1.0}
    return {"partitions": (1, 100, 1_000, 10_000), "produce": 200_000, "idle": 1_000, "groups": 100,
            "commit_s": 5.0}


def _topics(prefix: str, partitions: int) -> dict[str, int]:
    """`partitions` spread over topics of at most TOPIC_WIDTH partitions."""
    count = -(-partitions // TOPIC_WIDTH)
    return {f"{prefix}-{i:03d}": min(TOPIC_WIDTH, partitions - i * TOPIC_WIDTH) for i in range(count)}


def _partition_list(topics: dict[str, int]) -> list[tuple[str, int]]:
    return [(topic, p) for topic, width in topics.items() for p in range(width)]


def _descriptor_limit() -> int:
    """What `kbroker serve` gets: it raises its soft limit to the hard one."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _raise_own_descriptor_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))


# --- 1. partitions ---------------------------------------------------------------------------


def _partition_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    """Each count in turn; one the open-file limit rules out is reported as not run, and the
    largest whole thousand that fits is measured instead (once), to show the trend."""
    results = []
    counts = list(shape["partitions"])
    fitting = (_descriptor_limit() - DESCRIPTOR_HEADROOM) // DESCRIPTORS_PER_PARTITION // 1000 * 1000
    for count in counts:
        needed = count * DESCRIPTORS_PER_PARTITION + DESCRIPTOR_HEADROOM
        if needed > _descriptor_limit():
            why = (f"{count:,} partitions not run: kbroker needs ~{needed:,} open files "
                   f"({DESCRIPTORS_PER_PARTITION} per partition), the hard limit here is {_descriptor_limit():,}")
            ctx.notes.append(why)
            results.append(Result(SUITE, f"{count:,} partitions served", "RSS MiB", None, higher_is_better=False,
                                  target=_rss_target(count), target_value=RSS_TARGETS_MIB.get(count),
                                  params={"partitions": count}, note=why))
            if fitting > max(c for c in counts if c * DESCRIPTORS_PER_PARTITION + DESCRIPTOR_HEADROOM
                             <= _descriptor_limit()) and fitting not in counts:
                counts.append(fitting)
            continue
        deadline.check(f"{count} partitions")
        ctx.log(f"{count:,} partitions")
        results += _one_partition_count(ctx, shape, count, deadline)
    return results


def _rss_target(count: int) -> str | None:
    target = RSS_TARGETS_MIB.get(count)
    return f"<= {target} MiB" if target else None


def _one_partition_count(ctx: Context, shape: dict, count: int, deadline: Deadline) -> list[Result]:
    broker = kbroker_process(ctx, f"scale-partitions-{count}")
    topics = _topics(f"scale-{count}-{uuid.uuid4().hex[:6]}", count)
    partitions = _partition_list(topics)
    rates: dict[str, list[float]] = {}
    try:
        timed_start(broker)
        started = time.monotonic()
        create_topics(broker.bootstrap, topics, timeout=max(10.0, deadline.left()))
        _fill(broker.bootstrap, partitions, deadline)
        create_s = time.monotonic() - started
        with comparison_peers(ctx, with_kafka=count <= KAFKA_MAX_PARTITIONS) as peers:
            for peer in peers:
                create_peer_topics(peer, topics, timeout=max(10.0, deadline.left()))
                _fill(peer.bootstrap, partitions, deadline)
            for round_index in range(ctx.rounds):
                for who, bootstrap in rotated(targets(broker.bootstrap, peers), round_index):
                    rate, errors = produce_rate(bootstrap, partitions, shape["produce"],
                                                time_limit=max(5.0, deadline.left()))
                    if errors:
                        raise RuntimeError(f"{errors} delivery errors producing to {who}")
                    rates.setdefault(who, []).append(rate)
        loaded_rss = rss_mib(broker.process.pid)
        shutdown_s = stop_cleanly(broker, timeout=max(60.0, deadline.left()))
        restart_s = timed_start(broker, timeout=max(20.0, deadline.left()))
        restarted_rss = rss_mib(broker.process.pid)
        stop_cleanly(broker, timeout=max(60.0, deadline.left()))
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    params = {"partitions": count, "topics": len(topics), "records": shape["produce"], "value_bytes": 100,
              "acks": 1, "linger_ms": 5, "rounds": ctx.rounds}
    kbroker_rate = median(rates.pop("kbroker"))
    return [
        *per_peer(SUITE, f"produce 100 B across {count:,} partitions", "msgs/s", kbroker_rate,
                  {who: median(values) for who, values in rates.items()}, params=params),
        Result(SUITE, f"{count:,} partitions served", "RSS MiB", loaded_rss, higher_is_better=False,
               target=_rss_target(count), target_value=RSS_TARGETS_MIB.get(count), params=params,
               note=f"after creating and filling them ({create_s:.1f} s) and the produce rounds"),
        Result(SUITE, f"clean shutdown with {count:,} partitions", "s", shutdown_s, higher_is_better=False,
               params=params, note="SIGTERM to exit: every log flushed and closed, checkpoints written"),
        Result(SUITE, f"clean restart with {count:,} partitions", "s", restart_s, higher_is_better=False,
               target=f"<= {RESTART_TARGETS_S[count]:g} s" if count in RESTART_TARGETS_S else None,
               target_value=RESTART_TARGETS_S.get(count), params=params,
               note="SIGTERM, then process start to the first Metadata answer"),
        Result(SUITE, f"{count:,} partitions after a restart", "RSS MiB", restarted_rss, higher_is_better=False,
               params=params),
    ]


def _fill(bootstrap: str, partitions: list[tuple[str, int]], deadline: Deadline) -> None:
    """FILL_RECORDS into every partition (this also warms the broker and the client up)."""
    produce_rate(bootstrap, partitions, len(partitions) * FILL_RECORDS, time_limit=max(10.0, deadline.left()))


# --- 2. idle connections ---------------------------------------------------------------------


@contextlib.contextmanager
def _idle_connections(bootstrap: str, count: int, deadline: Deadline):
    """`count` sockets that each completed an ApiVersions exchange; yields them and how many failed."""
    connections: list[RawConnection] = []
    failed = 0
    try:
        for _ in range(count):
            deadline.check("opening idle connections")
            connection = RawConnection(bootstrap)
            connections.append(connection)
            failed += api_versions(connection) != 0
        yield connections, failed
    finally:
        for connection in connections:
            connection.close()


def _still_answering(connections: list[RawConnection]) -> int:
    """How many idle connections fail a second ApiVersions (closed, or an error code)."""
    failed = 0
    for connection in connections:
        try:
            failed += api_versions(connection) != 0
        except (OSError, ConnectionError):
            failed += 1
    return failed


def _idle_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    count = shape["idle"]
    _raise_own_descriptor_limit(count + DESCRIPTOR_HEADROOM)
    topics = {f"scale-idle-{uuid.uuid4().hex[:6]}": LOAD_PARTITIONS}
    partitions = _partition_list(topics)
    broker = kbroker_process(ctx, "scale-idle")
    rates: dict[tuple[str, bool], list[float]] = {}
    errors: dict[str, int] = {}
    rss: dict[bool, list[float]] = {False: [], True: []}
    ctx.log(f"{count:,} idle connections")
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, topics)
        with comparison_peers(ctx) as peers:
            everyone = targets(broker.bootstrap, peers)
            for peer in peers:
                create_peer_topics(peer, topics)
            for _, bootstrap in everyone:  # warm up
                produce_rate(bootstrap, partitions, shape["produce"] // 4)
            for round_index in range(ctx.rounds):
                for idle in rotated((False, True), round_index):
                    for who, bootstrap in rotated(everyone, round_index):
                        with _idle_connections(bootstrap, count if idle else 0, deadline) as (open_, failed):
                            rate, delivery_errors = produce_rate(bootstrap, partitions, shape["produce"],
                                                                 time_limit=max(5.0, deadline.left()))
                            errors[who] = errors.get(who, 0) + failed + delivery_errors + _still_answering(open_)
                            rates.setdefault((who, idle), []).append(rate)
                            if who == "kbroker":
                                rss[idle].append(rss_mib(broker.process.pid))
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    params = {"idle_connections": count, "topic_partitions": LOAD_PARTITIONS, "records": shape["produce"],
              "value_bytes": 100, "rounds": ctx.rounds}
    names = [who for who, _ in everyone]
    without = {who: median(rates[(who, False)]) for who in names}
    with_idle = {who: median(rates[(who, True)]) for who in names}
    kept = {who: with_idle[who] / without[who] for who in names}
    peers_only = [who for who in names if who != "kbroker"]
    return [
        *per_peer(SUITE, f"produce 100 B to {LOAD_PARTITIONS} partitions, no idle connections", "msgs/s",
                  without["kbroker"], {who: without[who] for who in peers_only}, params=params),
        *per_peer(SUITE, f"produce 100 B to {LOAD_PARTITIONS} partitions, {count:,} idle connections open",
                  "msgs/s", with_idle["kbroker"], {who: with_idle[who] for who in peers_only}, params=params),
        *per_peer(SUITE, f"throughput kept with {count:,} idle connections", "with / without", kept["kbroker"],
                  {who: kept[who] for who in peers_only}, params=params),
        *per_peer(SUITE, f"errors with {count:,} idle connections", "count", errors["kbroker"],
                  {who: errors[who] for who in peers_only}, higher_is_better=False, target="0", target_value=0,
                  params=params, note="ApiVersions failures on the idle sockets (at open and at the end) "
                                      "+ delivery errors"),
        Result(SUITE, f"{count:,} idle connections open", "RSS MiB", median(rss[True]), higher_is_better=False,
               params=params, note=f"{median(rss[False]):.1f} MiB without them"),
    ]


# --- 3. consumer groups ----------------------------------------------------------------------


def _group_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    count = shape["groups"]
    topic = f"scale-groups-{uuid.uuid4().hex[:6]}"
    broker = kbroker_process(ctx, "scale-groups", "group.initial.rebalance.delay.ms=0")
    runs: dict[str, list] = {}
    delays: dict[str, str] = {"kbroker": "0"}
    ctx.log(f"{count} consumer groups")
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, {topic: LOAD_PARTITIONS})
        with comparison_peers(ctx) as peers:
            for peer in peers:
                create_peer_topics(peer, {topic: LOAD_PARTITIONS})
                delays[peer.name] = "0" if set_initial_rebalance_delay(peer, 0) else "its own"
            for round_index in range(ctx.rounds):
                for who, bootstrap in rotated(targets(broker.bootstrap, peers), round_index):
                    deadline.check("consumer groups")
                    groups = [f"{topic}-r{round_index}-g{i}" for i in range(count)]
                    runs.setdefault(who, []).append(run_members(bootstrap, groups, topic, all, shape["commit_s"],
                                                                timeout=min(120.0, max(10.0, deadline.left()))))
            rss = rss_mib(broker.process.pid)
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    params = {"groups": count, "members_per_group": 1, "topic_partitions": LOAD_PARTITIONS, "rounds": ctx.rounds,
              "commit_seconds": shape["commit_s"], "group.initial.rebalance.delay.ms": delays}

    def figure(who: str, attribute: str) -> float | None:
        values = [getattr(r, attribute) for r in runs[who]]
        return None if None in values else median(values)

    peers_only = [who for who in runs if who != "kbroker"]
    first_errors = [f"{who}: {e}" for who in runs for r in runs[who] for e in r.first_errors][:3]
    return [
        *per_peer(SUITE, f"{count} groups of 1 consumer: last subscribe to all assigned", "s",
                  figure("kbroker", "stabilise_s"),
                  {who: figure(who, "stabilise_s") for who in peers_only if delays[who] == "0"},
                  higher_is_better=False, params=params,
                  note="only brokers with no initial rebalance delay are compared (Apache Kafka keeps its 3 s)"
                  if any(delays[who] != "0" for who in peers_only) else ""),
        *per_peer(SUITE, f"{count} groups committing (sync, 1 partition per commit)", "commits/s",
                  figure("kbroker", "commits_per_s"), {who: figure(who, "commits_per_s") for who in peers_only},
                  params=params),
        *per_peer(SUITE, f"errors in {count} committing groups", "count", sum(r.errors for r in runs["kbroker"]),
                  {who: sum(r.errors for r in runs[who]) for who in peers_only}, higher_is_better=False,
                  target="0", target_value=0, params=params, note="; ".join(first_errors)),
        Result(SUITE, f"{count} groups committing", "RSS MiB", rss, higher_is_better=False, params=params),
    ]


# --- the suite -------------------------------------------------------------------------------


def run(ctx: Context) -> list[Result]:
    return run_parts(ctx, SUITE, TIME_BUDGET, _shape(ctx.quick), (_partition_results, _idle_results, _group_results))


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
