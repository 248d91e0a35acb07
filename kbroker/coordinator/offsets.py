"""Committed offsets: records in `__consumer_offsets` in Kafka's format, answered from memory.

Every commit is appended to the group's partition (key: OffsetCommitKey at version 1,
value: OffsetCommitValue at version 3, each behind its int16 version, as Kafka writes
them) so Kafka's own tools can read the topic, and compaction keeps the latest commit per
(group, topic, partition). OffsetFetch is answered from a dict rebuilt at start by
replaying the partitions.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from kbroker.coordinator.hashing import partition_for
from wire import messages
from wire.records import Record, build_batch, iter_records, read_batch_header

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
KEY_VERSION = 1          # offset-commit keys are versions 0 and 1; 2 is group metadata
VALUE_VERSION = 3        # the newest non-flexible value, with the leader epoch
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3  # the newest non-flexible group value, with static members' instance ids
_VERSION = struct.Struct(">h")
_REPLAY_CHUNK = 1 << 20


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def encode_key(group: str, topic: str, partition: int) -> bytes:
    key = messages.OffsetCommitKey(group=group, topic=topic, partition=partition)
    return _VERSION.pack(KEY_VERSION) + bytes(messages.encode(key, KEY_VERSION))


def encode_value(committed: CommittedOffset) -> bytes:
    value = messages.OffsetCommitValue(
        offset=committed.offset, leader_epoch=committed.leader_epoch,
        metadata=committed.metadata, commit_timestamp=committed.commit_timestamp)
    return _VERSION.pack(VALUE_VERSION) + bytes(messages.encode(value, VALUE_VERSION))


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset-commit key; None for other record types."""
    (version,) = _VERSION.unpack_from(key, 0)
    if version not in (0, 1):
        return None
    decoded, _ = messages.decode("OffsetCommitKey", version, key, 2)
    return decoded.group, decoded.topic, decoded.partition


def encode_group_key(group: str) -> bytes:
    key = messages.GroupMetadataKey(group=group)
    return _VERSION.pack(GROUP_KEY_VERSION) + bytes(messages.encode(key, GROUP_KEY_VERSION))


def decode_group_key(key: bytes) -> str | None:
    """The group of a group-metadata key; None for other record types."""
    (version,) = _VERSION.unpack_from(key, 0)
    if version != GROUP_KEY_VERSION:
        return None
    return messages.decode("GroupMetadataKey", version, key, 2)[0].group


def decode_value(value: bytes) -> CommittedOffset:
    (version,) = _VERSION.unpack_from(value, 0)
    decoded, _ = messages.decode("OffsetCommitValue", version, value, 2)
    return CommittedOffset(decoded.offset, decoded.leader_epoch, decoded.metadata, decoded.commit_timestamp)


class OffsetStore:
    """The cache of committed offsets in front of `__consumer_offsets`."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.partitions = int(broker.config["offsets.topic.num.partitions"])
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.loaded_groups: dict[str, bytes] = {}  # latest group-metadata value per group, from replay
        topic = broker.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            self.partitions = topic.partitions
            self._replay()

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.partitions)

    def _ensure_topic(self) -> None:
        """Create the topic on first use, as Kafka does when the first group needs it."""
        if OFFSETS_TOPIC not in self.broker.topics:
            self.broker.create_topic(OFFSETS_TOPIC, self.partitions, {"cleanup.policy": "compact"})

    def _replay(self) -> None:
        """Rebuild the cache by reading every partition from its start (later records win)."""
        for partition in range(self.partitions):
            plog = self.broker.partition_log(OFFSETS_TOPIC, partition)
            if plog is None:
                continue
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                chunk = plog.read(offset, _REPLAY_CHUNK)
                if chunk is None:
                    break
                buf = chunk.read_bytes()
                pos = 0
                while pos + 61 <= len(buf):
                    header = read_batch_header(buf, pos)
                    if pos + header.size > len(buf):
                        break
                    if not header.is_control:
                        for record in iter_records(buf, pos):
                            self._apply(record.key, record.value)
                    offset = header.base_offset + header.last_offset_delta + 1
                    pos += header.size
                if pos == 0:
                    break  # cannot make progress; leave the rest unread rather than loop
        log.info("loaded committed offsets of %d groups", len(self.offsets))

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        try:
            parsed = decode_key(key)
            if parsed is None:
                group_id = decode_group_key(key)
                if group_id is not None and value is None:
                    self.loaded_groups.pop(group_id, None)
                elif group_id is not None:
                    self.loaded_groups[group_id] = bytes(value)
                return
            group, topic, partition = parsed
            if value is None:
                self.offsets.get(group, {}).pop((topic, partition), None)
                if not self.offsets.get(group, True):
                    del self.offsets[group]
            else:
                self.offsets.setdefault(group, {})[(topic, partition)] = decode_value(value)
        except Exception:  # one bad record must not stop the broker from starting
            log.exception("skipping an unreadable __consumer_offsets record")

    def _append(self, group: str, records: list[Record], now_ms: int) -> None:
        self._ensure_topic()
        plog = self.broker.partition_log(OFFSETS_TOPIC, self.partition_for(group))
        plog.append(build_batch(records), now_ms, coordinator=True)
        plog.update_high_watermark(plog.log_end_offset)
        self.broker.notify_appended()

    def write_group(self, group: str, value: bytes | None, now_ms: int) -> None:
        """A group-metadata record (None: its tombstone) in the group's partition."""
        self._append(group, [Record(0, now_ms, encode_group_key(group), value, ())], now_ms)

    def commit(self, group: str, commits: dict[tuple[str, int], CommittedOffset], now_ms: int) -> None:
        """Append the commits as one batch to the group's partition, then update the cache."""
        if not commits:
            return
        records = [Record(i, now_ms, encode_key(group, t, p), encode_value(c), ())
                   for i, ((t, p), c) in enumerate(commits.items())]
        self._append(group, records, now_ms)
        self.offsets.setdefault(group, {}).update(commits)

    def delete(self, group: str, partitions: list[tuple[str, int]], now_ms: int) -> None:
        """Tombstones for the group's offsets of `partitions`, so compaction drops them too."""
        current = self.offsets.get(group, {})
        doomed = [tp for tp in partitions if tp in current]
        if doomed:
            records = [Record(i, now_ms, encode_key(group, t, p), None, ()) for i, (t, p) in enumerate(doomed)]
            self._append(group, records, now_ms)
            for tp in doomed:
                current.pop(tp, None)
        if not current:
            self.offsets.pop(group, None)

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.offsets.get(group, {}).get((topic, partition))

    def group_offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.get(group, {})
