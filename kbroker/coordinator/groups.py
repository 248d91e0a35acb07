"""Classic consumer-group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

Kafka's state machine (GroupMetadataManager's classic groups), kept free of wire types so it
can be tested directly:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry, missing SyncGroup--> PreparingRebalance
    PreparingRebalance --everyone gone--> Empty;   Empty with no offsets --> Dead

Joins and syncs park on futures until the phase ends, as Kafka's delayed operations do.
Timers: the join phase ends after the rebalance timeout (or the initial delay for a new
group), members that do not send SyncGroup within the rebalance timeout after the join
phase are removed (pending sync), and each member has a session timer of its own, re-armed
by what Kafka 4's coordinator counts as a sign of life, that removes it at its own deadline:
a Heartbeat; the end of the join phase; the answer to its parked SyncGroup; an OffsetCommit
while the group is Stable or PreparingRebalance. A member parked in JoinGroup or SyncGroup
outlives its deadline (it is waiting on the group, not silent), except a new member, whose
first join may wait at most NEW_MEMBER_JOIN_TIMEOUT_MS.

Static members (KIP-345) carry a `group.instance.id`: a restarted instance takes over its
old member without a rebalance while the group is Stable and its protocol stays the same,
and the old member id is fenced (FENCED_INSTANCE_ID) from then on.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from wire.errors import ErrorCode

MIN_SESSION_TIMEOUT_MS = 6000        # group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000   # group.max.session.timeout.ms
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's bound on a new member's first parked JoinGroup
DEFAULT_GROUP_MAX_SIZE = 2_147_483_647  # group.max.size


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
    skip_assignment: bool = False


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
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    is_new: bool = False  # joined, but no join phase has completed with it yet
    session_deadline_ms: float = 0.0  # monotonic ms; the session timer fires then
    session_timer: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's hasSatisfiedHeartbeat: a member parked in JoinGroup or SyncGroup is alive, unless it is
        new (a new member's parked join is bounded by its own timer)."""
        return not self.is_new and (self.awaiting_join or self.sync_waiter is not None)


class Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        # ids handed out with MEMBER_ID_REQUIRED, each with the monotonic ms its session ends, and its timer
        self.pending_members: dict[str, float] = {}
        self.pending_timers: dict[str, asyncio.TimerHandle] = {}
        self.pending_sync: set[str] = set()  # members yet to send SyncGroup for this generation
        self.new_member_added = False
        self.join_timer: asyncio.Task | None = None
        self.sync_timer: asyncio.Task | None = None
        self.in_initial_delay = False  # the first generation waits out the initial delay
        self.empty_since_ms = 0  # wall clock when the group last became Empty (KIP-211 offset expiry)

    def static_member_id(self, group_instance_id: str) -> str | None:
        """The member id a static instance currently maps to."""
        return next((m.member_id for m in self.members.values() if m.group_instance_id == group_instance_id), None)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

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
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())


class GroupCoordinator:
    """Every classic group of this broker; all methods run on the broker's event loop."""

    def __init__(self, initial_rebalance_delay_ms: int, persist: Callable[[Group], Awaitable[int] | None] | None = None,
                 max_size: int = DEFAULT_GROUP_MAX_SIZE, min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        # writes the group's metadata record; in a cluster it also gives the error of its replication to wait for
        self._persist = persist or (lambda group: None)
        self.groups: dict[str, Group] = {}
        self._started = False

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Arm the session timers of the members of groups loaded at start, each for a full session
        timeout from now, as Kafka's onLoaded (idempotent; joins call it too, for brokers built without a
        runner)."""
        if self._started:
            return
        self._started = True
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)

    def close(self) -> None:
        """Stop the timers and answer parked joins and syncs with NOT_COORDINATOR, so a shutdown
        never waits out a rebalance timeout and clients go looking for the coordinator again."""
        for group in self.groups.values():
            self._let_go(group)

    def adopt(self, group: Group) -> None:
        """A group loaded after start (this broker became its partition's leader): its members'
        session timers start now, as Kafka's onLoaded."""
        self.groups[group.group_id] = group
        if self._started:
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)

    def unload(self, group_ids: Iterable[str]) -> None:
        """Another broker coordinates these groups now: out of memory, parked requests answered."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is not None:
                self._let_go(group)

    def _let_go(self, group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer, *group.pending_timers.values()):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None
        group.pending_timers.clear()
        for member in group.members.values():
            _cancel_session_timer(member)
            self._finish_join(member, JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            self._finish_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    # --- session timers -------------------------------------------------------------------

    def _reschedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """Kafka's rescheduleClassicGroupMemberHeartbeat: the member's session now ends `timeout_ms`
        (its session timeout unless given) from now, and its timer fires then."""
        _cancel_session_timer(member)
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.session_deadline_ms = monotonic_ms() + timeout
        member.session_timer = asyncio.get_running_loop().call_later(
            timeout / 1000, self._session_expired, group, member)

    def _session_expired(self, group: Group, member: Member) -> None:
        """A member's timer fired: it goes unless it is parked on the group (then the end of the join or
        sync phase re-arms it) or was replaced or removed meanwhile."""
        member.session_timer = None
        if group.members.get(member.member_id) is member and group.state != GroupState.DEAD \
                and not member.has_satisfied_heartbeat:
            self._remove_member(group, member)

    def _add_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        """An id handed out with MEMBER_ID_REQUIRED lapses one session timeout later unless used."""
        group.pending_members[member_id] = monotonic_ms() + session_timeout_ms
        group.pending_timers[member_id] = asyncio.get_running_loop().call_later(
            session_timeout_ms / 1000, self._pending_member_expired, group, member_id)

    def _pending_member_expired(self, group: Group, member_id: str) -> None:
        group.pending_timers.pop(member_id, None)
        if self._drop_pending_member(group, member_id):
            self._maybe_complete_join(group)

    @staticmethod
    def _drop_pending_member(group: Group, member_id: str) -> bool:
        """Forget a handed-out id (and its timer); whether it was pending."""
        timer = group.pending_timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        return group.pending_members.pop(member_id, None) is not None

    def expire_members(self, now_ms: float) -> None:
        """Expire at once whatever is due by `now_ms` (a clock ahead of the timers, for tests): handed-out
        ids past their session, and members past their deadline that are not parked on the group."""
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now_ms > deadline:
                    self._pending_member_expired(group, member_id)
            for member in list(group.members.values()):
                if now_ms >= member.session_deadline_ms:
                    _cancel_session_timer(member)
                    self._session_expired(group, member)

    # --- membership -----------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool, supports_skip_assignment: bool = False) -> JoinResult:
        self.start()
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = Group(group_id)
        if not self._accepts_joining_member(group, member_id):
            self._reject_for_size(group, member_id)
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout

        if not member_id:
            new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                # KIP-345: a static member needs no MEMBER_ID_REQUIRED round
                old_id = group.static_member_id(group_instance_id)
                if old_id is not None:
                    return await self._replace_static_member(group, old_id, new_id, protocols, session_timeout_ms,
                                                             rebalance_timeout_ms, supports_skip_assignment)
            elif require_known_member_id:
                # KIP-394: hand out the id first; the member counts once it rejoins with it
                self._add_pending_member(group, new_id, session_timeout_ms)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            member = Member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)

        if self._drop_pending_member(group, member_id):
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            return await self._add_member_and_rebalance(group, member)

        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return JoinResult(error, member_id=member_id)
        member = group.members[member_id]  # parked below (or answered at once): no new session deadline
        unchanged = member.protocols == protocols
        if group.state == GroupState.COMPLETING_REBALANCE and unchanged:
            return self._join_result(group, member)  # a retried join: same answer again
        if group.state == GroupState.STABLE and unchanged and member_id != group.leader_id:
            return self._join_result(group, member)  # followers rejoining a stable group change nothing
        if group.state == GroupState.EMPTY:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        member.protocols = protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        return await self._wait_for_join(group, member)

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        """group.max.size, counted as Kafka does: while preparing a rebalance by the members
        already rejoined (so the last to rejoin of an oversized group are the ones refused)."""
        existing = group.members.get(member_id)
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state == GroupState.PREPARING_REBALANCE:
            return (existing is not None and existing.awaiting_join) or group.num_awaiting_join() < self.max_size
        return existing is not None or len(group.members) < self.max_size

    def _reject_for_size(self, group: Group, member_id: str) -> None:
        self._drop_pending_member(group, member_id)
        existing = group.members.get(member_id)
        if existing is not None:
            self._remove_member(group, existing, rebalance=False)
            self._maybe_complete_join(group)

    @staticmethod
    def _validate_member(group: Group, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's validateExistingMember: a static instance id must map to this member id."""
        if group_instance_id is None:
            return ErrorCode.NONE if member_id in group.members else ErrorCode.UNKNOWN_MEMBER_ID
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if current == member_id else ErrorCode.FENCED_INSTANCE_ID

    async def _add_member_and_rebalance(self, group: Group, member: Member) -> JoinResult:
        if not group.members:
            group.protocol_type = member.protocol_type
        group.members[member.member_id] = member
        if group.leader_id is None:
            group.leader_id = member.member_id  # the first member to join leads
        group.new_member_added = True
        member.is_new = True
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        return await self._wait_for_join(group, member)

    async def _replace_static_member(self, group: Group, old_id: str, new_id: str, protocols: list[tuple[str, bytes]],
                                     session_timeout_ms: int, rebalance_timeout_ms: int,
                                     supports_skip_assignment: bool) -> JoinResult:
        """A known instance joins with a new member id: the new id takes the old member's place
        (and assignment), and the old id is fenced. A Stable group keeps its generation when the
        protocol it would select stays the same; otherwise the group rebalances."""
        old = group.members[old_id]
        self._finish_join(old, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        self._finish_sync(old, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        previous_leader = group.leader_id
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host, session_timeout_ms,
                        rebalance_timeout_ms, old.protocol_type, protocols, old.assignment)
        _cancel_session_timer(old)
        self._reschedule_heartbeat(group, member)
        # keep the member's place, so protocol votes and leader choice see the same order
        group.members = {new_id if mid == old_id else mid: member if mid == old_id else m
                         for mid, m in group.members.items()}
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        if group.state == GroupState.STABLE and group.protocol_name == group.select_protocol():
            self._persist(group)
            if supports_skip_assignment and group.leader_id == new_id:
                # JoinGroup v9: the leader learns it leads but must not compute a new assignment
                return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                  new_id, new_id, self._member_list(group), skip_assignment=True)
            # older clients see the previous leader id, so a returning leader does not reassign
            return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                              previous_leader or "", new_id)
        return await self._wait_for_join(group, member)

    async def _wait_for_join(self, group: Group, member: Member) -> JoinResult:
        waiter: asyncio.Future = asyncio.get_running_loop().create_future()
        self._finish_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.join_waiter = waiter
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)
        return await waiter

    def _prepare_rebalance(self, group: Group) -> None:
        """Enter PreparingRebalance: pending syncs fail, and a join deadline starts."""
        if group.state == GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                self._answer_sync(group, member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._cancel_sync_timer(group)
        group.pending_sync.clear()
        initial = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.in_initial_delay = False
        timeout = group.rebalance_timeout_ms()
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
        if group.state == GroupState.PREPARING_REBALANCE and not group.in_initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: dynamic members that did not rejoin are dropped (static ones stay
        until their session or the pending sync expires), and the next generation starts."""
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(group, member, rebalance=False)
        if group.members and not any(m.awaiting_join for m in group.members.values()):
            # only silent static members are left: wait another rebalance timeout for them
            group.join_timer = asyncio.get_running_loop().create_task(
                self._delayed_join(group, group.rebalance_timeout_ms()))
            return
        if group.leader_id not in group.members or not group.members[group.leader_id].awaiting_join:
            group.leader_id = next((m.member_id for m in group.members.values() if m.awaiting_join), None)
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.empty_since_ms = time.time_ns() // 1_000_000
            self._persist(group)
            group.protocol_name = None
            group.leader_id = None
            return
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        for member in group.members.values():
            self._finish_join(member, self._join_result(group, member))
            self._reschedule_heartbeat(group, member)
            member.is_new = False
        group.pending_sync = set(group.members)
        group.sync_timer = asyncio.get_running_loop().create_task(
            self._expire_pending_sync(group, group.generation_id, group.rebalance_timeout_ms()))

    async def _expire_pending_sync(self, group: Group, generation_id: int, rebalance_timeout_ms: int) -> None:
        """Kafka's pending-sync expiry: members that got their JoinGroup answer but sent no
        SyncGroup within the rebalance timeout are removed, and the group rebalances."""
        await asyncio.sleep(rebalance_timeout_ms / 1000)
        group.sync_timer = None
        stalled = group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
        if generation_id != group.generation_id or not stalled or not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member, rebalance=False)
        group.pending_sync.clear()
        self._prepare_rebalance(group)

    @staticmethod
    def _cancel_sync_timer(group: Group) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _clear_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_timer(group)

    @staticmethod
    def _member_list(group: Group) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()]

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = self._member_list(group) if member.member_id == group.leader_id else []
        return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member.member_id, members)

    async def sync(self, group_id: str, member_id: str, generation_id: int, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes],
                   group_instance_id: str | None = None) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state == GroupState.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == GroupState.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members[member_id]  # Kafka 4 counts a SyncGroup only once it is answered (below)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self._clear_pending_sync(group, member_id)
        if group.state == GroupState.STABLE:
            return self._sync_result(group, member)
        waiter: asyncio.Future = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE  # what is stored: the stable group with its assignment
            stored = self._persist(group)  # Kafka stores the generation before answering the syncs
            if stored is not None and not await self._stored_in_time(group, stored):
                return await waiter
            for m in group.members.values():
                self._answer_sync(group, m, self._sync_result(group, m))
        return await waiter

    async def _stored_in_time(self, group: Group, stored: Awaitable[int]) -> bool:
        """A cluster's storeGroup: the group stays CompletingRebalance until the ISR has its record. Whether the
        syncs may be answered now; if not, the group moved on meanwhile (a join, say, which answered them), or the
        store failed: the syncs get its error and the group rebalances, as Kafka's SyncGroup does."""
        generation = group.generation_id
        group.state = GroupState.COMPLETING_REBALANCE
        error = await stored
        if group.state != GroupState.COMPLETING_REBALANCE or group.generation_id != generation:
            return False
        if error:
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(group, m, SyncResult(error))
            self._prepare_rebalance(group)
            return False
        group.state = GroupState.STABLE
        return True

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)

    @staticmethod
    def _finish_join(member: Member, result: JoinResult) -> None:
        waiter, member.join_waiter = member.join_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    @staticmethod
    def _finish_sync(member: Member, result: SyncResult) -> bool:
        """Answer the member's parked SyncGroup, if any; whether there was one to answer."""
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
            return True
        return False

    def _answer_sync(self, group: Group, member: Member, result: SyncResult) -> None:
        """Kafka's propagateAssignment: a member whose parked SyncGroup is answered starts a new session."""
        if self._finish_sync(member, result):
            self._reschedule_heartbeat(group, member)

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not member_id:
            # KIP-345: a static member may be removed by its instance id alone (e.g. by an admin)
            current = group.static_member_id(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_member(group, group.members[current])
            return ErrorCode.NONE
        if self._drop_pending_member(group, member_id):
            self._maybe_complete_join(group)
            return ErrorCode.NONE
        if group_instance_id is not None and group.static_member_id(group_instance_id) not in (None, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(group, member)
        return ErrorCode.NONE

    def commit_offsets_error(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int) -> int:
        """validate_offset_commit for the group of that id; a member's accepted commit while the group is
        Stable or PreparingRebalance also starts a new session, as in Kafka."""
        group = self.groups.get(group_id)
        error = validate_offset_commit(group, member_id, group_instance_id, generation_id)
        if error == ErrorCode.NONE and group is not None and member_id in group.members \
                and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, group.members[member_id])
        return error

    def force_rebalance(self, group_id: str) -> bool:
        """A test's fault (kbroker.faults): a classic group starts a rebalance now, as when a member joins; False
        when it has no generation to leave (unknown, empty, dead or already rebalancing)."""
        group = self.groups.get(group_id)
        if group is None or group.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return False
        self._prepare_rebalance(group)
        return True

    def expire_sessions(self, group_id: str, member_id: str | None = None) -> list[str]:
        """A test's fault (kbroker.faults): the session of `member_id` (every member when None) ends now, as if
        its heartbeats had stopped; returns the members removed."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        expiring = [m for m in group.members.values() if member_id is None or m.member_id == member_id]
        for member in expiring:
            self._remove_member(group, member)
        return [member.member_id for member in expiring]

    def _remove_member(self, group: Group, member: Member, rebalance: bool = True) -> None:
        group.members.pop(member.member_id, None)
        _cancel_session_timer(member)
        self._finish_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        self._finish_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._clear_pending_sync(group, member.member_id)
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)


def validate_offset_commit(group: Group | None, member_id: str, group_instance_id: str | None,
                           generation_id: int) -> int:
    """Kafka's ClassicGroup.validateOffsetCommit: simple commits (generation -1, no member)
    go only to groups without members; members commit with their current generation."""
    if group is None:
        return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
    if group.state == GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.state == GroupState.EMPTY:
        return ErrorCode.NONE
    if generation_id < 0 and not member_id and group_instance_id is None:
        return ErrorCode.UNKNOWN_MEMBER_ID  # a simple commit to a group that has members
    if group_instance_id is not None and group.static_member_id(group_instance_id) not in (None, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    if group.state == GroupState.COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def validate_txn_offset_commit(group: Group | None, member_id: str, group_instance_id: str | None,
                               generation_id: int) -> int:
    """Kafka 3.9's validateOffsetCommit for a TxnOffsetCommit: its member fields (v3+) are checked only
    when the request names any of them, since older clients send none; no REBALANCE_IN_PROGRESS, and the
    member's session is left alone. A missing group is a new Empty one, as Kafka creates it first."""
    if group is None:
        return ErrorCode.NONE if generation_id < 0 else ErrorCode.UNKNOWN_MEMBER_ID
    if group.state == GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.state == GroupState.EMPTY:
        return ErrorCode.NONE
    if generation_id < 0 and not member_id and group_instance_id is None:
        return ErrorCode.NONE
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def _cancel_session_timer(member: Member) -> None:
    if member.session_timer is not None:
        member.session_timer.cancel()
        member.session_timer = None
