"""Consumer groups: offset commit rate, how fast a group settles, rebuilding groups at start.

    python -m bench.suites.groups [--quick] [--rounds N] [--peer host:port]

1. Offset commits per second from 10 clients (quick: 2), measured two ways against the same
   broker and the peers (librdkafka's mock, Apache Kafka, and --peer):
   - raw: 10 plain sockets, each pipelining PIPELINE OffsetCommit v8 requests (one partition,
     a simple commit: generation -1, no member, its own group) built with `wire` once and
     patched per request, so the Python client costs little and the broker is what is measured
     (what the mock reaches with it is this client's ceiling);
   - confluent-kafka: 10 consumers, each in its own group and subscribed to a 10-partition
     topic, committing explicit offsets synchronously (one partition per commit) in a thread
     each. A closed loop with 10 commits in flight: it shows what a real client sees.
   Target: >= 20,000 commits/s.
2. A 3-member group settling: three confluent-kafka consumers subscribe to a 3-partition topic;
   the time from the last subscribe() until each holds exactly one distinct partition. With
   Kafka's default group.initial.rebalance.delay.ms=3000 the figure is reported minus the wait
   Kafka's rule imposes (target <= 1 s): the delay is a window that starts again while new
   members arrive, so three members joining together wait two windows; librdkafka's mock waits
   one, and gets the delay through its mock API; Apache Kafka keeps its default (3000 ms), so it
   is a peer for that shape only, its figure reduced as kbroker's. With delay 0 the figure is as
   measured, and depends on timing: when the first member's generation completes before the others join, it
   learns of them only at its next heartbeat (heartbeat.interval.ms=3000 in librdkafka).
   Quick mode runs delay 0 only, without peers.
3. Rebuilding groups at start: 1,000 groups (quick: 10) commit 100,000 offset records (quick:
   1,000) over raw sockets (10 partitions per request), the broker is stopped cleanly and
   started again, and the time runs from process start until FindCoordinator and OffsetFetch
   answer with the last group's offsets (the coordinator replays __consumer_offsets before it
   listens). Every group's offsets are then checked. The same start with an empty data dir is
   the baseline. No peer: the mock keeps nothing across restarts, and the run's Apache Kafka is
   not restarted. Target: <= 3 s.
"""

from __future__ import annotations

import shutil
import struct
import threading
import time
import uuid

from bench.harness import Context, Result, median, rotated
from bench.suites._common import (
    FIND_COORDINATOR,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    Deadline,
    RawConnection,
    comparison_peers,
    create_peer_topics,
    create_topics,
    kbroker_process,
    max_versions,
    per_peer,
    run_alone,
    run_members,
    run_parts,
    set_initial_rebalance_delay,
    stop_cleanly,
    targets,
    timed_start,
)
from wire import headers, messages

SUITE = "groups"
COMPARES_WITH_KAFKA = True  # the harness starts the run's Kafka before this suite's clock
KAFKA_INITIAL_DELAY_MS = 3000  # Apache Kafka's default group.initial.rebalance.delay.ms, which the run's Kafka keeps
TIME_BUDGET = (80, 900)
COMMIT_TARGET_PER_S = 20_000
COMMIT_TARGET = f">= {COMMIT_TARGET_PER_S:,} commits/s"
PIPELINE = 32                # OffsetCommit requests in flight per raw connection
COMMIT_VERSION = 8           # what librdkafka 2.x sends
SENTINEL_OFFSET = 0x0123456789ABCDEF
TOPIC_PARTITIONS = 10
REBUILD_PARTITIONS = 10      # offsets per OffsetCommit while writing the groups to rebuild
_OFFSET = struct.Struct(">q")
_CORRELATION = struct.Struct(">i")


def _shape(quick: bool) -> dict:
    if quick:
        return {"clients": 2, "commit_s": 1.0, "groups": 10, "records": 1_000, "settle_delays_ms": (0,),
                "settle_peers": False}
    return {"clients": 10, "commit_s": 5.0, "groups": 1_000, "records": 100_000, "settle_delays_ms": (3000, 0),
            "settle_peers": True}


# --- 1. commit rate ---------------------------------------------------------------------------


def _commit_request(group: str, topic: str, offsets: dict[int, int]):
    """A simple commit (generation -1, no member id), as a standalone consumer sends it."""
    Request = messages.OffsetCommitRequest
    return Request(group_id=group, topics=[Request.OffsetCommitRequestTopic(name=topic, partitions=[
        Request.OffsetCommitRequestPartition(partition_index=p, committed_offset=o) for p, o in offsets.items()])])


class PipelinedCommitter(threading.Thread):
    """One connection committing one partition's offset of its own group, PIPELINE requests in
    flight. The request is encoded once; each send patches the correlation id and the offset.
    A response equal to the first good one (after its correlation id) counts as a success."""

    def __init__(self, bootstrap: str, group: str, topic: str, stop: threading.Event, version: int) -> None:
        super().__init__(name=f"committer-{group}", daemon=True)
        self.connection = RawConnection(bootstrap)
        self.stop, self.version = stop, version
        request = _commit_request(group, topic, {0: SENTINEL_OFFSET})
        self.template = bytearray(self.connection.encode(OFFSET_COMMIT, version, request))
        self.offset_at = self.template.index(_OFFSET.pack(SENTINEL_OFFSET))
        self.correlation = 0
        self.committed = 0
        self.errors = 0
        self.first_error = ""
        self._expected: bytes | None = None

    def _frame(self) -> bytes:
        self.correlation += 1
        _CORRELATION.pack_into(self.template, 8, self.correlation)  # size(4) api key(2) version(2)
        _OFFSET.pack_into(self.template, self.offset_at, self.correlation)
        return bytes(self.template)

    def _check(self, frame: bytes) -> None:
        if frame[4:] == self._expected:
            self.committed += 1
            return
        _, at = headers.decode_response_header(frame, OFFSET_COMMIT, self.version)
        response, _ = messages.decode("OffsetCommitResponse", self.version, frame, at)
        codes = [p.error_code for t in response.topics for p in t.partitions]
        if codes == [0]:
            self.committed += 1
            self._expected = frame[4:]
        else:
            self.errors += 1
            self.first_error = self.first_error or f"OffsetCommit error codes {codes}"

    def run(self) -> None:
        try:
            self.connection.sock.sendall(b"".join(self._frame() for _ in range(PIPELINE)))
            while not self.stop.is_set():
                frames = self.connection.read_available_frames()
                for frame in frames:
                    self._check(frame)
                self.connection.sock.sendall(b"".join(self._frame() for _ in frames))
        except Exception as error:
            self.errors += 1
            self.first_error = self.first_error or repr(error)
        finally:
            self.connection.close()


def raw_commit_rate(bootstrap: str, clients: int, topic: str, seconds: float) -> tuple[float, int, str]:
    """(commits/s, errors, first error) of `clients` pipelined connections."""
    with RawConnection(bootstrap) as probe:
        version = min(COMMIT_VERSION, max_versions(probe).get(OFFSET_COMMIT, COMMIT_VERSION))
    stop = threading.Event()
    run_id = uuid.uuid4().hex[:6]
    committers = [PipelinedCommitter(bootstrap, f"raw-{run_id}-{i}", topic, stop, version) for i in range(clients)]
    for committer in committers:
        committer.start()
    time.sleep(0.3)  # warm up
    before, started = sum(c.committed for c in committers), time.monotonic()
    time.sleep(seconds)
    rate = (sum(c.committed for c in committers) - before) / (time.monotonic() - started)
    stop.set()
    for committer in committers:
        committer.join(10)
    errors = sum(c.errors for c in committers)
    return rate, errors, next((c.first_error for c in committers if c.first_error), "")


def _commit_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    clients, seconds = shape["clients"], shape["commit_s"]
    topic = f"groups-commit-{uuid.uuid4().hex[:6]}"
    broker = kbroker_process(ctx, "groups-commit", "group.initial.rebalance.delay.ms=0")
    figures: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    first_errors: list[str] = []
    ctx.log(f"commit rate, {clients} clients")
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, {topic: TOPIC_PARTITIONS})
        with comparison_peers(ctx) as peers:
            for peer in peers:
                create_peer_topics(peer, {topic: TOPIC_PARTITIONS})
                set_initial_rebalance_delay(peer, 0)
            for round_index in range(ctx.rounds):
                for who, bootstrap in rotated(targets(broker.bootstrap, peers), round_index):
                    deadline.check("commit rate")
                    rate, raw_errors, first = raw_commit_rate(bootstrap, clients, topic, seconds)
                    figures.setdefault((who, "raw"), []).append(rate)
                    errors[(who, "raw")] = errors.get((who, "raw"), 0) + raw_errors
                    groups = [f"{topic}-r{round_index}-c{i}" for i in range(clients)]
                    run = run_members(bootstrap, groups, topic, all, seconds, timeout=min(60.0, deadline.left()))
                    figures.setdefault((who, "confluent"), []).append(run.commits_per_s or 0.0)
                    errors[(who, "confluent")] = errors.get((who, "confluent"), 0) + run.errors
                    first_errors += [f"{who}: {e}" for e in [first, *run.first_errors] if e]
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    params = {"clients": clients, "seconds": seconds, "rounds": ctx.rounds, "partitions_per_commit": 1}
    peer_names = sorted({who for who, _ in figures if who != "kbroker"})

    def results(kind: str, name: str, note: str) -> list[Result]:
        error_note = "errors: " + ", ".join(f"{who} {errors[(who, kind)]}" for who in ["kbroker", *peer_names])
        return per_peer(SUITE, name, "commits/s", median(figures[("kbroker", kind)]),
                        {who: median(figures[(who, kind)]) for who in peer_names}, target=COMMIT_TARGET,
                        target_value=COMMIT_TARGET_PER_S, params={**params, "client": kind},
                        note="; ".join(x for x in (note, error_note, *first_errors[:2]) if x))

    return [
        *results("raw", f"OffsetCommit from {clients} raw connections, {PIPELINE} in flight each",
                 "requests encoded once and patched: what the mock reaches is this client's ceiling"),
        *results("confluent", f"OffsetCommit from {clients} confluent-kafka consumers, sync",
                 "one commit in flight per consumer, so round trips bound it"),
    ]


# --- 2. a 3-member group settling ---------------------------------------------------------------


SETTLE_MEMBERS = 3
SETTLE_TARGET_S = 1.0


def _one_partition_each(assignments: list[set[int]]) -> bool:
    return all(len(a) == 1 for a in assignments) and len(set().union(*assignments)) == len(assignments)


def _settle_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    results = []
    for delay_ms in shape["settle_delays_ms"]:
        results += _settle(ctx, shape, deadline, delay_ms)
    return results


def _settle(ctx: Context, shape: dict, deadline: Deadline, delay_ms: int) -> list[Result]:
    """Kafka's initial delay (InitialDelayedJoin) is a window that starts again, up to the
    rebalance timeout, while new members keep arriving: three members that join together
    wait two windows (the second sees no newcomer). librdkafka's mock waits one."""
    topic = f"groups-settle-{delay_ms}-{uuid.uuid4().hex[:6]}"
    broker = kbroker_process(ctx, f"groups-settle-{delay_ms}", f"group.initial.rebalance.delay.ms={delay_ms}")
    runs: dict[str, list] = {"kbroker": []}
    delay_applied: dict[str, bool] = {}
    kafka_rule: set[str] = set()  # Apache Kafka waits as kbroker does (its own, default delay)
    timeout_s = 2 * delay_ms / 1000 + 15
    ctx.log(f"3-member group, initial delay {delay_ms} ms")
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, {topic: SETTLE_MEMBERS})
        with comparison_peers(ctx, with_kafka=delay_ms == KAFKA_INITIAL_DELAY_MS) as peers:
            peers = peers if shape["settle_peers"] else []
            for peer in peers:
                create_peer_topics(peer, {topic: SETTLE_MEMBERS})
                delay_applied[peer.name] = set_initial_rebalance_delay(peer, delay_ms)
                kafka_rule |= {peer.name} if peer.kind == "kafka" else set()
            for round_index in range(ctx.rounds):
                for who, bootstrap in rotated(targets(broker.bootstrap, peers), round_index):
                    deadline.check("group settling")
                    runs.setdefault(who, []).append(run_members(
                        bootstrap, [f"{topic}-r{round_index}"] * SETTLE_MEMBERS, topic, _one_partition_each,
                        timeout=timeout_s))
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    params = {"members": SETTLE_MEMBERS, "partitions": SETTLE_MEMBERS, "rounds": ctx.rounds,
              "group.initial.rebalance.delay.ms": delay_ms, "client": "confluent-kafka"}
    raw = {who: _median_settle(values) for who, values in runs.items()}
    peer_names = [who for who in raw if who != "kbroker"]
    unsettled = [f"{who} did not settle within {timeout_s:g} s" for who in peer_names if raw[who] is None]
    if not delay_ms:
        return per_peer(SUITE, "3-member group settles, initial delay 0", "s", raw["kbroker"],
                        {who: raw[who] for who in peer_names}, higher_is_better=False, params=params,
                        note="; ".join(["the first member's generation completes alone; it learns of the others "
                                        "at its next heartbeat (heartbeat.interval.ms=3000)", *unsettled]))
    spans = [r.subscribe_span_s for r in runs["kbroker"] if r.subscribe_span_s is not None]
    windows = 2 if spans and max(spans) < delay_ms / 1000 else 1
    delay_s = delay_ms / 1000

    def minus(value: float | None, seconds: float) -> float | None:
        return None if value is None else value - seconds

    return per_peer(
        SUITE, f"3-member group settles, after the {delay_ms} ms initial delay", "s",
        minus(raw["kbroker"], windows * delay_s),
        {who: minus(raw[who], windows * delay_s if who in kafka_rule else delay_s if delay_applied[who] else 0)
         for who in peer_names},
        higher_is_better=False, target=f"<= {SETTLE_TARGET_S:g} s", target_value=SETTLE_TARGET_S, params=params,
        note="; ".join([f"last subscribe() to one partition each, minus the delay Kafka's rule imposes: {windows} x "
                        f"{delay_ms} ms for kbroker and Apache Kafka, 1 x for the mock, which does not extend it; "
                        "as measured: "
                        + ", ".join(f"{who} {_seconds(value)}" for who, value in raw.items()), *unsettled]))


def _median_settle(runs: list) -> float | None:
    values = [r.stabilise_s for r in runs]
    return None if not values or None in values else median(values)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


# --- 3. rebuilding groups at start -------------------------------------------------------------


REBUILD_TARGET_S = 3.0
REBUILD_WINDOW = 64  # OffsetCommit requests in flight while writing


def _expected_offsets(group_index: int, requests: int) -> dict[int, int]:
    """The offsets a group holds after its last commit (distinct per group and partition)."""
    return {p: (requests - 1) * 1_000_000 + group_index * 100 + p + 1 for p in range(REBUILD_PARTITIONS)}


def _write_commits(bootstrap: str, topic: str, groups: list[str], requests: int) -> None:
    """`requests` OffsetCommits of REBUILD_PARTITIONS offsets per group, pipelined on one socket."""
    frames_left = [(gi, r) for r in range(requests) for gi in range(len(groups))]
    with RawConnection(bootstrap, timeout=30) as connection:
        for start in range(0, len(frames_left), REBUILD_WINDOW):
            window = frames_left[start:start + REBUILD_WINDOW]
            frames = []
            for gi, r in window:
                offsets = {p: r * 1_000_000 + gi * 100 + p + 1 for p in range(REBUILD_PARTITIONS)}
                frames.append(connection.encode(OFFSET_COMMIT, COMMIT_VERSION, _commit_request(groups[gi], topic,
                                                                                               offsets)))
            connection.sock.sendall(b"".join(frames))
            for _ in window:
                response = connection.receive(OFFSET_COMMIT, COMMIT_VERSION)
                codes = {p.error_code for t in response.topics for p in t.partitions}
                if codes != {0}:
                    raise RuntimeError(f"OffsetCommit failed while writing the groups: {codes}")


def _fetch_offsets(connection: RawConnection, groups: list[str], topic: str) -> dict[str, dict[int, int]]:
    """OffsetFetch v8 (several groups per request): group -> partition -> committed offset."""
    Request = messages.OffsetFetchRequest
    request = Request(groups=[Request.OffsetFetchRequestGroup(group_id=g, topics=[Request.OffsetFetchRequestTopics(
        name=topic, partition_indexes=list(range(REBUILD_PARTITIONS)))]) for g in groups])
    response = connection.call(OFFSET_FETCH, 8, request)
    return {g.group_id: {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}
            for g in response.groups if g.error_code == 0}


def _coordinator_found(connection: RawConnection, group: str, port: int) -> bool:
    response = connection.call(FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key=group, key_type=0))
    return response.error_code == 0 and response.port == port


def _offsets_ready(group: str, topic: str, expected: dict[int, int], port: int):
    """A readiness check for timed_start: FindCoordinator, then OffsetFetch with the offsets."""

    def ready(bootstrap: str) -> bool:
        try:
            with RawConnection(bootstrap, timeout=5) as connection:
                return (_coordinator_found(connection, group, port)
                        and _fetch_offsets(connection, [group], topic).get(group) == expected)
        except (OSError, ConnectionError):
            return False

    return ready


def _offsets_log_bytes(data_dir) -> int:
    return sum(f.stat().st_size for f in data_dir.glob("__consumer_offsets-*/*.log"))


def _rebuild_results(ctx: Context, shape: dict, deadline: Deadline) -> list[Result]:
    group_count, records = shape["groups"], shape["records"]
    requests = max(1, records // group_count // REBUILD_PARTITIONS)
    records = requests * group_count * REBUILD_PARTITIONS
    rounds = ctx.rounds
    run_id = uuid.uuid4().hex[:6]
    topic = f"groups-rebuild-{run_id}"
    groups = [f"rebuild-{run_id}-{i:05d}" for i in range(group_count)]
    broker = kbroker_process(ctx, "groups-rebuild")
    restarts, baselines = [], []
    ctx.log(f"rebuilding {group_count:,} groups from {records:,} commit records")
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, {topic: REBUILD_PARTITIONS})
        written = time.monotonic()
        _write_commits(broker.bootstrap, topic, groups, requests)
        write_s = time.monotonic() - written
        last = group_count - 1
        ready = _offsets_ready(groups[last], topic, _expected_offsets(last, requests), broker.port)
        for _ in range(rounds):
            deadline.check("rebuilding groups")
            empty = kbroker_process(ctx, "groups-empty")
            try:
                baselines.append(timed_start(empty))
            finally:
                empty.stop()
                shutil.rmtree(empty.data_dir, ignore_errors=True)
            stop_cleanly(broker, timeout=max(60.0, deadline.left()))
            restarts.append(timed_start(broker, timeout=max(30.0, deadline.left()), ready=ready))
        wrong = _check_all_groups(broker.bootstrap, groups, topic, requests)
        log_mib = _offsets_log_bytes(broker.data_dir) / 2**20
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    if wrong:
        raise RuntimeError(f"after the restart {len(wrong)} groups have wrong offsets, e.g. {wrong[:3]}")
    params = {"groups": group_count, "commit_records": records, "offsets_per_commit": REBUILD_PARTITIONS,
              "rounds": rounds, "__consumer_offsets MiB": round(log_mib, 1)}
    return [Result(
        SUITE, f"rebuild {group_count:,} groups from {records:,} commit records at start", "s", median(restarts),
        higher_is_better=False, target=f"<= {REBUILD_TARGET_S:g} s", target_value=REBUILD_TARGET_S, params=params,
        note=f"process start to FindCoordinator+OffsetFetch answering; an empty broker takes "
             f"{median(baselines):.2f} s; writing the commits took {write_s:.1f} s; all groups checked")]


def _check_all_groups(bootstrap: str, groups: list[str], topic: str, requests: int) -> list[str]:
    """Groups whose fetched offsets differ from the last ones committed."""
    wrong = []
    with RawConnection(bootstrap, timeout=30) as connection:
        for start in range(0, len(groups), 100):
            chunk = groups[start:start + 100]
            fetched = _fetch_offsets(connection, chunk, topic)
            wrong += [g for i, g in enumerate(chunk, start) if fetched.get(g) != _expected_offsets(i, requests)]
    return wrong


def run(ctx: Context) -> list[Result]:
    return run_parts(ctx, SUITE, TIME_BUDGET, _shape(ctx.quick), (_commit_results, _settle_results, _rebuild_results))


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
