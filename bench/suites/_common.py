"""Pieces the scale, recovery and groups suites share.

A raw Kafka connection over a plain socket (for idle connections, pipelined commits and the
first answer after a restart), timing a `kbroker serve` start until it answers, the peers
(bench.peers) with the one mock setting these suites need, a produce rate with
confluent-kafka, consumer-group members in threads, and running a suite on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench import report
from bench.harness import Context, Result
from bench.peers import (
    Broker,
    ExternalBroker,
    KafkaBroker,
    KafkaPeer,
    MockBroker,
    add_kafka_arguments,
    create_topics,
    delete_topics,
    run_kafka,
)
from kbroker.testing import BrokerProcess
from wire import headers, messages

CLIENT_LOGGING = {"log_level": 3, "log.connection.close": False}  # errors only: restarts are expected here
VALUE_100B = b"v" * 100
_FRAME_SIZE = struct.Struct(">i")


class Deadline:
    """A time budget that every loop of a suite checks, so nothing runs on forever."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    @classmethod
    def for_suite(cls, ctx: Context, budget_s: float) -> Deadline:
        """The suite's own budget, or less when the harness gave it less time."""
        return cls(min(budget_s, ctx.time_left()))

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def check(self, what: str) -> None:
        if self.expired():
            raise TimeoutError(f"out of time: {what}")


def kbroker_process(ctx: Context, name: str, *overrides: str) -> BrokerProcess:
    """A `kbroker serve` (not yet started) with its data under ctx.work_dir/name."""
    return BrokerProcess(ctx.work_dir / name, *overrides, event_loop=ctx.event_loop)


# --- a raw connection ---------------------------------------------------------------------


class RawConnection:
    """One blocking socket speaking Kafka frames built with `wire`; requests may be pipelined."""

    def __init__(self, bootstrap: str, timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_correlation = 0
        self._buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def encode(self, api_key: int, version: int, request) -> bytes:
        """A whole frame (size prefix included) for one request."""
        self._next_correlation += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self._next_correlation, client_id="kbroker-bench")
        body = messages.encode(request, version, headers.encode_request_header(header))
        return _FRAME_SIZE.pack(len(body)) + bytes(body)

    def send(self, api_key: int, version: int, request) -> None:
        self.sock.sendall(self.encode(api_key, version, request))

    def receive(self, api_key: int, version: int):
        """The next response frame, decoded (responses come back in request order)."""
        frame = self._read_frame()
        _, at = headers.decode_response_header(frame, api_key, version)
        response, _ = messages.decode(messages.api(api_key).response.name, version, frame, at)
        return response

    def call(self, api_key: int, version: int, request):
        self.send(api_key, version, request)
        return self.receive(api_key, version)

    def read_available_frames(self) -> list[bytes]:
        """Every complete response frame (without its size) after reading until there is one."""
        frames = self._complete_frames()
        while not frames:
            self._fill()
            frames = self._complete_frames()
        return frames

    def _read_frame(self) -> bytes:
        while len(self._buffer) < 4 or len(self._buffer) < 4 + _FRAME_SIZE.unpack_from(self._buffer)[0]:
            self._fill()
        (size,) = _FRAME_SIZE.unpack_from(self._buffer)
        frame = bytes(self._buffer[4:4 + size])
        del self._buffer[:4 + size]
        return frame

    def _complete_frames(self) -> list[bytes]:
        frames, at, buffer = [], 0, self._buffer
        while len(buffer) - at >= 4:
            (size,) = _FRAME_SIZE.unpack_from(buffer, at)
            if len(buffer) - at - 4 < size:
                break
            frames.append(bytes(buffer[at + 4:at + 4 + size]))
            at += 4 + size
        del buffer[:at]
        return frames

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed by the broker")
        self._buffer += chunk


API_VERSIONS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 18, 3, 8, 9, 10
UNSUPPORTED_VERSION = 35


def api_versions(connection: RawConnection) -> int:
    """ApiVersions v3, as current clients send first, and like them v0 when the broker answers
    UNSUPPORTED_VERSION (librdkafka's mock serves v0-v2); returns the final error code."""
    request = messages.ApiVersionsRequest(client_software_name="kbroker-bench", client_software_version="1")
    code = connection.call(API_VERSIONS, 3, request).error_code
    if code == UNSUPPORTED_VERSION:
        code = connection.call(API_VERSIONS, 0, messages.ApiVersionsRequest()).error_code
    return code


def metadata_answers(bootstrap: str, timeout: float = 2) -> bool:
    """True when the broker answers a Metadata request (v1, no topics) with at least one broker."""
    try:
        with RawConnection(bootstrap, timeout) as connection:
            response = connection.call(METADATA, 1, messages.MetadataRequest(topics=[]))
            return bool(response.brokers)
    except (OSError, ConnectionError):
        return False


def timed_start(broker: BrokerProcess, timeout: float = 120, ready: Callable[[str], bool] = metadata_answers) -> float:
    """Seconds from starting `kbroker serve` to `ready(bootstrap)` (by default: Metadata answered).

    BrokerProcess.start polls the port every 50 ms, so the figure can be up to 50 ms late."""
    started = time.monotonic()
    broker.start(timeout)
    deadline = Deadline(timeout)
    while not ready(broker.bootstrap):
        deadline.check(f"{broker.bootstrap} not ready")
        time.sleep(0.01)
    return time.monotonic() - started


def stop_cleanly(broker: BrokerProcess, timeout: float = 300) -> float:
    """SIGTERM and wait for the clean shutdown (flush, checkpoints, marker); returns its seconds.
    Raises when the broker had to be killed or exited with an error, since what follows (a
    "clean" restart) would then measure crash recovery instead."""
    started = time.monotonic()
    code = broker.stop(signal.SIGTERM, timeout=timeout)
    if code not in (0, None):
        raise RuntimeError(f"kbroker did not shut down cleanly within {timeout:.0f} s (exit code {code})")
    return time.monotonic() - started


def max_versions(connection: RawConnection) -> dict[int, int]:
    """The highest version of each API the broker serves (ApiVersions v0: every broker has it)."""
    response = connection.call(API_VERSIONS, 0, messages.ApiVersionsRequest())
    return {key.api_key: key.max_version for key in response.api_keys}


# --- peers and clients -------------------------------------------------------------------


class TidyExternalBroker(ExternalBroker):
    """`--peer`: topics these suites create there are deleted again on close."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.created: list[str] = []

    def create_topics(self, partitions_by_topic: dict[str, int], timeout: float = 120) -> None:
        create_topics(self.bootstrap, partitions_by_topic, timeout)
        self.created += partitions_by_topic

    def close(self) -> None:
        delete_topics(self.bootstrap, self.created)


@contextlib.contextmanager
def comparison_peers(ctx: Context, with_kafka: bool = True) -> Iterator[list[Broker]]:
    """librdkafka's mock, Apache Kafka (unless `with_kafka` is False or the run has none), then `--peer`
    when given (the order of bench.peers.peers)."""
    with contextlib.ExitStack() as stack:
        mock = MockBroker()
        stack.callback(mock.close)
        found: list[Broker] = [mock, *(run_kafka(ctx, stack) if with_kafka else [])]
        if ctx.peer:
            external = TidyExternalBroker(ctx.peer)
            stack.callback(external.close)
            found.append(external)
        yield found


def create_peer_topics(peer: Broker, partitions_by_topic: dict[str, int], timeout: float = 120) -> None:
    if isinstance(peer, TidyExternalBroker | KafkaBroker):
        peer.create_topics(partitions_by_topic, timeout)
        return
    deadline = Deadline(timeout)
    for topic, partitions in partitions_by_topic.items():
        deadline.check(f"creating topics on {peer.name}")
        peer.create_topic(topic, partitions)


def set_initial_rebalance_delay(peer: Broker, delay_ms: int) -> bool:
    """group.initial.rebalance.delay.ms of the mock, through librdkafka's mock API; False for an
    external broker, whose own setting applies."""
    if not isinstance(peer, MockBroker):
        return False
    function = peer._lib.rd_kafka_mock_group_initial_rebalance_delay_ms  # bench.peers types only what it uses
    function.restype, function.argtypes = None, [ctypes.c_void_p, ctypes.c_int32]
    function(peer._cluster, delay_ms)
    return True


def targets(bootstrap: str, peers: list[Broker]) -> list[tuple[str, str]]:
    """(name, bootstrap) of kbroker and each peer, for harness.rotated."""
    return [("kbroker", bootstrap), *((peer.name, peer.bootstrap) for peer in peers)]


def per_peer(suite: str, name: str, metric: str, kbroker: float | None, peer_figures: dict[str, float | None],
             peer_params: dict[str, dict[str, Any]] | None = None, **fields) -> list[Result]:
    """One Result per peer (the report lines them up by name), or one with no peer. `peer_params` adds to the
    params of one peer's Result what belongs to that peer alone (its figure of each round, say)."""
    if not peer_figures:
        return [Result(suite, name, metric, kbroker, **fields)]
    own = peer_params or {}

    def fields_of(peer_name: str) -> dict[str, Any]:
        if peer_name not in own:
            return fields
        return {**fields, "params": {**fields.get("params", {}), **own[peer_name]}}

    return [Result(suite, name, metric, kbroker, figure, peer_name, **fields_of(peer_name))
            for peer_name, figure in peer_figures.items()]


def produce_rate(bootstrap: str, partitions: list[tuple[str, int]], count: int, value: bytes = VALUE_100B,
                 time_limit: float = 60, **config) -> tuple[float, int]:
    """(msgs/s, delivery errors) for `count` records spread round-robin over `partitions`,
    acks=1, linger.ms=5, timed from the first produce() to the last acknowledgement."""
    errors = 0

    def delivered(error, _message) -> None:
        nonlocal errors
        if error is not None:
            errors += 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "queue.buffering.max.messages": 500_000, "delivery.report.only.error": True,
                         "on_delivery": delivered, **CLIENT_LOGGING, **config})
    producer.list_topics(timeout=10)  # connect and learn the leaders before the clock starts
    produce, poll = producer.produce, producer.poll
    targets = len(partitions)
    deadline = Deadline(time_limit)
    started = time.perf_counter()
    sent = 0
    while sent < count:
        topic, partition = partitions[sent % targets]
        try:
            produce(topic, value, partition=partition)
        except BufferError:
            poll(0.001)
            deadline.check(f"produce stalled after {sent} records")
            continue
        sent += 1
        if not sent & 0x3FFF:
            poll(0)
    left = producer.flush(max(1.0, deadline.left()))
    elapsed = time.perf_counter() - started
    if left:
        raise TimeoutError(f"{left} of {count} records unacknowledged after {time_limit} s")
    return count / elapsed, errors


# --- consumer-group members ---------------------------------------------------------------


class GroupWatch:
    """Every member's current assignment; notes the first moment `settled(assignments)` holds."""

    def __init__(self, members: int, settled: Callable[[list[set[int]]], bool]) -> None:
        self.assignments: list[set[int]] = [set() for _ in range(members)]
        self.settled = settled
        self.settled_at: float | None = None
        self.event = threading.Event()
        self._lock = threading.Lock()

    def assigned(self, member: int, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.assignments[member] = {p.partition for p in partitions}
            if self.settled_at is None and self.settled(self.assignments):
                self.settled_at = time.monotonic()
                self.event.set()

    def revoked(self, member: int, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.assignments[member] -= {p.partition for p in partitions}


class GroupMember(threading.Thread):
    """One confluent-kafka consumer in its own thread: subscribes, polls, and once `commit` is set
    commits explicit offsets synchronously (one partition per OffsetCommit) until `stop` is set."""

    def __init__(self, index: int, bootstrap: str, group: str, topic: str, watch: GroupWatch,
                 stop: threading.Event, commit: threading.Event, **config) -> None:
        super().__init__(name=f"member-{group}-{index}", daemon=True)
        self.index, self.topic, self.watch, self.stop, self.commit = index, topic, watch, stop, commit
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "enable.auto.offset.store": False, **CLIENT_LOGGING, **config}
        self.subscribed_at: float | None = None
        self.commits = 0
        self.error_count = 0
        self.errors: list[str] = []  # the first few

    def run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.topic], on_assign=lambda _c, parts: self.watch.assigned(self.index, parts),
                               on_revoke=lambda _c, parts: self.watch.revoked(self.index, parts))
            self.subscribed_at = time.monotonic()
            while not self.stop.is_set():
                partitions = sorted(self.watch.assignments[self.index])
                if self.commit.is_set() and partitions:
                    self._commit(consumer, partitions)
                else:
                    consumer.poll(0.02)
        except Exception as error:  # reported by the suite, not lost in a thread
            self.error_count += 1
            self.errors.append(repr(error))
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, partitions: list[int]) -> None:
        offset = self.commits + 1
        partition = partitions[self.commits % len(partitions)]
        try:
            result = consumer.commit(offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=False)
            failed = [str(tp.error) for tp in result or [] if tp.error is not None]
        except KafkaException as error:
            failed = [str(error)]
        if not failed:
            self.commits += 1
            return
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.extend(failed)
        consumer.poll(0.01)  # let a rebalance behind the error make progress


@dataclass
class GroupRun:
    stabilise_s: float | None   # last member's subscribe() to the moment the watch was settled
    commits_per_s: float | None
    subscribe_span_s: float | None = None  # first to last member's subscribe()
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)


def run_members(bootstrap: str, groups: list[str], topic: str, settled: Callable[[list[set[int]]], bool],
                commit_seconds: float = 0, timeout: float = 60, warmup: float = 0.3, **config) -> GroupRun:
    """One member per entry of `groups` (the group it joins): time until `settled`, then, when
    `commit_seconds`, the members' aggregate synchronous commit rate."""
    stop, commit = threading.Event(), threading.Event()
    watch = GroupWatch(len(groups), settled)
    members = [GroupMember(i, bootstrap, group, topic, watch, stop, commit, **config) for i, group in enumerate(groups)]
    for member in members:
        member.start()
    try:
        stabilise = rate = span = None
        if watch.event.wait(timeout):
            subscribed = [m.subscribed_at for m in members if m.subscribed_at is not None]
            stabilise, span = watch.settled_at - max(subscribed), max(subscribed) - min(subscribed)
            if commit_seconds:
                commit.set()
                time.sleep(warmup)
                before, started = sum(m.commits for m in members), time.monotonic()
                time.sleep(commit_seconds)
                rate = (sum(m.commits for m in members) - before) / (time.monotonic() - started)
    finally:
        stop.set()
        for member in members:
            member.join(30)
    errors = [e for m in members for e in m.errors]
    return GroupRun(stabilise, rate, span, sum(m.error_count for m in members), errors[:5])


# --- running a suite alone -----------------------------------------------------------------


def run_part(ctx: Context, suite: str, name: str, part: Callable[[], list[Result]]) -> list[Result]:
    """One part's results. In quick mode a failure propagates (it is a smoke test); in a full run
    it becomes a result with no figure, so one failing part does not lose the others."""
    try:
        return part()
    except Exception as error:
        if ctx.quick:
            raise
        return [Result(suite, name, "-", None, note=f"failed: {error!r}")]


def run_parts(ctx: Context, suite: str, time_budget: tuple[int, int], shape: object,
              parts: tuple[Callable[[Context, object, Deadline], list[Result]], ...]) -> list[Result]:
    """Run a suite's parts in turn (run_part), each named after its function, within the suite's budget."""
    deadline = Deadline.for_suite(ctx, time_budget[0 if ctx.quick else 1])
    results: list[Result] = []
    for part in parts:
        results += run_part(ctx, suite, part.__name__.strip("_").replace("_", " "),
                            lambda part=part: part(ctx, shape, deadline))
    return results


def exit_on_sigterm() -> None:
    """SIGTERM (`kill`, a cancelled job) becomes SystemExit, as Ctrl-C becomes KeyboardInterrupt: every
    `finally` and context manager runs, so the brokers, JVMs and ZooKeeper the suites started are
    stopped instead of outliving the run. A second SIGTERM while that cleanup runs is ignored."""

    def terminated(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)


def run_alone(run: Callable[[Context], list[Result]], description: str, budget_s: tuple[int, int],
              argv: list[str] | None = None) -> None:
    """`python -m bench.suites.<name> [--quick] [--rounds N] [--peer host:port] [--no-kafka]`: print a table."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per figure (default 3; quick 1)")
    parser.add_argument("--peer", help="an external broker host:port to compare with, besides the mock")
    add_kafka_arguments(parser)
    parser.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    parser.add_argument("--work-dir", type=Path, help="scratch space (default: a temporary directory)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    with contextlib.ExitStack() as stack:
        work_dir = args.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kbroker-bench-")))
        kafka_peer, why_not = KafkaPeer.for_run(work_dir / "kafka", None if args.no_kafka else args.kafka_version)
        if kafka_peer is not None:
            stack.callback(kafka_peer.close)
            if getattr(sys.modules[run.__module__], "COMPARES_WITH_KAFKA", False):
                kafka_peer.get()  # before the suite's clock starts, as `python -m bench` does
        started = time.monotonic()
        ctx = Context(quick=args.quick, work_dir=work_dir, peer=args.peer, kafka=kafka_peer,
                      rounds=args.rounds or (1 if args.quick else 3), event_loop=args.event_loop,
                      deadline=started + budget_s[0 if args.quick else 1])
        if why_not:
            ctx.notes.append(f"no Apache Kafka peer: {why_not}")
        results = run(ctx)
        print(report.text_table([r.as_json() for r in results]))
        for note in ctx.notes:
            print(f"note: {note}")
        print(f"\n{time.monotonic() - started:.1f} s")
