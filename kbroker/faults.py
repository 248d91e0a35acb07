"""Fault injection and request recording: the unhappy paths of a Kafka application, on demand.

A test asks for a fault; until then `broker.faults` is None and dispatch pays one attribute check per
request. Once a fault (or a recording) is set, every request goes through `Faults.intercept`:

    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=3) as fault:
        ...                                    # the next 3 produce requests answer the error
    assert fault.fired == 3

Errors are shaped the way Kafka shapes them: the response mirrors the entries the request named (topics,
partitions, groups, coordinator keys) and carries the error per partition for partition-level errors, at the
outermost level the API has for the others (coordinator and request-wide errors). A topic/partition filter
answers only the named partitions with the error; the rest of the request is handled normally.

Connection faults (`action`): close before or after handling, hang (handled, never answered), reset part way
through the answer; `refuse_connections(seconds)` closes the listeners for a while. Cluster events: in a
cluster, `move_leadership` really moves a partition's leader through the controller. docs/testing.md is the
guide.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker.apis.dispatch import MalformedRequest, ResponseFrame
from kbroker.net.http import HttpAnswer, HttpRequest, serve_http
from wire import messages
from wire.errors import ErrorCode
from wire.records import read_batch_header

log = logging.getLogger(__name__)

# the connection whose request is being handled (set by the network layer), for a reset mid-response
current_connection: contextvars.ContextVar[Any] = contextvars.ContextVar("current_connection", default=None)

ACTIONS = ("close_before", "close_after", "hang", "reset")
MOVE_TIMEOUT_S = 30.0  # a real leadership move (cluster mode) is done by then, or fails
METADATA = 3  # its errors are per topic: see _metadata_with_error
# errors Kafka reports where the request names the group or coordinator, not per partition
_OUTERMOST_ERRORS = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.PRODUCER_FENCED, ErrorCode.GROUP_ID_NOT_FOUND,
})
# request arrays answered under another name in the response
_ANSWERED_AS = {"responses": ("topic_data", "topics"), "partition_responses": ("partition_data",),
                "coordinators": ("coordinator_keys",), "partitions": ("partition_indexes", "partition_data")}
_KEY_ALIASES = {"partition_index": ("partition", "index"), "index": ("partition_index", "partition"),
                "partition": ("partition_index", "index"), "name": ("topic",), "topic": ("name",)}
_SCALAR_KEYS = ("partition_index", "index", "partition", "key", "name", "topic", "group_id")
# the fields naming an entry, copied from the request's entry to the answer's
_ENTRY_KEYS = frozenset({"name", "topic", "topic_id", "partition_index", "partition", "index", "key", "group_id",
                         "member_id", "group_instance_id", "transactional_id", "resource_type", "resource_name"})
# what Kafka answers as -1 (unknown) in an entry that carries an error
_UNKNOWN_IN_ERRORS = frozenset({"base_offset", "high_watermark", "last_stable_offset", "log_start_offset", "offset",
                                "committed_offset", "low_watermark", "node_id", "port", "leader_id", "leader_epoch",
                                "committed_leader_epoch", "generation_id", "member_epoch", "timestamp"})


class InjectedDisconnect(MalformedRequest):
    """A connection fault: the network layer closes the connection, as for a frame it cannot read."""


def api_key_of(api: str | int) -> int:
    """An API by Kafka's name ("Produce", "FindCoordinator") or key."""
    known = messages.apis()
    if isinstance(api, int) or str(api).isdigit():
        if int(api) in known:
            return int(api)
    else:
        for key, spec in known.items():
            if spec.name.lower() == str(api).lower():
                return key
    raise ValueError(f"unknown API {api!r}")


def error_code_of(error: str | int) -> int:
    """An error by Kafka's name ("NOT_LEADER_OR_FOLLOWER") or code."""
    if isinstance(error, int) or str(error).lstrip("-").isdigit():
        return int(error)
    try:
        return int(ErrorCode[str(error).upper()])
    except KeyError:
        raise ValueError(f"unknown Kafka error {error!r}") from None


def _error_name(code: int) -> str | int:
    try:
        return ErrorCode(code).name
    except ValueError:
        return code


@dataclass(eq=False)
class Fault:
    """One injected fault. `fired` counts the requests it acted on; `with` removes it on leaving."""

    id: int
    api: int | None = None            # None: any API
    error: int | None = None
    count: int | None = None          # at most this many requests (None: unlimited)
    rate: float | None = None         # the fraction of matching requests it acts on (None: all)
    delay_ms: int = 0
    throttle_ms: int | None = None
    action: str | None = None         # one of ACTIONS
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    group: str | None = None
    fired: int = 0
    owner: Faults | None = field(default=None, repr=False)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        if self.owner is not None:
            self.owner.remove(self.id)

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def to_json(self) -> dict:
        shown = {"id": self.id, "fired": self.fired}
        if self.api is not None:
            shown["api"] = messages.api(self.api).name
        if self.error is not None:
            shown["error"] = _error_name(self.error)
        for name in ("count", "rate", "throttle_ms", "action", "topic", "partition", "client_id", "group"):
            if getattr(self, name) is not None:
                shown[name] = getattr(self, name)
        if self.delay_ms:
            shown["delay_ms"] = self.delay_ms
        return shown

    def matches(self, header, request) -> bool:
        if self.exhausted or (self.api is not None and header.request_api_key != self.api):
            return False
        if self.client_id is not None and header.client_id != self.client_id:
            return False
        if self.group is not None and self.group not in _groups_named(request):
            return False
        if header.request_api_key == METADATA:  # names topics, not partitions; none named means all of them
            return self.topic is None or request.topics is None or any(t.name == self.topic for t in request.topics)
        if self.topic is not None or self.partition is not None:
            return bool(_split(request, self.topic, self.partition)[1])
        return True


class Recording:
    """Every request and its answer, as dicts (see `entry`), kept in `entries` and/or written as JSON lines."""

    def __init__(self, path: str | Path | None = None, keep: bool = True) -> None:
        self.entries: list[dict] = []
        self.keep = keep
        self.path = Path(path) if path is not None else None
        self._file = self.path.open("a", encoding="utf-8") if self.path is not None else None
        self._lock = threading.Lock()
        self.owner: Faults | None = None

    def add(self, entry: dict) -> None:
        with self._lock:
            if self.keep:
                self.entries.append(entry)
            if self._file is not None:
                self._file.write(json.dumps(entry) + "\n")
                self._file.flush()

    def requests(self, api: str | int) -> list[dict]:
        """The entries of one API, in arrival order."""
        key = api_key_of(api)
        return [entry for entry in list(self.entries) if entry["api_key"] == key]

    @property
    def closed(self) -> bool:
        """Whether its file (if it has one) is closed: it records no more."""
        return self._file is None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owner is not None:
            self.owner.stop_recording(self)
        self.close()


class Faults:
    """The faults of one broker. Mutated from any thread: the rules are a tuple replaced whole, so the event loop
    always reads a consistent set; the broker's `faults` attribute is this object only while something is set."""

    def __init__(self, broker, servers: Iterable = (), loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.broker = broker
        self.servers = list(servers)   # kbroker.net.server.Server: closed for a while by refuse_connections
        self._rules: tuple[Fault, ...] = ()
        self._recordings: tuple[Recording, ...] = ()
        self._next_id = 1
        self._lock = threading.Lock()
        self._random = random.Random()
        self._loop = loop
        self._refusing: set[asyncio.Future] = set()  # refuse_connections under way: kept until they end

    # --- asking for faults ----------------------------------------------------------------------

    def inject(self, api: str | int | None = None, error: str | int | None = None, *, count: int | None = None,
               rate: float | None = None, delay_ms: int = 0, throttle_ms: int | None = None,
               action: str | None = None, topic: str | None = None, partition: int | None = None,
               client_id: str | None = None, group: str | None = None) -> Fault:
        """Add a fault; it acts until removed (`with`, `remove()`, `clear()`) or `count` requests used it up."""
        if action is not None and action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}")
        if rate is not None and not 0 <= rate <= 1:
            raise ValueError("rate must be between 0 and 1")
        if error is None and action is None and not delay_ms and throttle_ms is None:
            raise ValueError("a fault needs an error, a delay_ms, a throttle_ms or an action")
        with self._lock:
            fault = Fault(self._next_id, None if api is None else api_key_of(api),
                          None if error is None else error_code_of(error), count, rate, int(delay_ms),
                          throttle_ms, action, topic, partition, client_id, group, owner=self)
            self._next_id += 1
            self._rules = (*self._rules, fault)
            self._sync()
        return fault

    def add(self, spec: dict) -> Fault:
        """`inject` from a JSON object (the admin endpoint, the CLI)."""
        allowed = {"api", "error", "count", "rate", "delay_ms", "throttle_ms", "action", "topic", "partition",
                   "client_id", "group"}
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        return self.inject(**spec)

    def remove(self, fault_id: int) -> bool:
        with self._lock:
            kept = tuple(rule for rule in self._rules if rule.id != fault_id)
            removed = len(kept) != len(self._rules)
            self._rules = kept
            self._sync()
        return removed

    def clear(self) -> None:
        with self._lock:
            self._rules = ()
            self._sync()

    def list(self) -> list[Fault]:
        return list(self._rules)

    def record(self, path: str | Path | None = None, keep: bool = True) -> Recording:
        """Record every request and response from now on (until the `with` block ends or `stop_recording`)."""
        recording = Recording(path, keep)
        recording.owner = self
        with self._lock:
            self._recordings = (*self._recordings, recording)
            self._sync()
        return recording

    def recordings(self) -> list[Recording]:
        return list(self._recordings)

    def stop_recording(self, recording: Recording | None = None) -> None:
        """Stop one recording (all without an argument) and close its file; its entries stay readable."""
        with self._lock:
            stopped = [r for r in self._recordings if recording is None or r is recording]
            self._recordings = tuple(r for r in self._recordings if r not in stopped)
            self._sync()
        for each in stopped:
            each.close()

    def _sync(self) -> None:
        """Install this object on the broker while a fault or a recording exists, and only then."""
        self.broker.faults = self if (self._rules or self._recordings) else None

    # --- cluster events ---------------------------------------------------------------------------

    def coordinator_unavailable(self, error: str | int = "COORDINATOR_NOT_AVAILABLE", *, count: int | None = None,
                                group: str | None = None) -> list[Fault]:
        """The group coordinator is away (COORDINATOR_NOT_AVAILABLE), loading (COORDINATOR_LOAD_IN_PROGRESS) or
        moved (NOT_COORDINATOR): FindCoordinator and every group API answer `error`. Remove the faults to end it."""
        apis = ["JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
                "ConsumerGroupHeartbeat", "DescribeGroups"]
        if error_code_of(error) != ErrorCode.NOT_COORDINATOR:  # a moved coordinator is still found (elsewhere)
            apis.append("FindCoordinator")
        return [self.inject(api, error, count=count, group=group) for api in apis
                if api_key_of(api) in _served_apis()]

    def leadership_moved(self, topic: str, partition: int | None = None, *, count: int | None = None) -> list[Fault]:
        """As a client sees a leader moving away: produce, fetch, list-offsets and leader-epoch requests for the
        partition answer NOT_LEADER_OR_FOLLOWER (a single node stays the leader, so the client finds it again
        through Metadata once the faults are removed or used up). In a cluster, `move_leadership` is the real
        move; this stays for "what the client sees" tests."""
        return [self.inject(api, "NOT_LEADER_OR_FOLLOWER", topic=topic, partition=partition, count=count)
                for api in ("Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch")]

    def leader_epoch_bumped(self, topic: str, partition: int | None = None, *,
                            count: int | None = None) -> list[Fault]:
        """As a follower or consumer sees a newer leader epoch: its fetches answer FENCED_LEADER_EPOCH. In a
        cluster, `move_leadership` really bumps the epoch (every election does)."""
        return [self.inject(api, "FENCED_LEADER_EPOCH", topic=topic, partition=partition, count=count)
                for api in ("Fetch", "OffsetForLeaderEpoch", "ListOffsets")]

    def move_leadership(self, topic: str, partition: int | None = None, to: int | None = None, *,
                        timeout: float = MOVE_TIMEOUT_S) -> dict[int, int]:
        """Cluster mode: REALLY move the partition's leadership (every partition of the topic when None) to broker
        `to`, else to the next in-sync replica after the leader, as an operator does with Kafka's tools; the
        leader epoch goes up, as with every election. Returns {partition: new leader} once this broker's metadata
        shows them. From any thread but the broker's event loop (there, await `move_leadership_async`)."""
        loop = self._loop_of_broker()
        if not _other_thread(loop):
            raise RuntimeError("move_leadership waits for the broker's event loop: on it, await "
                               "move_leadership_async instead")
        moving = self.move_leadership_async(topic, partition, to, timeout=timeout)
        return asyncio.run_coroutine_threadsafe(moving, loop).result(timeout + 5)

    async def move_leadership_async(self, topic: str, partition: int | None = None, to: int | None = None, *,
                                    timeout: float = MOVE_TIMEOUT_S) -> dict[int, int]:
        """`move_leadership` on the broker's event loop: AlterPartitionReassignments with the new leader first in
        the same replica set, then a PREFERRED ElectLeaders, both sent to the controller over the Kafka protocol
        (so any broker can ask, the controller or not), then a wait for this broker's metadata."""
        member = self._cluster_member()
        moves = _planned_moves(member.metadata, topic, partition, to)
        deadline = asyncio.get_running_loop().time() + timeout
        log.warning("fault injected: leadership of %s moves (partition: new leader) %s", topic,
                    {p: move.leader for p, move in moves.items()})
        await _ask_controller(member, 45, 0, _reassignment_request(topic, moves), _reassignment_errors, deadline)
        await _ask_controller(member, 43, 1, _election_request(topic, moves, deadline), _election_errors, deadline)
        await _until_leaders_shown(member.metadata, topic, moves, deadline)
        return {p: move.leader for p, move in moves.items()}

    def _cluster_member(self):
        """The broker's cluster membership; a single node has no other replica to move leadership to."""
        member = getattr(self.broker, "cluster", None)
        if member is None:
            raise ValueError("move_leadership needs a cluster (zookeeper.connect): a single node is every "
                             "partition's only replica; leadership_moved shows a client what a move looks like")
        return member

    def force_rebalance(self, group: str) -> bool:
        """The group rebalances now. A classic group's members rejoin (heartbeats answer REBALANCE_IN_PROGRESS);
        a consumer-protocol (KIP-848) group moves to a new epoch its members reconcile to. False when the group
        has nothing to rebalance (unknown, empty, or a classic group already rebalancing)."""
        return self._on_loop(lambda: self._coordinator_of(group).force_rebalance(group))

    def expire_session(self, group: str, member_id: str | None = None) -> list[str]:
        """End a member's session now (every member's when None), as if its heartbeats stopped: it is removed,
        the others rebalance, and its next request answers UNKNOWN_MEMBER_ID. Classic and KIP-848 groups."""
        return self._on_loop(lambda: self._coordinator_of(group).expire_sessions(group, member_id))

    def _coordinator_of(self, group: str):
        """The coordinator of the group's protocol: consumer (KIP-848) groups have their own."""
        coordinator = self.broker.coordinator
        return coordinator.consumer_groups if group in coordinator.consumer_groups.groups else coordinator.groups

    def truncate_log(self, topic: str, partition: int, offset: int) -> bool:
        """DATA LOSS, as after an unclean leader election: the partition's log loses every batch from `offset` on
        (acknowledged records included). Returns whether anything went."""
        log.warning("fault injected: UNCLEAN truncation of %s-%d to offset %d (acknowledged data is lost)",
                    topic, partition, offset)
        return self._on_loop(lambda: self.broker.partition_log(topic, partition).truncate_to(offset))

    def _on_loop(self, action: Callable[[], Any]) -> Any:
        """Run `action` on the broker's event loop (where the coordinator and logs live) and return its result."""
        loop = self._loop_of_broker()
        if not _other_thread(loop):
            return action()

        async def run() -> Any:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(30)

    def refuse_connections(self, seconds: float) -> None:
        """Close the listeners for `seconds` (new connections are refused; open ones stay), then listen again.
        Returns once they are closed, so a connection attempted next is refused."""
        loop = self._loop_of_broker()
        if _other_thread(loop):
            self._on_loop(self._close_listeners)
            refusing = asyncio.run_coroutine_threadsafe(self._listen_again_after(seconds), loop)
        else:
            self._close_listeners()
            refusing = loop.create_task(self._listen_again_after(seconds))
        self._refusing.add(refusing)
        refusing.add_done_callback(self._refusing.discard)

    def _close_listeners(self) -> None:
        for server in self.servers:
            if server._server is not None:
                server._server.close()

    async def _listen_again_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self.broker.closing:
            return  # the broker stopped meanwhile: nothing to listen for
        for server in self.servers:
            try:
                await server.start()  # the same port: it was bound before, so start() kept the real one
            except OSError as error:  # another process took the port meanwhile
                log.error("fault: refuse_connections ended but listening again on port %s failed: %s",
                          server.port, error)

    def _loop_of_broker(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("this broker's event loop is unknown")
        return self._loop

    # --- the request path ------------------------------------------------------------------------

    def _firing(self, header, request) -> list[Fault]:
        firing = []
        api_key = header.request_api_key
        for rule in self._rules:
            if rule.api is not None and rule.api != api_key:
                continue
            if rule.matches(header, request) and (rule.rate is None or self._random.random() < rule.rate):
                rule.fired += 1
                firing.append(rule)
        return firing

    async def intercept(self, header, request, handle: Callable[[Any], Awaitable[Any]],
                        encode: Callable[[Any], ResponseFrame]) -> ResponseFrame | None:
        """Handle one request with the faults that fire on it applied, and record it."""
        fired = self._firing(header, request) if self._rules else []
        if not fired and not self._recordings:  # faults for other requests: as if there were none
            response = await handle(request)
            return None if response is None else encode(response)
        started = time.perf_counter()
        response = None
        try:
            response = await self._apply(fired, header, request, handle)
            frame = None if response is None else encode(response)
            reset = next((rule for rule in fired if rule.action == "reset"), None)
            if reset is not None:
                _reset_connection(frame)
            return frame
        finally:
            if self._recordings:
                entry = _entry(header, request, response, started, fired)
                for recording in self._recordings:
                    recording.add(entry)

    async def _apply(self, fired: list[Fault], header, request, handle) -> Any:
        actions = {rule.action for rule in fired}
        if "close_before" in actions:
            raise InjectedDisconnect("fault: connection closed before handling the request")
        erring = next((rule for rule in fired if rule.error is not None), None)
        # handled first, then held: a produce pipelined behind a held one must not reach the log before it
        response = await self._answer(erring, header, request, handle)
        hanging = [rule for rule in fired if rule.action == "hang"]
        while any(rule in self._rules for rule in hanging):
            await asyncio.sleep(0.02)  # never answered while the fault exists
        delay = sum(rule.delay_ms for rule in fired)
        if delay:
            await asyncio.sleep(delay / 1000)
        if "close_after" in actions:
            raise InjectedDisconnect("fault: connection closed after handling the request, before answering")
        throttles = [rule.throttle_ms for rule in fired if rule.throttle_ms is not None]
        if throttles and response is not None and "throttle_time_ms" in response._fields:
            response.throttle_time_ms = max(throttles)
        return response

    async def _answer(self, erring: Fault | None, header, request, handle) -> Any:
        if erring is None:
            return await handle(request)
        if header.request_api_key == METADATA:
            return _metadata_with_error(await handle(request), erring)
        version = header.request_api_version
        if erring.topic is None and erring.partition is None:
            return error_response(header.request_api_key, version, request, erring.error)
        kept, failed = _split(request, erring.topic, erring.partition)
        failed_part = error_response(header.request_api_key, version, failed, erring.error)
        if kept is None:
            return failed_part
        handled = await handle(kept)
        return _merged(handled, failed_part)


# --- a real leadership move (cluster mode), through the controller -------------------------------------------

_CLIENT_ID = "kbroker-faults"
_CONTROLLER_RETRY_S = 0.2
_LEADER_CHECK_S = 0.05
_CONTROLLER_MOVED = frozenset({ErrorCode.NOT_CONTROLLER})


class LeadershipMoveFailed(RuntimeError):
    """The controller refused a step of the move (the partition changed meanwhile, or it is being reassigned)."""


@dataclass(frozen=True)
class _Move:
    leader: int                 # the broker that leads once the move is done
    replicas: tuple[int, ...]   # the same replica set, `leader` first: the preferred leader


def _planned_moves(cache, topic: str, partition: int | None, to: int | None) -> dict[int, _Move]:
    """Each partition's move, checked against this broker's metadata before anything is sent: all or none."""
    if not cache.contains(topic):
        raise ValueError(f"unknown topic {topic!r}")
    states = cache.partitions(topic) if partition is None else [cache.partition(topic, partition)]
    if states == [None]:
        raise ValueError(f"unknown partition {topic}-{partition}")
    moves = {}
    for state in states:
        if to is not None and state.leader == to and partition is None:
            continue  # already where every partition goes
        leader = _new_leader(cache, state, to)
        moves[state.partition] = _Move(leader, (leader, *(r for r in state.replicas if r != leader)))
    if not moves:
        raise ValueError(f"broker {to} already leads every partition of {topic}")
    return moves


def _new_leader(cache, state, to: int | None) -> int:
    """`to` when it may lead, else the first in-sync live replica after the current leader in replica order."""
    where = f"{state.topic}-{state.partition}"
    eligible = [r for r in state.replicas if r != state.leader and r in state.isr and cache.alive_broker(r) is not None]
    if to is not None:
        if to == state.leader:
            raise ValueError(f"broker {to} already leads {where}")
        if to not in eligible:
            raise ValueError(f"broker {to} cannot lead {where}: it is not a live in-sync replica "
                             f"(replicas {list(state.replicas)}, in sync {list(state.isr)})")
        return to
    if not eligible:
        raise ValueError(f"no other in-sync replica to lead {where} (leader {state.leader}, replicas "
                         f"{list(state.replicas)}, in sync {list(state.isr)})")
    after = state.replicas.index(state.leader) + 1 if state.leader in state.replicas else 0
    ring = state.replicas[after:] + state.replicas[:after]
    return next(r for r in ring if r in eligible)


def _reassignment_request(topic: str, moves: dict[int, _Move]):
    R = messages.AlterPartitionReassignmentsRequest
    partitions = [R.ReassignablePartition(partition_index=p, replicas=list(m.replicas)) for p, m in moves.items()]
    return R(timeout_ms=int(MOVE_TIMEOUT_S * 1000), topics=[R.ReassignableTopic(name=topic, partitions=partitions)])


def _election_request(topic: str, moves: dict[int, _Move], deadline: float):
    R = messages.ElectLeadersRequest
    remaining_ms = max(int((deadline - asyncio.get_running_loop().time()) * 1000), 1)
    return R(election_type=0, timeout_ms=remaining_ms,  # 0: PREFERRED, the first replica of the assignment
             topic_partitions=[R.TopicPartitions(topic=topic, partitions=list(moves))])


def _reassignment_errors(response) -> list[tuple[int, str]]:
    if response.error_code:
        return [(response.error_code, response.error_message or "")]
    return [(p.error_code, f"partition {p.partition_index}: {p.error_message or _error_name(p.error_code)}")
            for t in response.responses for p in t.partitions if p.error_code]


def _election_errors(response) -> list[tuple[int, str]]:
    if response.error_code:
        return [(response.error_code, str(_error_name(response.error_code)))]
    return [(p.error_code, f"partition {p.partition_id}: {p.error_message or _error_name(p.error_code)}")
            for t in response.replica_election_results for p in t.partition_result
            if p.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)]  # not needed: it leads already


async def _ask_controller(member, api_key: int, version: int, request,
                          errors_of: Callable[[Any], list[tuple[int, str]]], deadline: float) -> None:
    """One request to the active controller (found in this broker's metadata) on the broker's own outgoing
    connection type, so the event loop keeps serving; asked again while there is no controller or it moved,
    until `deadline`."""
    from kbroker.cluster.broker_connection import BrokerConnection

    loop = asyncio.get_running_loop()
    name = messages.api(api_key).name
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"{name}: no active controller answered in time")
        endpoint = member.controller_endpoint()
        if endpoint is None:
            await asyncio.sleep(_CONTROLLER_RETRY_S)
            continue
        if endpoint.security_protocol != "PLAINTEXT":
            raise LeadershipMoveFailed(f"the controller's inter-broker listener is {endpoint.security_protocol}: "
                                       "move_leadership speaks PLAINTEXT only")
        connection = BrokerConnection(endpoint.host, endpoint.port, _CLIENT_ID)
        try:
            response = await connection.request(api_key, version, request, timeout_s=min(remaining, 15))
        finally:
            connection.close()
        failed = errors_of(response)
        if not failed:
            return
        if all(code in _CONTROLLER_MOVED for code, _ in failed):
            await asyncio.sleep(_CONTROLLER_RETRY_S)  # the metadata names the new controller shortly
            continue
        if any(code == ErrorCode.REQUEST_TIMED_OUT for code, _ in failed):
            raise TimeoutError(f"{name}: the controller elected but did not see the new leaders in time")
        raise LeadershipMoveFailed(f"{name} refused by the controller: " + "; ".join(text for _, text in failed))


async def _until_leaders_shown(cache, topic: str, moves: dict[int, _Move], deadline: float) -> None:
    """Returns once this broker's metadata names every new leader: a client asking it next sees the move."""
    loop = asyncio.get_running_loop()
    while True:
        waiting = [p for p, move in moves.items() if getattr(cache.partition(topic, p), "leader", None) != move.leader]
        if not waiting:
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"the controller elected new leaders for {topic} partitions {waiting}, but this "
                               "broker's metadata did not show them in time")
        await asyncio.sleep(_LEADER_CHECK_S)


# --- shaping an error response from the schema ------------------------------------------------------


def _metadata_with_error(response, fault: Fault):
    """Metadata's errors are per topic (or per partition): the brokers and the controller stay in the answer, as
    Kafka keeps them, and every topic the fault names (all of them, even for a request naming none) carries the
    error, on its partition alone when the fault names one."""
    for topic in response.topics:
        if fault.topic is not None and topic.name != fault.topic:
            continue
        if fault.partition is None:
            topic.error_code, topic.partitions = fault.error, []
            continue
        for partition in topic.partitions:
            if partition.partition_index == fault.partition:
                partition.error_code = fault.error
    return response


def _served_apis() -> frozenset[int]:
    from kbroker.apis.registry import HANDLERS
    return frozenset(HANDLERS)


def error_response(api_key: int, version: int, request, error: int):
    """The response Kafka gives when `error` hits every entry `request` names: per partition (or per group,
    coordinator key...) for partition-level errors, at the outermost level carrying an error for the others.
    An acks=0 produce gets no response."""
    if api_key == 0 and getattr(request, "acks", 1) == 0:
        return None
    spec = messages.api(api_key).response
    classes = messages.classes(spec.name)
    outermost = error in _OUTERMOST_ERRORS
    response, _ = _mirror(request, spec.fields, classes[spec.name], classes, version, error, outermost)
    return response


def _mirror(source, fields, cls, classes, version: int, error: int, outermost: bool) -> tuple[Any, bool]:
    """An instance of `cls` naming what `source` names; returns it and whether it carries `error` somewhere."""
    target = cls()
    present = [f for f in fields if version in f.versions]
    for spec in present:
        if spec.attr in _UNKNOWN_IN_ERRORS and spec.type in ("int16", "int32", "int64"):
            setattr(target, spec.attr, -1)
    has_error = any(f.attr == "error_code" for f in present)
    if has_error and outermost:
        target.error_code = error
        _copy_keys(source, target, present)
        return target, True
    carried = False
    pairs = _paired_arrays(source, present)
    for response_field, items in pairs:
        mirrored = [_mirror(_as_entry(item), response_field.fields, classes[response_field.struct_name], classes,
                            version, error, outermost) for item in items]
        setattr(target, response_field.attr, [entry for entry, _ in mirrored])
        carried = carried or any(flag for _, flag in mirrored)
    _copy_keys(source, target, present)
    if has_error and not carried:
        target.error_code = error
        carried = True
    return target, carried


def _paired_arrays(source, present) -> list[tuple[Any, list]]:
    """Each struct array of the response with the request array it answers."""
    struct_arrays = [f for f in present if f.is_array and f.is_struct]
    pairs = []
    for response_field in struct_arrays:
        for name in (response_field.attr, *_ANSWERED_AS.get(response_field.attr, ())):
            items = getattr(source, name, None)
            if isinstance(items, list):
                pairs.append((response_field, items))
                break
    if not pairs and len(struct_arrays) == 1:  # one array each side: one answers the other
        lists = [getattr(source, name) for name in getattr(source, "_fields", ())
                 if isinstance(getattr(source, name), list) and getattr(source, name)]
        if len(lists) == 1:
            pairs.append((struct_arrays[0], lists[0]))
    return pairs


class _Scalar:
    """An entry of a request array of plain values (partition indexes, coordinator keys) seen as a struct."""

    def __init__(self, value: object) -> None:
        self.value = value
        self._fields = ()


def _as_entry(item: object) -> object:
    return item if hasattr(item, "_fields") else _Scalar(item)


def _copy_keys(source, target, present) -> None:
    for spec in present:
        if spec.is_array or spec.is_struct or spec.attr == "error_code":
            continue
        if isinstance(source, _Scalar):
            if spec.attr in _SCALAR_KEYS and isinstance(source.value, type(spec.default) if spec.default is not None
                                                        else object):
                setattr(target, spec.attr, source.value)
                return
            continue
        if spec.attr not in _ENTRY_KEYS:
            continue
        for name in (spec.attr, *_KEY_ALIASES.get(spec.attr, ())):
            if name in source._fields:
                value = getattr(source, name)
                if not isinstance(value, list | bytes | bytearray | memoryview) and not hasattr(value, "_fields"):
                    setattr(target, spec.attr, value)
                break


def _clone(message):
    copy = type(message)()
    for name in message._fields:
        setattr(copy, name, getattr(message, name))
    return copy


def _topic_array(message) -> str | None:
    """The request's array of topic entries: the first array whose entries have a name or topic."""
    for name in message._fields:
        value = getattr(message, name)
        if isinstance(value, list) and value and hasattr(value[0], "_fields") and \
                ("name" in value[0]._fields or "topic" in value[0]._fields):
            return name
    return None


def _partition_array(topic) -> str | None:
    for name in topic._fields:
        value = getattr(topic, name)
        if isinstance(value, list) and value and (isinstance(value[0], int) or (
                hasattr(value[0], "_fields") and {"partition", "partition_index", "index"} & set(value[0]._fields))):
            return name
    return None


def _partition_of(entry) -> int:
    if isinstance(entry, int):
        return entry
    for name in ("partition_index", "partition", "index"):
        if name in entry._fields:
            return getattr(entry, name)
    return -1


def _topic_name(entry) -> str | None:
    return getattr(entry, "name", None) if "name" in entry._fields else getattr(entry, "topic", None)


def _split(request, topic: str | None, partition: int | None) -> tuple[Any, Any]:
    """(the request without the entries of `topic`/`partition`, or None when nothing is left; a request of only
    those entries, or None when it names none of them)."""
    topics_field = _topic_array(request)
    if topics_field is None:
        return request, None
    kept_topics, failed_topics = [], []
    for entry in getattr(request, topics_field):
        if topic is not None and _topic_name(entry) != topic:
            kept_topics.append(entry)
            continue
        partitions_field = _partition_array(entry)
        if partition is None or partitions_field is None:
            (failed_topics if partition is None else kept_topics).append(entry)
            continue
        kept, failed = [], []
        for item in getattr(entry, partitions_field):
            (failed if _partition_of(item) == partition else kept).append(item)
        for chosen, into in ((kept, kept_topics), (failed, failed_topics)):
            if chosen:
                part = _clone(entry)
                setattr(part, partitions_field, chosen)
                into.append(part)
    failed_request = None
    if failed_topics:
        failed_request = _clone(request)
        setattr(failed_request, topics_field, failed_topics)
    kept_request = None
    if kept_topics:
        kept_request = _clone(request)
        setattr(kept_request, topics_field, kept_topics)
    return kept_request, failed_request


def _merged(handled, failed):
    """The handler's answer for the untouched entries plus the error answer for the others, topic by topic."""
    if handled is None or failed is None:
        return handled if failed is None else failed
    topics_field = _topic_array(failed)
    if topics_field is None:
        return handled
    by_name = {_topic_name(entry): entry for entry in getattr(handled, topics_field)}
    for entry in getattr(failed, topics_field):
        same = by_name.get(_topic_name(entry))
        partitions_field = _partition_array(entry)
        if same is not None and partitions_field is not None:
            setattr(same, partitions_field, getattr(same, partitions_field) + getattr(entry, partitions_field))
        else:
            getattr(handled, topics_field).append(entry)
    return handled


def _groups_named(request) -> set[str]:
    named = set()
    for name in ("group_id", "key"):
        value = getattr(request, name, None)
        if isinstance(value, str):
            named.add(value)
    for name in ("groups", "coordinator_keys"):
        for entry in getattr(request, name, None) or ():
            named.add(entry if isinstance(entry, str) else getattr(entry, "group_id", None))
    return named


# --- connection faults ----------------------------------------------------------------------------


def _reset_connection(frame: ResponseFrame | None) -> None:
    """Send half of the answer's first bytes, then a TCP reset (RST, not FIN)."""
    connection = current_connection.get()
    if connection is None:
        raise InjectedDisconnect("fault: connection reset")
    partial = bytes(frame.data[:max(1, len(frame.data) // 2)]) if frame is not None else b""
    connection.reset(partial)
    raise InjectedDisconnect("fault: connection reset mid-response")


def linger_zero(sock: socket.socket) -> None:
    """Make close() send a RST, as a crashed peer or a middlebox does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _other_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is not loop
    except RuntimeError:
        return True


# --- recording ---------------------------------------------------------------------------------------


def _entry(header, request, response, started: float, fired: list[Fault]) -> dict:
    return {
        "time": time.time(),
        "api": messages.api(header.request_api_key).name,
        "api_key": header.request_api_key,
        "version": header.request_api_version,
        "client_id": header.client_id,
        "correlation_id": header.correlation_id,
        "request": plain(request),
        "response": plain(response),
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        "faults": [rule.id for rule in fired],
    }


def plain(value: object, name: str = "") -> object:
    """A decoded message as JSON-ready values; record batches as their headers (producer id, sequence...)."""
    if hasattr(value, "_fields") and not isinstance(value, tuple):
        return {field_name: plain(getattr(value, field_name), field_name) for field_name in value._fields}
    if isinstance(value, list):
        return [plain(item, name) for item in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return _batches(value) if name == "records" else bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return {"unrecorded": type(value).__name__}  # e.g. a file region of a fetch answer


def _batches(data: bytes | bytearray | memoryview) -> list[dict]:
    found, position = [], 0
    view = memoryview(data)
    while len(view) - position >= 61:
        try:
            header = read_batch_header(view, position)
        except Exception:  # a legacy message set or a torn tail: what was read so far
            break
        found.append({"base_offset": header.base_offset, "producer_id": header.producer_id,
                      "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
                      "record_count": header.record_count, "transactional": header.is_transactional})
        position += header.size
    return found


# --- the admin endpoint: the same over HTTP, for tests in any language ---------------------------------

# POST /events/<name> with the method's keyword arguments as JSON
_EVENTS = {"coordinator-unavailable": "coordinator_unavailable", "leadership-moved": "leadership_moved",
           "leader-epoch-bumped": "leader_epoch_bumped", "force-rebalance": "force_rebalance",
           "expire-session": "expire_session", "truncate-log": "truncate_log"}
# the same, for events that wait for the cluster: awaited on the broker's event loop
_AWAITED_EVENTS = {"move-leadership": "move_leadership_async"}


async def serve_admin(faults: Faults, port: int, host: str = "127.0.0.1") -> asyncio.Server:
    """`kbroker.faults.port`: JSON over HTTP on 127.0.0.1 (POST/GET/DELETE /faults, POST/DELETE /recording,
    POST /refuse-connections, POST /events/<name>), read and answered by kbroker.net.http's helpers."""

    async def answer(request: HttpRequest) -> HttpAnswer:
        try:
            body = json.loads(request.body) if request.body else {}
            status, result = await _route_admin_async(faults, request.method, request.path.rstrip("/"), body)
        except (ValueError, KeyError, TypeError) as error:
            status, result = 400, {"error": str(error)}
        except LeadershipMoveFailed as error:
            status, result = 409, {"error": str(error)}
        except TimeoutError as error:
            status, result = 504, {"error": str(error) or "timed out"}
        return HttpAnswer(status, "application/json", json.dumps(result).encode())

    server = await serve_http(answer, host, port)
    log.info("fault injection endpoint on http://%s:%d/faults", host, server.sockets[0].getsockname()[1])
    return server


async def _route_admin_async(faults: Faults, method: str, path: str, body) -> tuple[int, object]:
    """The events that wait on the event loop (POST /events/move-leadership), then `_route_admin` for the rest."""
    parts = [part for part in path.split("/") if part]
    if len(parts) == 2 and parts[0] == "events" and parts[1] in _AWAITED_EVENTS and method == "POST":
        return 200, {"result": await getattr(faults, _AWAITED_EVENTS[parts[1]])(**body)}
    return _route_admin(faults, method, path, body)


def _route_admin(faults: Faults, method: str, path: str, body) -> tuple[int, object]:
    parts = [part for part in path.split("/") if part]
    if parts == ["faults"]:
        if method == "GET":
            return 200, [fault.to_json() for fault in faults.list()]
        if method == "POST":
            specs = body if isinstance(body, list) else [body]
            return 201, [faults.add(spec).to_json() for spec in specs]
        if method == "DELETE":
            faults.clear()
            return 200, {"cleared": True}
    elif len(parts) == 2 and parts[0] == "faults" and parts[1].isdigit():
        if method == "GET":
            found = [fault.to_json() for fault in faults.list() if fault.id == int(parts[1])]
            return (200, found[0]) if found else (404, {"error": "no such fault"})
        if method == "DELETE":
            return (200, {"removed": True}) if faults.remove(int(parts[1])) else (404, {"error": "no such fault"})
    elif parts == ["recording"]:
        return _recording_admin(faults, method, body)
    elif parts == ["refuse-connections"] and method == "POST":
        faults.refuse_connections(float(body.get("seconds", 5)))
        return 200, {"refusing_for_s": float(body.get("seconds", 5))}
    elif len(parts) == 2 and parts[0] == "events" and parts[1] in _EVENTS and method == "POST":
        done = getattr(faults, _EVENTS[parts[1]])(**body)
        if isinstance(done, list) and done and isinstance(done[0], Fault):
            return 201, [fault.to_json() for fault in done]
        return 200, {"result": done}
    else:
        return 404, {"error": f"no such resource {path}"}
    return 405, {"error": f"{method} not allowed on {path}"}


def _recording_admin(faults: Faults, method: str, body) -> tuple[int, object]:
    """POST {"path": "/tmp/requests.jsonl"} starts recording to that file (kept in memory too when no path is
    given); GET returns what was recorded in memory; DELETE stops recording."""
    if method == "POST":
        path = body.get("path")
        faults.record(path, keep=path is None)
        return 201, {"recording": True, "path": path}
    if method == "GET":
        return 200, [entry for recording in faults.recordings() for entry in list(recording.entries)]
    if method == "DELETE":
        for recording in faults.recordings():
            recording.close()
        faults.stop_recording()
        return 200, {"recording": False}
    return 405, {"error": f"{method} not allowed on /recording"}
