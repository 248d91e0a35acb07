"""KIP-848 groups in `__consumer_offsets`: Kafka's record layout, only-what-changed writes,
tombstones, and groups rebuilt by replay after a restart.

The coordinator is driven directly with a hand-moved clock; every record it hands to
`persist` goes through the real encoder and decoder (bytes), so what is replayed is what
a restarted broker would read back.
"""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest

from kbroker.broker import Broker, Topic
from kbroker.config import build
from kbroker.coordinator import Coordinator
from kbroker.coordinator.consumer_group_records import KEY_VERSIONS, decode_record, encode_record, key_version
from kbroker.coordinator.consumer_groups import (
    AssignmentEpochRecord,
    ConsumerGroup,
    ConsumerGroupCoordinator,
    ConsumerGroupMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    GroupRecord,
    HeartbeatRequest,
    MemberState,
    MemberSubscriptionRecord,
    SubscriptionMetadataRecord,
    TargetAssignmentRecord,
    TopicMetadata,
    replay,
)
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from wire import messages
from wire.errors import ErrorCode
from wire.records import iter_records, read_batch_header

GROUP = "g"
SESSION_MS = 45_000
REBALANCE_MS = 30_000
TOPIC_ID = uuid.UUID("0b5e3f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
OTHER_ID = uuid.UUID("f0e1d2c3-b4a5-4968-8776-655443322110")


class Cluster:
    """Topics, a clock the test moves by hand, and the log of every record persisted (as bytes)."""

    def __init__(self) -> None:
        self.topics = {"orders": Topic("orders", TOPIC_ID, 4)}
        self.now = 0.0
        self.log: list[tuple[bytes, bytes | None]] = []

    def persist(self, group_id: str, records: list[GroupRecord]) -> None:
        self.log.extend(encode_record(record) for record in records)

    def written(self) -> list[GroupRecord]:
        return [decode_record(key, value) for key, value in self.log]

    def coordinator(self) -> ConsumerGroupCoordinator:
        return ConsumerGroupCoordinator(lambda: self.topics, session_timeout_ms=SESSION_MS, assignors=("range",),
                                        clock=lambda: self.now, persist=self.persist)

    def restarted(self) -> ConsumerGroupCoordinator:
        """A new coordinator loaded from the log, as a broker restart does."""
        groups: dict[str, ConsumerGroup] = {}
        for key, value in self.log:
            replay(groups, decode_record(key, value))
        coordinator = self.coordinator()
        coordinator.load(groups)
        return coordinator


def join(coordinator: ConsumerGroupCoordinator, member_id: str, **fields):
    fields.setdefault("subscribed_topic_names", ["orders"])
    return coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, 0, rebalance_timeout_ms=REBALANCE_MS, owned=[],
                                                  **fields))


def beat(coordinator: ConsumerGroupCoordinator, member_id: str, epoch: int, owned: set[int] | None = None,
         topic_id: uuid.UUID = TOPIC_ID, **fields):
    listed = None if owned is None else [(topic_id, sorted(owned))]
    return coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, epoch, owned=listed, **fields))


def settled_pair(coordinator: ConsumerGroupCoordinator, topic_id: uuid.UUID = TOPIC_ID) -> None:
    """Members "a" and "b" through a full rebalance: "a" owns 0-1, "b" 2-3, both at epoch 3."""
    join(coordinator, "a")
    join(coordinator, "b")
    assert beat(coordinator, "a", 2, {0, 1, 2, 3}, topic_id).member_epoch == 2  # told to revoke 2-3
    assert beat(coordinator, "a", 2, {0, 1}, topic_id).member_epoch == 3        # done
    assert beat(coordinator, "b", 3, set(), topic_id).assignment == {topic_id: frozenset({2, 3})}


def persisted_state(group: ConsumerGroup) -> tuple:
    members = {m_id: (m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                      m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor, m.state,
                      m.member_epoch, m.previous_member_epoch, m.assigned, m.pending_revocation)
               for m_id, m in group.members.items()}
    return (group.group_epoch, group.assignment_epoch, group.subscription_metadata, members, group.target,
            group.partition_epochs, group.static_members)


# --- byte layout --------------------------------------------------------------------------------

def test_group_epoch_record_is_key_version_3_and_a_flexible_value_version_0() -> None:
    key, value = encode_record(GroupEpochRecord("g", 7))
    assert key == struct.pack(">hh", 3, 1) + b"g"
    assert value == struct.pack(">hi", 0, 7) + b"\x00"  # no tagged fields


def test_member_keys_carry_group_then_member_id() -> None:
    key, value = encode_record(CurrentAssignmentRecord("g", "m1", None))
    assert key == struct.pack(">hh", 8, 1) + b"g" + struct.pack(">h", 2) + b"m1"
    assert value is None


def test_current_assignment_value_layout() -> None:
    member = ConsumerGroupMember("m", member_epoch=5, previous_member_epoch=4,
                                 state=MemberState.UNREVOKED_PARTITIONS, assigned={TOPIC_ID: frozenset({1, 0})},
                                 pending_revocation={TOPIC_ID: frozenset({3})})
    _, value = encode_record(CurrentAssignmentRecord("g", "m", member))
    # compact arrays carry length + 1; each struct and the message end with an empty tagged-field section
    assigned = b"\x02" + TOPIC_ID.bytes + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00"
    revoking = b"\x02" + TOPIC_ID.bytes + b"\x02" + struct.pack(">i", 3) + b"\x00"
    assert value == struct.pack(">hiib", 0, 5, 4, 1) + assigned + revoking + b"\x00"


def test_every_key_version_from_3_to_8_is_a_consumer_group_record() -> None:
    records = [GroupEpochRecord("g", 1), SubscriptionMetadataRecord("g", ()), MemberSubscriptionRecord("g", "m", None),
               AssignmentEpochRecord("g", 1), TargetAssignmentRecord("g", "m", {}),
               CurrentAssignmentRecord("g", "m", None)]
    assert [key_version(encode_record(r)[0]) for r in records] == [3, 4, 5, 6, 7, 8]
    assert frozenset(range(3, 9)) == KEY_VERSIONS


def test_offset_commit_and_classic_group_keys_are_not_consumer_group_records() -> None:
    assert decode_record(struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0),
                         None) is None
    assert decode_record(struct.pack(">hh", 2, 1) + b"g", None) is None


SAMPLE_RECORDS: list[GroupRecord] = [
    GroupEpochRecord("g", 12),
    GroupEpochRecord("g", None),
    SubscriptionMetadataRecord("g", (TopicMetadata(TOPIC_ID, "orders", 4), TopicMetadata(OTHER_ID, "refunds", 1))),
    SubscriptionMetadataRecord("g", None),
    MemberSubscriptionRecord("g", "m", ConsumerGroupMember(
        "m", instance_id="i-1", rack_id="r1", client_id="c", client_host="/10.0.0.1", rebalance_timeout_ms=30_000,
        subscribed_topic_names=("orders", "refunds"), subscribed_topic_regex="or.*", server_assignor="range")),
    MemberSubscriptionRecord("g", "m", ConsumerGroupMember("m")),
    MemberSubscriptionRecord("g", "m", None),
    AssignmentEpochRecord("g", 11),
    AssignmentEpochRecord("g", None),
    TargetAssignmentRecord("g", "m", {TOPIC_ID: frozenset({0, 2}), OTHER_ID: frozenset({0})}),
    TargetAssignmentRecord("g", "m", {}),
    TargetAssignmentRecord("g", "m", None),
    CurrentAssignmentRecord("g", "m", ConsumerGroupMember(
        "m", member_epoch=11, previous_member_epoch=10, state=MemberState.UNRELEASED_PARTITIONS,
        assigned={TOPIC_ID: frozenset({0})})),
    CurrentAssignmentRecord("g", "m", None),
]


@pytest.mark.parametrize("record", SAMPLE_RECORDS, ids=lambda r: f"{type(r).__name__}")
def test_record_round_trips_through_its_bytes(record: GroupRecord) -> None:
    key, value = encode_record(record)
    decoded = decode_record(key, value)
    assert encode_record(decoded) == (key, value)
    if isinstance(record, (MemberSubscriptionRecord, CurrentAssignmentRecord)) and record.member is not None:
        assert (decoded.group_id, decoded.member_id) == (record.group_id, record.member_id)
    else:
        assert decoded == record


@pytest.mark.parametrize("record", [r for r in SAMPLE_RECORDS if encode_record(r)[1] is not None],
                         ids=lambda r: f"{type(r).__name__}")
def test_generated_codecs_reencode_key_and_value_byte_for_byte(record: GroupRecord) -> None:
    for raw, suffix in zip(encode_record(record), ("Key", "Value"), strict=True):
        name = {3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
                6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
                8: "ConsumerGroupCurrentMemberAssignment"}[key_version(encode_record(record)[0])] + suffix
        version = struct.unpack_from(">h", raw)[0]
        message, end = messages.decode(name, version, raw, 2)
        assert end == len(raw)
        assert struct.pack(">h", version) + bytes(messages.encode(message, version)) == raw


def test_a_classic_member_metadata_tag_written_by_kafka_is_read_and_kept_byte_for_byte() -> None:
    classes = messages.classes("ConsumerGroupMemberMetadataValue")
    classic = classes["ClassicMemberMetadata"](session_timeout_ms=10_000, supported_protocols=[
        classes["ClassicProtocol"](name="range", metadata=b"\x00\x01")])
    value = classes["ConsumerGroupMemberMetadataValue"](
        instance_id=None, rack_id=None, client_id="c", client_host="/h", subscribed_topic_names=["orders"],
        subscribed_topic_regex=None, rebalance_timeout_ms=5000, server_assignor=None, classic_member_metadata=classic)
    raw = b"\x00\x00" + bytes(messages.encode(value, 0))
    decoded, _ = messages.decode("ConsumerGroupMemberMetadataValue", 0, raw, 2)
    assert decoded.classic_member_metadata.supported_protocols[0].name == "range"
    assert b"\x00\x00" + bytes(messages.encode(decoded, 0)) == raw
    key, _ = encode_record(MemberSubscriptionRecord("g", "m", None))
    member = decode_record(key, raw).member
    assert (member.client_id, member.subscribed_topic_names, member.rebalance_timeout_ms) == ("c", ("orders",), 5000)


# --- what is written -----------------------------------------------------------------------------

def test_a_first_join_writes_kafkas_records_in_kafkas_order() -> None:
    cluster = Cluster()
    join(cluster.coordinator(), "a")
    assert [type(r) for r in cluster.written()] == [
        MemberSubscriptionRecord, SubscriptionMetadataRecord, GroupEpochRecord, TargetAssignmentRecord,
        AssignmentEpochRecord, CurrentAssignmentRecord]
    epoch, assignment = cluster.written()[2], cluster.written()[-1]
    assert epoch.epoch == 2  # a new group is at epoch 1 (Kafka 4), its first member's subscription bumps it
    assert assignment.member.member_epoch == 2 and assignment.member.assigned == {TOPIC_ID: frozenset(range(4))}


def test_a_first_join_subscribed_to_nothing_writes_no_epoch_records() -> None:
    """The group keeps the epochs a new group has (1), so Kafka 4 writes no epoch or target records."""
    cluster = Cluster()
    join(cluster.coordinator(), "a", subscribed_topic_names=[])
    assert [type(r) for r in cluster.written()] == [MemberSubscriptionRecord, CurrentAssignmentRecord]
    assert cluster.written()[-1].member.member_epoch == 1


def test_a_steady_heartbeat_writes_nothing() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    settled_pair(coordinator)
    written = len(cluster.log)
    assert beat(coordinator, "a", 3, {0, 1}).error_code == ErrorCode.NONE
    assert beat(coordinator, "b", 3, {2, 3}).error_code == ErrorCode.NONE
    assert len(cluster.log) == written


def test_a_second_member_rewrites_only_what_changed() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    cluster.log.clear()
    join(coordinator, "b")
    written = cluster.written()
    # "a" keeps its target entry changed (4 -> 2 partitions) but its current assignment is untouched
    # until it heartbeats; "b" gets every record of a new member
    assert [(type(r).__name__, getattr(r, "member_id", None)) for r in written] == [
        ("MemberSubscriptionRecord", "b"), ("GroupEpochRecord", None), ("TargetAssignmentRecord", "a"),
        ("TargetAssignmentRecord", "b"), ("AssignmentEpochRecord", None), ("CurrentAssignmentRecord", "b")]


def test_a_changed_client_id_writes_only_the_member_subscription() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "a", client_id="before")
    cluster.log.clear()
    beat(coordinator, "a", 2, {0, 1, 2, 3}, client_id="after")
    [record] = cluster.written()
    assert isinstance(record, MemberSubscriptionRecord) and record.member.client_id == "after"


def test_a_leaving_member_is_tombstoned_before_the_epoch_bump() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    settled_pair(coordinator)
    cluster.log.clear()
    beat(coordinator, "b", -1)
    assert cluster.written() == [CurrentAssignmentRecord(GROUP, "b", None), TargetAssignmentRecord(GROUP, "b", None),
                                 MemberSubscriptionRecord(GROUP, "b", None), GroupEpochRecord(GROUP, 4)]


def test_an_expired_member_is_tombstoned() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    settled_pair(coordinator)
    cluster.now += SESSION_MS - 1
    beat(coordinator, "a", 3, {0, 1})
    cluster.log.clear()
    cluster.now += 2
    assert coordinator.expire_members() == [(GROUP, "b")]
    assert MemberSubscriptionRecord(GROUP, "b", None) in cluster.written()
    assert "b" not in cluster.restarted().group(GROUP).members


def test_a_join_that_fails_leaves_no_group_and_writes_nothing() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    result = join(coordinator, "a", subscribed_topic_names=None, subscribed_topic_regex="(unclosed")
    assert result.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert coordinator.group(GROUP) is None and cluster.log == []


def test_a_deleted_group_writes_kafkas_tombstones_and_is_not_replayed() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    cluster.log.clear()
    coordinator.forget(GROUP)
    assert cluster.written() == [
        CurrentAssignmentRecord(GROUP, "a", None), TargetAssignmentRecord(GROUP, "a", None),
        AssignmentEpochRecord(GROUP, None), MemberSubscriptionRecord(GROUP, "a", None),
        SubscriptionMetadataRecord(GROUP, None), GroupEpochRecord(GROUP, None)]
    assert all(value is None for _, value in cluster.log)


# --- replay ----------------------------------------------------------------------------------------

def test_replay_rebuilds_the_group_as_it_was() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    settled_pair(coordinator)
    join(coordinator, "c", instance_id="static-c", rack_id="r2", server_assignor="range")
    beat(coordinator, "a", 3, {0, 1})  # "a" is told to give up a partition: mid-rebalance state
    restored = cluster.restarted().group(GROUP)
    assert persisted_state(restored) == persisted_state(coordinator.group(GROUP))
    assert restored.state == coordinator.group(GROUP).state


def test_tombstones_delete_on_replay() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    settled_pair(coordinator)
    beat(coordinator, "b", -1)
    assert set(cluster.restarted().group(GROUP).members) == {"a"}
    coordinator.forget(GROUP)
    assert cluster.restarted().group(GROUP) is None


def test_replay_tolerates_member_records_before_the_group_epoch() -> None:
    """After compaction a member's latest records can precede the group's latest epoch record."""
    groups: dict[str, ConsumerGroup] = {}
    member = ConsumerGroupMember("m", client_id="c", subscribed_topic_names=("orders",), member_epoch=4,
                                 previous_member_epoch=3, assigned={TOPIC_ID: frozenset({0})})
    for record in (CurrentAssignmentRecord("g", "m", member), MemberSubscriptionRecord("g", "m", member),
                   GroupEpochRecord("g", 4), AssignmentEpochRecord("g", 4)):
        replay(groups, decode_record(*encode_record(record)))
    group = groups["g"]
    assert (group.group_epoch, group.members["m"].member_epoch, group.members["m"].client_id) == (4, 4, "c")
    assert group.partition_epoch(TOPIC_ID, 0) == 4


def test_a_tombstone_for_an_unknown_group_is_ignored() -> None:
    groups: dict[str, ConsumerGroup] = {}
    replay(groups, GroupEpochRecord("gone", None))
    replay(groups, MemberSubscriptionRecord("gone", "m", None))
    assert groups == {}


def test_members_continue_with_their_old_id_and_epoch_after_a_restart() -> None:
    cluster = Cluster()
    settled_pair(cluster.coordinator())
    restarted = cluster.restarted()
    a, b = beat(restarted, "a", 3, {0, 1}), beat(restarted, "b", 3, {2, 3})
    assert (a.error_code, a.member_epoch, b.error_code, b.member_epoch) == (ErrorCode.NONE, 3, ErrorCode.NONE, 3)
    assert restarted.group(GROUP).group_epoch == 3  # nothing changed: no rebalance


def test_a_member_that_lost_its_last_response_is_forgiven_after_a_restart() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    beat(coordinator, "a", 2, {0, 1, 2, 3})
    beat(coordinator, "a", 2, {0, 1})  # the coordinator moved "a" to epoch 3; say the response was lost
    result = beat(cluster.restarted(), "a", 2, {0, 1})
    assert result.error_code == ErrorCode.NONE and result.member_epoch == 3


def test_a_wrong_epoch_is_still_fenced_after_a_restart() -> None:
    cluster = Cluster()
    settled_pair(cluster.coordinator())
    assert beat(cluster.restarted(), "a", 7, {0, 1}).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_static_member_that_left_for_a_while_takes_its_place_back_after_a_restart() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "s1", instance_id="i")
    assert beat(coordinator, "s1", -2, instance_id="i").member_epoch == -2
    restarted = cluster.restarted()
    assert restarted.group(GROUP).static_member("i").member_epoch == -2
    back = join(restarted, "s2", instance_id="i")
    assert back.error_code == ErrorCode.NONE and back.assignment == {TOPIC_ID: frozenset(range(4))}
    assert set(cluster.restarted().group(GROUP).members) == {"s2"}


def test_session_timers_restart_at_load() -> None:
    cluster = Cluster()
    settled_pair(cluster.coordinator())
    cluster.now += SESSION_MS * 10  # the broker was down for a long time
    restarted = cluster.restarted()
    assert restarted.expire_members() == []
    cluster.now += 1000
    beat(restarted, "a", 3, {0, 1})  # "a" heartbeats after the restart, "b" never does
    cluster.now += SESSION_MS - 1000
    assert restarted.expire_members() == [(GROUP, "b")]


def test_a_member_still_revoking_gets_its_rebalance_timeout_again_at_load() -> None:
    cluster = Cluster()
    coordinator = cluster.coordinator()
    join(coordinator, "a")
    join(coordinator, "b")
    beat(coordinator, "a", 2, {0, 1, 2, 3})  # "a" must revoke 2-3
    restarted = cluster.restarted()
    assert restarted.group(GROUP).members["a"].state == MemberState.UNREVOKED_PARTITIONS
    cluster.now += REBALANCE_MS
    assert (GROUP, "a") in restarted.expire_members()


# --- through a real broker's log -------------------------------------------------------------------

def _config(tmp_path) -> dict[str, str]:
    return {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}


def _heartbeat_pair(broker: Broker, coordinator: Coordinator) -> None:
    async def run() -> None:
        settled_pair(coordinator.consumer_groups, broker.topics["orders"].topic_id)
        coordinator.close()
    asyncio.run(run())


def test_a_restarted_broker_rebuilds_the_group_from_consumer_offsets(tmp_path) -> None:
    broker = Broker(build(_config(tmp_path)))
    broker.create_topic("orders", 4)
    coordinator = Coordinator(broker)
    _heartbeat_pair(broker, coordinator)
    before = persisted_state(coordinator.consumer_groups.group(GROUP))
    broker.close()
    reopened = Broker(build(_config(tmp_path)))
    try:
        restored = Coordinator(reopened).consumer_groups.group(GROUP)
        assert persisted_state(restored) == before
        assert restored.members["a"].assigned == {reopened.topics["orders"].topic_id: frozenset({0, 1})}
    finally:
        reopened.close()


def test_the_records_sit_in_the_groups_partition_with_kafkas_key_versions(tmp_path) -> None:
    broker = Broker(build(_config(tmp_path)))
    try:
        broker.create_topic("orders", 4)
        coordinator = Coordinator(broker)
        _heartbeat_pair(broker, coordinator)
        plog = broker.partition_log(OFFSETS_TOPIC, coordinator.offsets.partition_for(GROUP))
        buf = plog.read(0, 1 << 20).read_bytes()
        versions, pos = set(), 0
        while pos < len(buf):
            header = read_batch_header(buf, pos)
            versions |= {key_version(bytes(r.key)) for r in iter_records(buf, pos)}
            pos += header.size
        assert versions == set(range(3, 9))
    finally:
        broker.close()


def test_a_group_deleted_before_a_restart_stays_deleted(tmp_path) -> None:
    broker = Broker(build(_config(tmp_path)))
    broker.create_topic("orders", 4)
    coordinator = Coordinator(broker)
    _heartbeat_pair(broker, coordinator)
    for member_id in ("a", "b"):
        assert beat(coordinator.consumer_groups, member_id, -1).error_code == ErrorCode.NONE
    coordinator.forget_group(GROUP)
    broker.close()
    reopened = Broker(build(_config(tmp_path)))
    try:
        assert Coordinator(reopened).consumer_groups.group(GROUP) is None
    finally:
        reopened.close()
