"""KIP-848 consumer groups (`group.protocol=consumer`): the broker runs the assignor.

Kept free of wire types so it can be tested directly. Kafka's model, in short:

- The *group epoch* goes up whenever the group's subscriptions change: a member joins,
  leaves, changes its topics or regex, or a subscribed topic appears or gains partitions.
- The *target assignment* is what the server-side assignor computed for one group epoch;
  its epoch is the *assignment epoch*.
- Each member moves towards its target on its own heartbeats, with a *member epoch*.
  It first gives up (revokes) the partitions its target no longer has; only then does it
  reach the new epoch. A partition it is to receive is handed over only once its previous
  owner has released it (the "unreleased partitions" rule), so no partition is ever owned
  by two members at once.
- A member heartbeating with an epoch the coordinator does not expect is fenced
  (FENCED_MEMBER_EPOCH) and must give up everything and rejoin with epoch 0; one the
  coordinator no longer knows gets UNKNOWN_MEMBER_ID. A member silent for
  `group.consumer.session.timeout.ms`, or slower than its rebalance timeout to revoke, is
  removed at that deadline by a timer of its own.

Group state is persisted as Kafka persists it: every operation that changes a group hands
the change, as Kafka's coordinator records (group epoch, subscription metadata, member
subscription, target assignment and its epoch, current member assignment; a tombstone
deletes), to `persist`, which appends them to `__consumer_offsets`. Which records an
operation writes is worked out by comparing the group before and after it, so only what
changed is written, in the order Kafka writes them. At start the records are replayed
(`replay`) and the groups handed to `ConsumerGroupCoordinator.load`: members come back with
their epochs and assignments and carry on; their session timers restart at load, as Kafka's
do. Encoding to bytes lives in kbroker.coordinator.consumer_group_records.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from kbroker.coordinator.assignors import MemberSubscription, get_assignor
from kbroker.coordinator.topic_regex import InvalidRegex, Resolved, compile_regex, resolve
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
HEARTBEAT_INTERVAL_MS = 5000    # group.consumer.heartbeat.interval.ms
SESSION_TIMEOUT_MS = 45000      # group.consumer.session.timeout.ms
ASSIGNORS = ("uniform", "range")  # group.consumer.assignors (Kafka 4's default)
CONSUMER_HEARTBEAT_V1 = 1       # from v1 the client chooses its member id (KIP-1082)
# Kafka 4 starts a new group at group and assignment epoch 1, so its first member's subscription takes
# it to 2 (Kafka 3.9 started at 0); a member subscribed to nothing leaves it at 1
NEW_GROUP_EPOCH = 1

TopicPartitions = dict[uuid.UUID, frozenset[int]]


class TopicInfo(Protocol):
    """What the coordinator needs to know of a topic (kbroker.broker.Topic fits)."""

    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"   # waiting for the member to revoke
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waiting for other members to release


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(Exception):
    """A heartbeat (or commit) Kafka would refuse; `error_code` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def monotonic_ms() -> float:
    return time.monotonic() * 1000


def new_member_id() -> str:
    """A member id as Kafka's coordinator makes one (Uuid.randomUuid().toString(): url-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _frozen(partitions: Mapping[uuid.UUID, Iterable[int]]) -> TopicPartitions:
    return {topic_id: frozenset(p) for topic_id, p in partitions.items() if p}


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == assignment_epoch

    def with_epoch(self, epoch: int, **changes) -> ConsumerGroupMember:
        """The member at `epoch`, remembering the epoch it leaves (a lost response is forgiven once)."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)


@dataclass
class MemberTimers:
    """Deadlines on the coordinator's clock (monotonic ms), and the event-loop timer set for the nearer one."""

    session_deadline: float
    revocation_deadline: float | None = None
    revocation_epoch: int = 0
    handle: asyncio.TimerHandle | None = None

    @property
    def next_deadline(self) -> float:
        if self.revocation_deadline is None:
            return self.session_deadline
        return min(self.session_deadline, self.revocation_deadline)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = NEW_GROUP_EPOCH
        self.assignment_epoch = NEW_GROUP_EPOCH
        self.members: dict[str, ConsumerGroupMember] = {}
        self.timers: dict[str, MemberTimers] = {}
        self.static_members: dict[str, str] = {}               # instance id -> member id
        self.target: dict[str, TopicPartitions] = {}           # member id -> target assignment
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}  # owner's epoch per partition
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        # the members' regexes resolved, and the topic names that was against (not persisted: rebuilt at need)
        self.resolved_regexes: Resolved = {}
        self.regexes_resolved_against: frozenset[str] = frozenset()

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the partition's current owner, or -1 when nobody holds it."""
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    def put_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member, keeping partition ownership and the instance-id index in step."""
        self._release_partitions(self.members.get(member.member_id))
        self.members[member.member_id] = member
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, indexes in partitions.items():
                for index in indexes:
                    self.partition_epochs[(topic_id, index)] = member.member_epoch
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def drop_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        timers = self.timers.pop(member_id, None)
        if timers is not None:
            timers.cancel()
        self.target.pop(member_id, None)
        self._release_partitions(member)
        if member is not None and member.instance_id is not None \
                and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def _release_partitions(self, member: ConsumerGroupMember | None) -> None:
        if member is None:
            return
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, indexes in partitions.items():
                for index in indexes:
                    if self.partition_epochs.get((topic_id, index)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, index)]


@dataclass
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat request's fields; None means "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = CONSUMER_HEARTBEAT_V1


@dataclass
class HeartbeatResult:
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged, nothing to send


@dataclass
class ComputedAssignment:
    """One target-assignment run: what each member should own at `epoch`."""

    epoch: int
    targets: dict[str, TopicPartitions]


# --- persisted records ----------------------------------------------------------------------
# One class per Kafka coordinator record type; None in the payload field is the tombstone.

@dataclass(frozen=True)
class GroupEpochRecord:
    """ConsumerGroupMetadata: the group epoch. Its tombstone deletes the group."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class SubscriptionMetadataRecord:
    """ConsumerGroupPartitionMetadata: the subscribed topics as last seen (a change bumps the epoch)."""

    group_id: str
    topics: tuple[TopicMetadata, ...] | None


@dataclass(frozen=True)
class MemberSubscriptionRecord:
    """ConsumerGroupMemberMetadata: a member's SUBSCRIPTION_FIELDS. Its tombstone removes the member."""

    group_id: str
    member_id: str
    member: ConsumerGroupMember | None


@dataclass(frozen=True)
class AssignmentEpochRecord:
    """ConsumerGroupTargetAssignmentMetadata: the epoch the target assignment was computed for."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class TargetAssignmentRecord:
    """ConsumerGroupTargetAssignmentMember: what the assignor gave one member."""

    group_id: str
    member_id: str
    partitions: TopicPartitions | None


@dataclass(frozen=True)
class CurrentAssignmentRecord:
    """ConsumerGroupCurrentMemberAssignment: a member's ASSIGNMENT_FIELDS (epochs, state, partitions)."""

    group_id: str
    member_id: str
    member: ConsumerGroupMember | None


GroupRecord = (GroupEpochRecord | SubscriptionMetadataRecord | MemberSubscriptionRecord | AssignmentEpochRecord
               | TargetAssignmentRecord | CurrentAssignmentRecord)

SUBSCRIPTION_FIELDS = ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
                       "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor")
ASSIGNMENT_FIELDS = ("member_epoch", "previous_member_epoch", "state", "assigned", "pending_revocation")


def _changed(old: ConsumerGroupMember | None, new: ConsumerGroupMember, names: tuple[str, ...]) -> bool:
    """Whether `new` differs from `old` (None: a new member) in the fields `names`."""
    if old is new:
        return False
    return old is None or any(getattr(old, name) != getattr(new, name) for name in names)


@dataclass(frozen=True)
class GroupSnapshot:
    """The persisted part of a group as it stood before an operation. Members are immutable
    and targets are replaced, never changed in place, so shallow copies are enough."""

    group_epoch: int
    assignment_epoch: int
    subscription_metadata: dict[str, TopicMetadata]
    members: dict[str, ConsumerGroupMember]
    target: dict[str, TopicPartitions]

    @classmethod
    def of(cls, group: ConsumerGroup) -> GroupSnapshot:
        return cls(group.group_epoch, group.assignment_epoch, dict(group.subscription_metadata),
                   dict(group.members), dict(group.target))


def _member_tombstones(group_id: str, member_id: str) -> list[GroupRecord]:
    """A leaving member's records, in Kafka's order (its replay insists the assignment goes first)."""
    return [CurrentAssignmentRecord(group_id, member_id, None), TargetAssignmentRecord(group_id, member_id, None),
            MemberSubscriptionRecord(group_id, member_id, None)]


def group_tombstones(group_id: str, group: ConsumerGroup | GroupSnapshot) -> list[GroupRecord]:
    """Everything a deleted group leaves behind, tombstoned in the order Kafka writes them."""
    records: list[GroupRecord] = [CurrentAssignmentRecord(group_id, m, None) for m in group.members]
    records += [TargetAssignmentRecord(group_id, m, None) for m in group.members]
    records.append(AssignmentEpochRecord(group_id, None))
    records += [MemberSubscriptionRecord(group_id, m, None) for m in group.members]
    records += [SubscriptionMetadataRecord(group_id, None), GroupEpochRecord(group_id, None)]
    return records


def group_changes(group_id: str, before: GroupSnapshot | None, group: ConsumerGroup | None) -> list[GroupRecord]:
    """The records that take a group from `before` to its current state (None: no such group),
    only for what changed, in the order Kafka's heartbeat and fencing write them."""
    if group is None:
        return [] if before is None else group_tombstones(group_id, before)
    old_members = before.members if before is not None else {}
    old_target = before.target if before is not None else {}
    records: list[GroupRecord] = []
    for member_id in old_members:
        if member_id not in group.members:
            records += _member_tombstones(group_id, member_id)
    for member_id, member in group.members.items():
        if _changed(old_members.get(member_id), member, SUBSCRIPTION_FIELDS):
            records.append(MemberSubscriptionRecord(group_id, member_id, member))
    old_metadata = before.subscription_metadata if before is not None else {}
    if group.subscription_metadata != old_metadata:
        records.append(SubscriptionMetadataRecord(group_id, tuple(group.subscription_metadata.values())))
    if group.group_epoch != (before.group_epoch if before is not None else NEW_GROUP_EPOCH):
        records.append(GroupEpochRecord(group_id, group.group_epoch))
    for member_id, target in group.target.items():
        old_partitions = old_target.get(member_id)
        if old_partitions is not target and old_partitions != target:
            records.append(TargetAssignmentRecord(group_id, member_id, target))
    for member_id in old_target:
        if member_id not in group.target and member_id in group.members:  # gone members were tombstoned above
            records.append(TargetAssignmentRecord(group_id, member_id, None))
    if group.assignment_epoch != (before.assignment_epoch if before is not None else NEW_GROUP_EPOCH):
        records.append(AssignmentEpochRecord(group_id, group.assignment_epoch))
    for member_id, member in group.members.items():
        if _changed(old_members.get(member_id), member, ASSIGNMENT_FIELDS):
            records.append(CurrentAssignmentRecord(group_id, member_id, member))
    return records


def replay(groups: dict[str, ConsumerGroup], record: GroupRecord) -> None:
    """Apply one record read back from `__consumer_offsets` (later records win).

    Lenient where Kafka is strict about order: compaction keeps only the latest record per
    key, so a member's records may come before its group's epoch record; any value record
    brings its group (and member) into being, a tombstone for something unknown is ignored."""
    group_id = record.group_id
    group = groups.get(group_id)
    if group is None:
        if is_tombstone(record):
            return
        group = groups[group_id] = ConsumerGroup(group_id)
    match record:
        case GroupEpochRecord(epoch=None):
            del groups[group_id]
        case GroupEpochRecord(epoch=epoch):
            group.group_epoch = epoch
        case SubscriptionMetadataRecord(topics=topics):
            group.subscription_metadata = {t.name: t for t in topics or ()}
        case AssignmentEpochRecord(epoch=epoch):
            group.assignment_epoch = epoch if epoch is not None else 0
        case TargetAssignmentRecord(member_id=member_id, partitions=None):
            group.target.pop(member_id, None)
        case TargetAssignmentRecord(member_id=member_id, partitions=partitions):
            group.target[member_id] = partitions
        case MemberSubscriptionRecord(member_id=member_id, member=None):
            group.drop_member(member_id)
        case MemberSubscriptionRecord(member_id=member_id, member=stored):
            _replay_member(group, member_id, stored, SUBSCRIPTION_FIELDS)
        case CurrentAssignmentRecord(member_id=member_id, member=None):
            if member_id in group.members:  # Kafka's tombstone: out of the assignment, the member record goes next
                group.put_member(replace(group.members[member_id], member_epoch=LEAVE_EPOCH,
                                         previous_member_epoch=LEAVE_EPOCH, assigned={}, pending_revocation={}))
        case CurrentAssignmentRecord(member_id=member_id, member=stored):
            _replay_member(group, member_id, stored, ASSIGNMENT_FIELDS)


_PAYLOAD_FIELD = {GroupEpochRecord: "epoch", SubscriptionMetadataRecord: "topics", AssignmentEpochRecord: "epoch",
                  TargetAssignmentRecord: "partitions", MemberSubscriptionRecord: "member",
                  CurrentAssignmentRecord: "member"}


def is_tombstone(record: GroupRecord) -> bool:
    return getattr(record, _PAYLOAD_FIELD[type(record)]) is None


def _replay_member(group: ConsumerGroup, member_id: str, stored: ConsumerGroupMember,
                   names: tuple[str, ...]) -> None:
    existing = group.members.get(member_id) or ConsumerGroupMember(member_id)
    group.put_member(replace(existing, **{name: getattr(stored, name) for name in names}))


class ConsumerGroupCoordinator:
    """Every KIP-848 group of this broker; all methods run on the broker's event loop.

    `topics` gives the broker's topics by name; `claim_group_id(group_id)` is asked before
    a new consumer group takes an id and says whether it may (a classic group with members
    keeps its id); `persist(group_id, records)` stores what an operation changed (see the
    module doc)."""

    def __init__(self, topics: Callable[[], Mapping[str, TopicInfo]],
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 assignors: Sequence[str] = ASSIGNORS,
                 claim_group_id: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = monotonic_ms,
                 persist: Callable[[str, list[GroupRecord]], None] | None = None) -> None:
        if not assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        self.topics = topics
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.assignors = tuple(assignors)
        self.claim_group_id = claim_group_id or (lambda group_id: True)
        self.clock = clock
        self.persist = persist
        self.groups: dict[str, ConsumerGroup] = {}
        self._started = False

    def load(self, groups: Mapping[str, ConsumerGroup]) -> None:
        """Take over groups rebuilt by `replay`; every member's session timer starts now, and
        one still revoking gets its rebalance timeout again (Kafka's onLoaded)."""
        now = self.clock()
        for group_id, group in groups.items():
            for member_id, member in list(group.members.items()):
                if member.member_epoch == LEAVE_EPOCH:  # its assignment was tombstoned, its removal cut short
                    group.drop_member(member_id)
            group.partition_epochs.clear()
            for member in list(group.members.values()):
                group.put_member(member)
            for member in group.members.values():
                timers = group.timers[member.member_id] = MemberTimers(now + self.session_timeout_ms)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    timers.revocation_deadline = now + max(member.rebalance_timeout_ms, 0)
                    timers.revocation_epoch = member.member_epoch
            self.groups[group_id] = group
            if self._started:  # loaded after start: this broker just became the group's coordinator
                for member_id in group.members:
                    self._arm(group, member_id)
            log.info("Loaded consumer group %s at epoch %d with %d members.", group_id, group.group_epoch,
                     len(group.members))

    def unload(self, group_ids: Iterable[str]) -> None:
        """Another broker coordinates these groups now: out of memory (their records stay)."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is not None:
                for timers in group.timers.values():
                    timers.cancel()

    @contextlib.contextmanager
    def _recording(self, group_id: str) -> Iterator[None]:
        """Persist whatever the enclosed operation changed in the group, even if it then failed
        (memory and log must agree); a group it created but left empty is not kept, as in Kafka."""
        existing = self.groups.get(group_id)
        before = GroupSnapshot.of(existing) if existing is not None else None
        try:
            yield
        finally:
            group = self.groups.get(group_id)
            if before is None and group is not None and not group.members and group.group_epoch == NEW_GROUP_EPOCH:
                del self.groups[group_id]
                group = None
            self._write(group_id, group_changes(group_id, before, group))

    def _write(self, group_id: str, records: list[GroupRecord]) -> None:
        if not records or self.persist is None:
            return
        try:
            self.persist(group_id, records)
        except Exception:  # the group keeps working in memory; only a restart would lose the change
            log.exception("could not store the state of consumer group %s", group_id)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Set the timers of the members loaded at start (idempotent; call inside the broker's event loop)."""
        if self._started:
            return
        self._started = True
        for group in self.groups.values():
            for member_id, timers in group.timers.items():
                if timers.handle is None:
                    self._arm(group, member_id)

    def close(self) -> None:
        for group in self.groups.values():
            for timers in group.timers.values():
                timers.cancel()

    # --- member timers --------------------------------------------------------------------

    def _arm(self, group: ConsumerGroup, member_id: str) -> None:
        """(Re)set the member's timer for its nearer deadline (session, or rebalance timeout while it
        revokes), as Kafka keeps a timer per member. Outside an event loop (tests that drive their own
        clock) nothing is set, and expire_members does the expiring."""
        timers = group.timers.get(member_id)
        if timers is None:
            return
        timers.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay_ms = max(timers.next_deadline - self.clock(), 0)
        timers.handle = loop.call_later(delay_ms / 1000, self._timer_fired, group.group_id, member_id)

    def _timer_fired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        timers = group.timers.get(member_id) if group is not None else None
        if timers is None or member_id not in group.members:
            return
        timers.handle = None
        now = self.clock()
        reason = _expiry_reason(group.members[member_id], timers, now)
        if reason is not None:
            with self._recording(group_id):
                self._fence_expired(group, member_id, reason)
            return
        if timers.revocation_deadline is not None and now >= timers.revocation_deadline:
            timers.revocation_deadline = None  # the member is past that revocation: only its session is left
        self._arm(group, member_id)

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def forget(self, group_id: str) -> None:
        """Delete a group: out of memory, and tombstones for all its records."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            for timers in group.timers.values():
                timers.cancel()
            self._write(group_id, group_tombstones(group_id, group))

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]

    # --- heartbeat ------------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        try:
            self._validate(request)
            with self._recording(request.group_id):
                if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                    return self._leave(request)
                return self._heartbeat(request)
        except GroupError as error:
            return HeartbeatResult(error.error_code, error.message)

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's request checks, in its order, before any group changes."""
        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.INVALID_REQUEST, message)

        id_required = request.api_version >= CONSUMER_HEARTBEAT_V1 or request.member_epoch > 0 \
            or request.member_epoch == LEAVE_EPOCH
        if id_required and not request.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not request.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if request.rack_id is not None and not request.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or any(partitions for _, partitions in request.owned):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                              "when (re-)joining.")
        elif request.member_epoch == STATIC_LEAVE_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif request.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise GroupError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {request.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(self.assignors)}.")

    def _heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        joining = request.member_epoch == JOIN_EPOCH
        group = self._group_for(request.group_id, create=joining)
        member_id = request.member_id or new_member_id()
        if request.instance_id is None:
            member = self._dynamic_member(group, member_id, request, joining)
        else:
            member = self._static_member(group, member_id, request, joining)

        updated = self._apply_request(member, request)
        bump = (updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex)
        if updated.subscribed_topic_regex and updated.subscribed_topic_regex != member.subscribed_topic_regex:
            _check_regex(updated.subscribed_topic_regex)
        metadata = self._subscription_metadata(group, replacing=member, with_member=updated)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("[GroupId %s] Bumped group epoch to %d.", group.group_id, group.group_epoch)

        if group.group_epoch > group.assignment_epoch:
            computed = self._compute_target(group, updated)
            group.target = computed.targets
            group.assignment_epoch = computed.epoch
        target = group.target.get(updated.member_id, {})

        reconciled = reconcile(updated, group.assignment_epoch, target, group.partition_epoch, request.owned)
        group.put_member(reconciled)
        now = self.clock()
        timers = group.timers.setdefault(reconciled.member_id, MemberTimers(now))
        timers.session_deadline = now + self.session_timeout_ms
        if reconciled != updated:  # its assignment state moved: (re)arm or drop the revocation deadline
            if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
                timers.revocation_deadline = now + max(reconciled.rebalance_timeout_ms, 0)
                timers.revocation_epoch = reconciled.member_epoch
            else:
                timers.revocation_deadline = None
        self._arm(group, reconciled.member_id)

        full_request = joining or (request.rebalance_timeout_ms != -1 and request.owned is not None
                                   and (request.subscribed_topic_names is not None
                                        or request.subscribed_topic_regex is not None))
        changed = reconciled.assigned != member.assigned
        return HeartbeatResult(
            member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=reconciled.assigned if full_request or changed else None)

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if not create:
            # Kafka 3.9 says GROUP_ID_NOT_FOUND, which Java clients treat as fatal. Groups survive
            # restarts here too, but one can still be missing (a data directory from a kbroker that
            # kept them in memory, a crash before the records were written): UNKNOWN_MEMBER_ID
            # makes its members rejoin with epoch 0 instead
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
        if not self.claim_group_id(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    @staticmethod
    def _dynamic_member(group: ConsumerGroup, member_id: str, request: HeartbeatRequest,
                        joining: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group.group_id}.")
            log.info("[GroupId %s] Member %s joins the consumer group.", group.group_id, member_id)
            return ConsumerGroupMember(member_id)
        _check_member_epoch(member, request.member_epoch, request.owned)
        return member

    @staticmethod
    def _static_member(group: ConsumerGroup, member_id: str, request: HeartbeatRequest,
                       joining: bool) -> ConsumerGroupMember:
        instance_id = request.instance_id
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                 f"because the instance id is owned by {existing.member_id} member.")
            # the instance comes back: the new member takes over the old one's place and partitions
            replacement = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            target = group.target.get(existing.member_id)
            group.drop_member(existing.member_id)
            if target is not None:
                group.target[member_id] = target
            group.put_member(replacement)
            return replacement
        if existing is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID,
                             f"Static member {member_id} with instance id {instance_id} was fenced by "
                             f"member {existing.member_id}.")
        _check_member_epoch(existing, request.member_epoch, request.owned)
        return existing

    @staticmethod
    def _apply_request(member: ConsumerGroupMember, request: HeartbeatRequest) -> ConsumerGroupMember:
        """The member with what the heartbeat changed (None fields keep their value)."""
        changes: dict = {"client_id": request.client_id, "client_host": request.client_host}
        if request.instance_id is not None:
            changes["instance_id"] = request.instance_id
        if request.rack_id is not None:
            changes["rack_id"] = request.rack_id
        if request.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            changes["server_assignor"] = request.server_assignor
        if request.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = tuple(sorted(set(request.subscribed_topic_names)))
        if request.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = request.subscribed_topic_regex
        return replace(member, **changes)

    # --- subscriptions and target assignment ---------------------------------------------

    @staticmethod
    def _member_topics(group: ConsumerGroup, member: ConsumerGroupMember, topics: Mapping[str, TopicInfo]) -> set[str]:
        """Existing topics the member subscribes to, by name or by its regex (as last resolved for the group)."""
        subscribed = {name for name in member.subscribed_topic_names if name in topics}
        if member.subscribed_topic_regex:
            subscribed.update(group.resolved_regexes.get(member.subscribed_topic_regex, ()))
        return subscribed

    def _subscription_metadata(self, group: ConsumerGroup, replacing: ConsumerGroupMember | None = None,
                               with_member: ConsumerGroupMember | None = None) -> dict[str, TopicMetadata]:
        """Id and partition count of every topic the group subscribes to; any change is a new group epoch."""
        topics = self.topics()
        members = dict(group.members)
        if replacing is not None:
            members.pop(replacing.member_id, None)
        if with_member is not None:
            members[with_member.member_id] = with_member
        names = {name for m in members.values() for name in m.subscribed_topic_names if name in topics}
        for matched in self._resolve_regexes(group, members.values(), topics).values():
            names.update(matched)
        return {name: TopicMetadata(topics[name].topic_id, name, topics[name].partitions) for name in sorted(names)}

    @staticmethod
    def _resolve_regexes(group: ConsumerGroup, members: Iterable[ConsumerGroupMember],
                         topics: Mapping[str, TopicInfo]) -> Resolved:
        """The group's regexes resolved against the topics there are now (only topics created or
        deleted since the last resolution are looked at again)."""
        regexes = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        if not regexes and not group.resolved_regexes:
            return group.resolved_regexes
        group.resolved_regexes, group.regexes_resolved_against = resolve(
            group.resolved_regexes, group.regexes_resolved_against, regexes, topics.keys())
        return group.resolved_regexes

    def preferred_assignor(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The server assignor most members ask for, else the first configured one."""
        votes = Counter(m.server_assignor for m in members if m.server_assignor)
        if not votes:
            return self.default_assignor
        best = max(votes.values())
        return next(name for name in self.assignors if votes.get(name) == best)

    def _compute_target(self, group: ConsumerGroup, updated: ConsumerGroupMember) -> ComputedAssignment:
        """Run the assignor over every member (with `updated` in place) for the current group epoch."""
        members = dict(group.members)
        members[updated.member_id] = updated
        name = self.preferred_assignor(members.values())
        topics = self.topics()
        metadata = group.subscription_metadata
        by_id = {m.topic_id: m.name for m in metadata.values()}
        subscriptions = []
        for member in members.values():
            current = group.target.get(member.member_id, {})
            owned = {by_id[topic_id]: sorted(parts) for topic_id, parts in current.items() if topic_id in by_id}
            subscriptions.append(MemberSubscription(
                member_id=member.member_id,
                topics=frozenset(self._member_topics(group, member, topics) & metadata.keys()),
                owned=owned, instance_id=member.instance_id, rack=member.rack_id))
        started = time.monotonic()
        result = get_assignor(name).assign(subscriptions, {n: m.partitions for n, m in metadata.items()})
        log.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor in %.0fms.",
                 group.group_id, group.group_epoch, name, (time.monotonic() - started) * 1000)
        targets = {member_id: _frozen({metadata[topic].topic_id: parts for topic, parts in assignment.items()
                                       if topic in metadata})
                   for member_id, assignment in result.items() if member_id in members}
        return ComputedAssignment(group.group_epoch, targets)

    # --- leaving and fencing --------------------------------------------------------------

    def _leave(self, request: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} not found.")
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {group.group_id}.")
            log.info("[GroupId %s] Member %s left the consumer group.", group.group_id, member.member_id)
            self.fence(group, member.member_id)
            return HeartbeatResult(member_id=request.member_id, member_epoch=request.member_epoch)
        member = group.static_member(request.instance_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
        if member.member_id != request.member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID,
                             f"Static member {request.member_id} with instance id {request.instance_id} was "
                             f"fenced by member {member.member_id}.")
        if request.member_epoch == LEAVE_EPOCH:
            self.fence(group, member.member_id)
            return HeartbeatResult(member_id=request.member_id, member_epoch=request.member_epoch)
        # static member leaving for a while: it keeps its place (epoch -2) until its session expires
        group.put_member(replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={}))
        timers = group.timers.get(member.member_id)
        if timers is not None:
            timers.revocation_deadline = None
            self._arm(group, member.member_id)
        return HeartbeatResult(member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH)

    def fence(self, group: ConsumerGroup, member_id: str) -> None:
        """Remove a member: its partitions are free at once and the group moves to a new epoch."""
        if group.drop_member(member_id) is None:
            return
        group.subscription_metadata = self._subscription_metadata(group)
        group.group_epoch += 1

    def expire_members(self, now_ms: float | None = None) -> list[tuple[str, str]]:
        """Fence members past their session timeout, or past their rebalance timeout while revoking."""
        now = self.clock() if now_ms is None else now_ms
        fenced = []
        for group in list(self.groups.values()):
            expired = [(member_id, reason) for member_id, timers in group.timers.items()
                       if (reason := _expiry_reason(group.members.get(member_id), timers, now))]
            if not expired:
                continue
            with self._recording(group.group_id):
                for member_id, reason in expired:
                    self._fence_expired(group, member_id, reason)
                    fenced.append((group.group_id, member_id))
        return fenced

    def force_rebalance(self, group_id: str) -> bool:
        """A test's fault (kbroker.faults): the group moves to a new epoch, as when a subscription changes, so
        every member reconciles to a freshly computed target on its next heartbeat; False without members."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return False
        with self._recording(group_id):
            group.group_epoch += 1
        log.info("[GroupId %s] Bumped group epoch to %d (a rebalance forced by a test).", group_id,
                 group.group_epoch)
        return True

    def expire_sessions(self, group_id: str, member_id: str | None = None) -> list[str]:
        """A test's fault (kbroker.faults): `member_id` (every member when None) is fenced as if its session had
        timed out; its next heartbeat answers UNKNOWN_MEMBER_ID and it joins again with epoch 0."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        expiring = [each for each in group.members if member_id is None or each == member_id]
        with self._recording(group_id):
            for each in expiring:
                self._fence_expired(group, each, "its session was expired by a test (kbroker.faults)")
        return expiring

    def _fence_expired(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        log.info("[GroupId %s] Member %s fenced from the group because %s.", group.group_id, member_id, reason)
        self.fence(group, member_id)

    # --- offsets --------------------------------------------------------------------------

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                               api_version: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit, as an error code."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE  # admin clients and assign()-only consumers commit to empty groups
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION  # consumer-protocol members must commit with v9+
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_txn_offset_commit(self, group: ConsumerGroup, member_id: str, group_instance_id: str | None,
                                   member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit for a TxnOffsetCommit: a request naming no member
        passes (older clients send none), a wrong epoch is ILLEGAL_GENERATION (the TxnOffsetCommit errors)."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        if member_epoch == -1 and not member_id and group_instance_id is None:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def offset_fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch for a KIP-848 group (NONE for any other group)."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE


def _expiry_reason(member: ConsumerGroupMember | None, timers: MemberTimers, now: float) -> str | None:
    """Why the member is to be fenced at `now`, or None while it is within its timeouts."""
    if member is None:
        return None
    if now >= timers.session_deadline:
        return "the member session expired"
    if (timers.revocation_deadline is not None and now >= timers.revocation_deadline
            and member.state == MemberState.UNREVOKED_PARTITIONS and member.member_epoch == timers.revocation_epoch):
        return f"it failed to revoke partitions within {member.rebalance_timeout_ms}ms"
    return None


def _check_regex(regex: str) -> None:
    """Refuse a regex Kafka's coordinator would not compile (RE2 syntax), with Kafka's message."""
    try:
        compile_regex(regex)
    except InvalidRegex as error:
        raise GroupError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {error}.") from None


def _check_member_epoch(member: ConsumerGroupMember, received: int,
                        owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None) -> None:
    """Fence a member whose epoch is not the coordinator's; one step behind is forgiven when it
    owns nothing beyond its current assignment (the response that bumped it may have been lost)."""
    if received > member.member_epoch:
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The consumer group member has a greater member epoch ({received}) than the one known "
                         f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch or not _owns_subset(owned, member.assigned)):
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The consumer group member has a smaller member epoch ({received}) than the one known "
                         f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")


def _owns_subset(owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None, assigned: TopicPartitions) -> bool:
    if owned is None:
        return False
    return all(topic_id in assigned and set(partitions) <= assigned[topic_id] for topic_id, partitions in owned)


def _owns_any(owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None, revoking: TopicPartitions) -> bool:
    """Whether the member still reports a partition it must give up (unknown, None, counts as yes)."""
    if owned is None:
        return True
    return any(p in revoking.get(topic_id, ()) for topic_id, partitions in owned for p in partitions)


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: TopicPartitions,
              partition_epoch: Callable[[uuid.UUID, int], int],
              owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None) -> ConsumerGroupMember:
    """One step of a member towards its target assignment (Kafka's CurrentAssignmentBuilder)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still revoking
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)


def _next_assignment(member: ConsumerGroupMember, epoch: int, target_epoch: int, target: TopicPartitions,
                     partition_epoch: Callable[[uuid.UUID, int], int],
                     owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None) -> ConsumerGroupMember:
    kept: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, set[int]] = {}
    incoming: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept[topic_id] = set(current & wanted)
        revoking[topic_id] = set(current - wanted)
        free = {p for p in wanted - current if partition_epoch(topic_id, p) == -1}
        unreleased |= len(free) < len(wanted - current)
        incoming[topic_id] = free
    revoking_frozen = _frozen(revoking)
    if revoking_frozen and _owns_any(owned, revoking_frozen):
        # give up first: the member stays at its epoch until it stops reporting these partitions
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=_frozen(kept),
                                 pending_revocation=revoking_frozen)
    assigned = {topic_id: kept[topic_id] | incoming[topic_id] for topic_id in kept}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=_frozen(assigned), pending_revocation={})
