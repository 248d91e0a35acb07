"""Classic consumer-group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

Kafka's state machine, kept free of wire types so it can be tested directly:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --everyone gone--> Empty;   Empty with no offsets --> Dead

Joins and syncs park on futures until the phase ends, as Kafka's delayed operations do.
Group metadata records are not written yet, so a restarted broker starts every group Empty
(members simply rejoin); committed offsets are durable (see offsets.py).
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from wire.errors import ErrorCode

MIN_SESSION_TIMEOUT_MS = 6000        # group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000   # group.max.session.timeout.ms


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


def monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class JoinResult:
    """What a JoinGroup response carries; `members` is filled only for the leader."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: float = field(default_factory=monotonic_ms)
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)


class Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: set[str] = set()   # ids handed out with MEMBER_ID_REQUIRED
        self.new_member_added = False
        self.join_timer: asyncio.Task | None = None
        self.in_initial_delay = False  # the first generation waits out the initial delay
        self.empty_since_ms = 0  # wall clock when the group last became Empty (KIP-211 offset expiry)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's supportsProtocols: same type, and a protocol every member shares."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred shared protocol; the most votes win."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())


class GroupCoordinator:
    """Every classic group of this broker; all methods run on the broker's event loop."""

    def __init__(self, initial_rebalance_delay_ms: int,
                 persist: Callable[[Group], None] | None = None) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._persist = persist or (lambda group: None)  # writes the group's metadata record
        self.groups: dict[str, Group] = {}
        self._expiry: asyncio.Task | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the session-expiry sweep (idempotent; joins call it too, for brokers built without a runner)."""
        if self._expiry is None or self._expiry.done():
            self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())

    async def _expire_loop(self) -> None:
        """Kafka's heartbeat purgatory as a sweep: members silent past their session go."""
        while True:
            await asyncio.sleep(0.25)
            self.expire_members(monotonic_ms())

    def close(self) -> None:
        """Stop the timers and answer parked joins and syncs with NOT_COORDINATOR, so a shutdown
        never waits out a rebalance timeout and clients go looking for the coordinator again."""
        if self._expiry is not None:
            self._expiry.cancel()
        for group in self.groups.values():
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            for member in group.members.values():
                waiter, member.join_waiter = member.join_waiter, None
                if waiter is not None and not waiter.done():
                    waiter.set_result(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
                self._finish_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    def expire_members(self, now_ms: float) -> None:
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                waiting = member.join_waiter is not None or member.sync_waiter is not None
                if not waiting and now_ms - member.last_heartbeat_ms > member.session_timeout_ms:
                    self._remove_member(group, member)

    # --- membership -----------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool) -> JoinResult:
        self.start()
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=member_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = Group(group_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout

        if not member_id:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                # KIP-345 static member: it needs no MEMBER_ID_REQUIRED round, and a restarted
                # instance replaces its old member (here through a rebalance, which Kafka avoids)
                old = next((m for m in group.members.values() if m.group_instance_id == group_instance_id), None)
                if old is not None:
                    self._remove_member(group, old)
                member = Member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                rebalance_timeout_ms, protocol_type, protocols)
                return await self._add_member_and_rebalance(group, member)
            if require_known_member_id:
                # KIP-394: hand out the id first; the member counts once it rejoins with it
                group.pending_members.add(new_id)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            member = Member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)

        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)

        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        member.last_heartbeat_ms = monotonic_ms()
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        unchanged = member.protocols == protocols
        if group.state == GroupState.COMPLETING_REBALANCE and unchanged:
            return self._join_result(group, member)  # a retried join: same answer again
        if group.state == GroupState.STABLE and unchanged and member_id != group.leader_id:
            return self._join_result(group, member)  # followers rejoining a stable group change nothing
        member.protocols = protocols
        return await self._wait_for_join(group, member)

    async def _add_member_and_rebalance(self, group: Group, member: Member) -> JoinResult:
        if not group.members:
            group.protocol_type = member.protocol_type
        group.members[member.member_id] = member
        if group.leader_id is None:
            group.leader_id = member.member_id  # the first member to join leads
        group.new_member_added = True
        return await self._wait_for_join(group, member)

    async def _wait_for_join(self, group: Group, member: Member) -> JoinResult:
        waiter: asyncio.Future = asyncio.get_running_loop().create_future()
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.join_waiter = waiter
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)
        return await waiter

    def _prepare_rebalance(self, group: Group) -> None:
        """Enter PreparingRebalance: pending syncs fail, and a join deadline starts."""
        if group.state == GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                self._finish_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        initial = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.in_initial_delay = False
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        loop = asyncio.get_running_loop()
        if initial:
            group.new_member_added = False
            group.in_initial_delay = True
            group.join_timer = loop.create_task(self._initial_delayed_join(group, timeout))
        else:
            group.join_timer = loop.create_task(self._delayed_join(group, timeout))
            self._maybe_complete_join(group)

    async def _initial_delayed_join(self, group: Group, rebalance_timeout_ms: int) -> None:
        """group.initial.rebalance.delay.ms: wait for more members before the first generation,
        extending while members keep arriving, never past the rebalance timeout."""
        delay = self.initial_rebalance_delay_ms
        remaining = max(rebalance_timeout_ms - delay, 0)
        await asyncio.sleep(min(delay, rebalance_timeout_ms) / 1000)
        while group.new_member_added and remaining > 0 and delay > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            remaining -= step
            await asyncio.sleep(step / 1000)
        group.join_timer = None
        group.in_initial_delay = False
        self._complete_join(group)

    async def _delayed_join(self, group: Group, rebalance_timeout_ms: int) -> None:
        """The rebalance timeout bounds the join phase: who has not rejoined by then is dropped."""
        await asyncio.sleep(rebalance_timeout_ms / 1000)
        group.join_timer = None
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        timer = group.join_timer
        if group.state == GroupState.PREPARING_REBALANCE and not group.in_initial_delay and group.all_joined():
            if timer is not None:
                timer.cancel()
                group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        for member in list(group.members.values()):
            if member.join_waiter is None:
                self._remove_member(group, member, rebalance=False)
        group.pending_members.clear()
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.empty_since_ms = time.time_ns() // 1_000_000
            self._persist(group)
            group.protocol_name = None
            group.leader_id = None
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        now = monotonic_ms()
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            member.last_heartbeat_ms = now
            if waiter is not None and not waiter.done():
                waiter.set_result(self._join_result(group, member))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader_id:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                       for m in group.members.values()]
        return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member.member_id, members)

    async def sync(self, group_id: str, member_id: str, generation_id: int, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member.last_heartbeat_ms = monotonic_ms()
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state == GroupState.STABLE:
            return self._sync_result(group, member)
        waiter: asyncio.Future = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            self._persist(group)  # Kafka stores the generation before answering the syncs
            for m in group.members.values():
                self._finish_sync(m, self._sync_result(group, m))
        return await waiter

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)

    @staticmethod
    def _finish_sync(member: Member, result: SyncResult) -> None:
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> int:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.last_heartbeat_ms = monotonic_ms()
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not member_id and group_instance_id is not None:
            # KIP-345: a static member may leave by its instance id alone
            member_id = next((m.member_id for m in group.members.values()
                              if m.group_instance_id == group_instance_id), "")
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(group, member)
        return ErrorCode.NONE

    def _remove_member(self, group: Group, member: Member, rebalance: bool = True) -> None:
        group.members.pop(member.member_id, None)
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.join_waiter = None
        self._finish_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
