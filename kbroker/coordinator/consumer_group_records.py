"""KIP-848 group records in `__consumer_offsets`, in the byte layout of Kafka's coordinator.

Each record's key and value start with an int16 version, as Kafka writes them: keys are
versions 3 (group epoch), 4 (subscription metadata), 5 (member subscription), 6 (target
assignment epoch), 7 (member target assignment) and 8 (member current assignment); every
value is version 0 and flexible. A null value is the tombstone. The records themselves are
the plain classes of kbroker.coordinator.consumer_groups; this module only turns them into
bytes and back, and hooks them into the offset store's replay and appends.
"""

from __future__ import annotations

import logging
import struct
import time
import uuid
from collections.abc import Iterable

from kbroker.coordinator.consumer_groups import (
    AssignmentEpochRecord,
    ConsumerGroup,
    ConsumerGroupMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    GroupRecord,
    MemberState,
    MemberSubscriptionRecord,
    SubscriptionMetadataRecord,
    TargetAssignmentRecord,
    TopicMetadata,
    TopicPartitions,
    is_tombstone,
    replay,
)
from kbroker.coordinator.offsets import OffsetStore
from wire import messages
from wire.records import Record, build_batch

log = logging.getLogger(__name__)

_VERSION = struct.Struct(">h")
VALUE_VERSION = 0

# record class -> (key version, key spec, value spec)
_LAYOUT: dict[type, tuple[int, str, str]] = {
    GroupEpochRecord: (3, "ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue"),
    SubscriptionMetadataRecord: (4, "ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue"),
    MemberSubscriptionRecord: (5, "ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue"),
    AssignmentEpochRecord: (6, "ConsumerGroupTargetAssignmentMetadataKey",
                            "ConsumerGroupTargetAssignmentMetadataValue"),
    TargetAssignmentRecord: (7, "ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue"),
    CurrentAssignmentRecord: (8, "ConsumerGroupCurrentMemberAssignmentKey",
                              "ConsumerGroupCurrentMemberAssignmentValue"),
}
_BY_KEY_VERSION = {version: (cls, key, value) for cls, (version, key, value) in _LAYOUT.items()}
KEY_VERSIONS = frozenset(_BY_KEY_VERSION)

# Kafka's MemberState codes (org.apache.kafka.coordinator.group.modern.MemberState)
_STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {code: state for state, code in _STATE_CODES.items()}


def _versioned(version: int, message) -> bytes:
    return _VERSION.pack(version) + bytes(messages.encode(message, version))


def encode_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of one record; value None for a tombstone."""
    key_version, key_spec, value_spec = _LAYOUT[type(record)]
    key_fields = {"group_id": record.group_id}
    if hasattr(record, "member_id"):
        key_fields["member_id"] = record.member_id
    key = _versioned(key_version, messages.classes(key_spec)[key_spec](**key_fields))
    value = _encode_value(record, value_spec)
    return key, None if value is None else _versioned(VALUE_VERSION, value)


def _encode_value(record: GroupRecord, spec: str):
    classes = messages.classes(spec)
    Value = classes[spec]
    if is_tombstone(record):
        return None
    match record:
        case GroupEpochRecord(epoch=epoch):
            return Value(epoch=epoch)
        case AssignmentEpochRecord(epoch=epoch):
            return Value(assignment_epoch=epoch)
        case SubscriptionMetadataRecord(topics=topics):
            return Value(topics=[classes["TopicMetadata"](topic_id=t.topic_id, topic_name=t.name,
                                                          num_partitions=t.partitions, partition_metadata=[])
                                 for t in topics])
        case TargetAssignmentRecord(partitions=partitions):
            return Value(topic_partitions=_topic_partitions(classes["TopicPartition"], partitions))
        case MemberSubscriptionRecord(member=m):
            return Value(instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                         client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                         subscribed_topic_regex=m.subscribed_topic_regex, rebalance_timeout_ms=m.rebalance_timeout_ms,
                         server_assignor=m.server_assignor, classic_member_metadata=None)
        case CurrentAssignmentRecord(member=m):
            TopicPartitionsClass = classes["TopicPartitions"]
            return Value(member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
                         state=_STATE_CODES[m.state],
                         assigned_partitions=_topic_partitions(TopicPartitionsClass, m.assigned),
                         partitions_pending_revocation=_topic_partitions(TopicPartitionsClass, m.pending_revocation))
    raise TypeError(f"not a consumer group record: {record!r}")


def _topic_partitions(cls: type, partitions: TopicPartitions) -> list:
    """Topics in id order, partitions ascending: the same state always gives the same bytes."""
    return [cls(topic_id=topic_id, partitions=sorted(indexes))
            for topic_id, indexes in sorted(partitions.items(), key=lambda item: str(item[0]))]


def key_version(key: bytes) -> int:
    return _VERSION.unpack_from(key, 0)[0]


def decode_record(key: bytes, value: bytes | None) -> GroupRecord | None:
    """The record a `__consumer_offsets` key/value holds; None if the key is of another type."""
    layout = _BY_KEY_VERSION.get(key_version(key))
    if layout is None:
        return None
    cls, key_spec, value_spec = layout
    decoded_key, _ = messages.decode(key_spec, key_version(key), key, 2)
    decoded = None
    if value is not None:
        decoded, _ = messages.decode(value_spec, _VERSION.unpack_from(value, 0)[0], value, 2)
    group_id = decoded_key.group_id
    member_id = getattr(decoded_key, "member_id", None)
    if cls is GroupEpochRecord:
        return GroupEpochRecord(group_id, None if decoded is None else decoded.epoch)
    if cls is AssignmentEpochRecord:
        return AssignmentEpochRecord(group_id, None if decoded is None else decoded.assignment_epoch)
    if cls is SubscriptionMetadataRecord:
        topics = None if decoded is None else tuple(
            TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in decoded.topics)
        return SubscriptionMetadataRecord(group_id, topics)
    if cls is TargetAssignmentRecord:
        return TargetAssignmentRecord(group_id, member_id,
                                      None if decoded is None else _partitions(decoded.topic_partitions))
    if cls is MemberSubscriptionRecord:
        return MemberSubscriptionRecord(group_id, member_id, None if decoded is None else ConsumerGroupMember(
            member_id, instance_id=decoded.instance_id, rack_id=decoded.rack_id, client_id=decoded.client_id,
            client_host=decoded.client_host, rebalance_timeout_ms=decoded.rebalance_timeout_ms,
            subscribed_topic_names=tuple(decoded.subscribed_topic_names),
            subscribed_topic_regex=decoded.subscribed_topic_regex, server_assignor=decoded.server_assignor))
    return CurrentAssignmentRecord(group_id, member_id, None if decoded is None else ConsumerGroupMember(
        member_id, member_epoch=decoded.member_epoch, previous_member_epoch=decoded.previous_member_epoch,
        state=_STATES.get(decoded.state, MemberState.STABLE),  # Kafka's UNKNOWN (127): reconcile from scratch
        assigned=_partitions(decoded.assigned_partitions),
        pending_revocation=_partitions(decoded.partitions_pending_revocation)))


def _partitions(topics: Iterable) -> TopicPartitions:
    merged: dict[uuid.UUID, frozenset[int]] = {}
    for topic in topics:
        if topic.partitions:
            merged[topic.topic_id] = merged.get(topic.topic_id, frozenset()) | frozenset(topic.partitions)
    return merged


class ConsumerGroupOffsetStore(OffsetStore):
    """The offset store whose replay also rebuilds KIP-848 groups (into `consumer_groups`) and
    which appends their records to the group's partition of `__consumer_offsets`."""

    def __init__(self, broker) -> None:
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        super().__init__(broker)  # replays, calling _apply for every record

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key or key_version(key) not in KEY_VERSIONS:
            super()._apply(key, value)
            return
        try:
            record = decode_record(bytes(key), None if value is None else bytes(value))
            if record is not None:
                replay(self.consumer_groups, record)
        except Exception:  # one bad record must not stop the broker from starting
            log.exception("skipping an unreadable consumer group record in __consumer_offsets")

    def write_consumer_group_records(self, group_id: str, records: list[GroupRecord]) -> None:
        """One batch in the group's partition, so a heartbeat's records land (or not) together,
        as Kafka appends them; acknowledged at once, this single replica being the whole ISR."""
        now_ms = time.time_ns() // 1_000_000
        batch = build_batch(Record(i, now_ms, *encode_record(record), ()) for i, record in enumerate(records))
        self._append_to(self.partition_for(group_id), batch, now_ms)
