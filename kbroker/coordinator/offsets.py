"""Committed offsets: records in `__consumer_offsets` in Kafka's format, answered from memory.

Every commit is appended to the group's partition (key: OffsetCommitKey at version 1,
value: OffsetCommitValue at version 3, each behind its int16 version, as Kafka writes
them) so Kafka's own tools can read the topic, and compaction keeps the latest commit per
(group, topic, partition). OffsetFetch is answered from a dict rebuilt at start by
replaying the partitions.

Commits are the hot path (a consumer commits every few seconds per partition, and tools
commit in bulk), so their batches are laid out here directly: each (group, topic,
partition) key is encoded once and kept, values are one `struct.pack`, and the batch is
the bytes `wire.records.build_batch` would produce for the same records.

Group commit: with `OffsetStore.deferring` set, commits are answered from the cache at once
and appended later, one batch per partition for all the commits of a burst, by
`flush_pending`, which the network layer must call before it sends any response (so nothing
is acknowledged before it is in the log). Kafka's coordinator runtime batches the writes of
many requests the same way (group.coordinator.append.linger.ms); here the window is one
burst of requests read together, so no request waits for a timer.

In a cluster (zookeeper.connect set) a broker coordinates only the groups whose partition it
leads: `owned` holds those partitions, `replay_partition` loads one when this broker becomes
its leader and `forget_groups` drops them when it stops leading it. Appends there ask the
ISR's min.insync.replicas, and the commit handler waits for the high watermark (acks=all),
as Kafka's coordinator does; commits are then never deferred.

Transactional commits (TxnOffsetCommit) are one transactional batch carrying the producer's id
and epoch, appended at once (never deferred). Their offsets stay pending per (producer, group),
out of OffsetFetch's sight, until the transaction's COMMIT or ABORT marker is appended to the
partition (`complete_transaction`); replay does the same from the log, so a transaction still
open at its end stays pending. Between a transactional batch and its marker, a plain commit of
the same partition appended later wins over it, as in Kafka (the offsets of the two batches
decide; `_cached_ends` remembers them while a group has pending offsets).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import crc32c

from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.log_replay import log_batches
from kbroker.log.errors import LogDirOfflineError
from wire import messages
from wire.errors import ErrorCode
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    Record,
    build_batch,
    iter_records,
    parse_control_key,
)
from wire.varint import encode_varint

log = logging.getLogger(__name__)
ACKS_LEADER = 1  # a single node: the ISR is itself
ACKS_ALL = -1    # a cluster: min.insync.replicas is checked, and commits wait for the high watermark

OFFSETS_TOPIC = "__consumer_offsets"
# what Kafka gives the topic when a cluster creates it (offsets.topic.segment.bytes' default among them)
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
KEY_VERSION = 1          # offset-commit keys are versions 0 and 1; 2 is group metadata
VALUE_VERSION = 3        # the newest non-flexible value, with the leader epoch
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3  # the newest non-flexible group value, with static members' instance ids
_VERSION = struct.Struct(">h")
# OffsetCommitValue v3 behind its version: offset, leader epoch, metadata (int16 length,
# UTF-8), commit timestamp; the schema's field order, written without the generic encoder
_VALUE_HEAD = struct.Struct(">hqih")
_VALUE_EMPTY_METADATA = struct.Struct(">hqihq")
_VALUE_FIELD_EMPTY_METADATA = struct.Struct(">Bhqihq")  # the same behind its record length varint
_VALUE_EMPTY_METADATA_LENGTH = 2 * _VALUE_EMPTY_METADATA.size  # zigzag: one byte while under 64
_TIMESTAMP = struct.Struct(">q")
# a record batch header split at its CRC, which covers everything after it
_BATCH_BEFORE_CRC = struct.Struct(">qiibI")   # base offset, batch length, leader epoch, magic, crc
_BATCH_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count
_BATCH_LENGTH_BEFORE_CRC_END = 9               # leader epoch + magic + crc: in batchLength, outside the CRC
_NO_PRODUCER = -1
_SMALL_VARINTS = tuple(encode_varint(i) for i in range(64))  # one byte each
_KEY_CACHE_LIMIT = 100_000
_DEFERRED_BATCH_BYTES = 512 * 1024  # a burst's commits as batches well under max.message.bytes (1 MiB)
_TXN_BASE_SEQUENCE = 0  # what Kafka's GroupMetadataManager writes in a transactional commit batch's header


class CoordinatorWriteError(Exception):
    """An append to the group's partition failed with `error_code`, already mapped the way Kafka's
    coordinator maps a failed append for its clients (see `coordinator_error`)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def coordinator_error(error_code: int) -> int:
    """Kafka's answer for a commit whose append failed with `error_code` (GroupMetadataManager.storeOffsets'
    mapping; any other error, REQUEST_TIMED_OUT among them, is passed on as it is)."""
    if error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                      ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error_code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return error_code


def group_store_error(error_code: int) -> int:
    """Kafka's answer for a SyncGroup whose group record could not be stored (GroupMetadataManager.storeGroup)."""
    if error_code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if error_code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return coordinator_error(error_code)


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def encode_key(group: str, topic: str, partition: int) -> bytes:
    key = messages.OffsetCommitKey(group=group, topic=topic, partition=partition)
    return _VERSION.pack(KEY_VERSION) + bytes(messages.encode(key, KEY_VERSION))


def encode_value(committed: CommittedOffset) -> bytes:
    offset, leader_epoch, metadata, commit_timestamp = committed
    if not metadata:
        return _VALUE_EMPTY_METADATA.pack(VALUE_VERSION, offset, leader_epoch, 0, commit_timestamp)
    raw = metadata.encode()
    return _VALUE_HEAD.pack(VALUE_VERSION, offset, leader_epoch, len(raw)) + raw + _TIMESTAMP.pack(commit_timestamp)


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 64 else encode_varint(value)


def length_prefixed(data: bytes | None) -> bytes:
    """A record's key or value field: varint length, then the bytes (None: length -1)."""
    return b"\x01" if data is None else _varint(len(data)) + data


def value_field(committed: CommittedOffset) -> bytes:
    """`length_prefixed(encode_value(committed))`, in one step for the usual empty metadata."""
    offset, leader_epoch, metadata, commit_timestamp = committed
    if metadata:
        return length_prefixed(encode_value(committed))
    return _VALUE_FIELD_EMPTY_METADATA.pack(_VALUE_EMPTY_METADATA_LENGTH, VALUE_VERSION, offset, leader_epoch, 0,
                                            commit_timestamp)


def coordinator_batch(fields: Sequence[tuple[bytes, bytes]], timestamp: int) -> bytes:
    """One uncompressed batch of records (key field, value field from `length_prefixed`), all at
    `timestamp`, with no producer: byte for byte what `build_batch` makes of the same records."""
    records = []
    for offset_delta, (key_field, value_field) in enumerate(fields):
        # attributes 0, timestamp delta 0, offset delta, key, value, no headers
        body = b"".join((b"\x00\x00", _varint(offset_delta), key_field, value_field, b"\x00"))
        records.append(_varint(len(body)))
        records.append(body)
    count = len(fields)
    after_crc = _BATCH_AFTER_CRC.pack(0, count - 1, timestamp, timestamp, _NO_PRODUCER, _NO_PRODUCER,
                                      _NO_PRODUCER, count) + b"".join(records)
    before_crc = _BATCH_BEFORE_CRC.pack(0, len(after_crc) + _BATCH_LENGTH_BEFORE_CRC_END, -1, 2,
                                        crc32c.crc32c(after_crc))
    return before_crc + after_crc


def transactional_batch(records: Sequence[tuple[bytes, bytes]], timestamp: int, producer_id: int,
                        producer_epoch: int) -> bytes:
    """A TxnOffsetCommit's (key, value) records as Kafka's coordinator writes them: one uncompressed
    transactional batch of the producer, base sequence 0, every record at `timestamp`."""
    return build_batch([Record(delta, timestamp, key, value, ()) for delta, (key, value) in enumerate(records)],
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=_TXN_BASE_SEQUENCE,
                       is_transactional=True)


def _chunks(fields: list[tuple[bytes, bytes]], max_bytes: int) -> Iterator[list[tuple[bytes, bytes]]]:
    """Consecutive runs of records of about `max_bytes` at most (one record per run at least)."""
    if len(fields) == 1:  # one commit in flight per consumer: the usual burst
        yield fields
        return
    start = size = 0
    for index, (key_field, value_field) in enumerate(fields):
        record = len(key_field) + len(value_field)
        if size + record > max_bytes and index > start:
            yield fields[start:index]
            start, size = index, 0
        size += record
    yield fields[start:]


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
    if version == VALUE_VERSION:  # what kbroker writes: read directly, as replay does it for every record
        offset, leader_epoch, size = _VALUE_HEAD.unpack_from(value, 0)[1:]
        start = _VALUE_HEAD.size
        if 0 <= size <= len(value) - start - _TIMESTAMP.size:
            (commit_timestamp,) = _TIMESTAMP.unpack_from(value, start + size)
            return CommittedOffset(offset, leader_epoch, bytes(value[start:start + size]).decode(), commit_timestamp)
    decoded, _ = messages.decode("OffsetCommitValue", version, value, 2)
    return CommittedOffset(decoded.offset, decoded.leader_epoch, decoded.metadata, decoded.commit_timestamp)


class OffsetStore:
    """The cache of committed offsets in front of `__consumer_offsets`."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.partitions = int(broker.config["offsets.topic.num.partitions"])
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.loaded_groups: dict[str, bytes] = {}  # latest group-metadata value per group, from replay
        self._key_fields: dict[tuple[str, str, int], bytes] = {}  # encoded once per (group, topic, partition)
        self._replayed_keys: dict[bytes, tuple[str, str, int]] = {}  # decoded once per replay
        self.deferring = False  # set by a network layer that calls flush_pending before sending responses
        self._pending: dict[int, list[tuple[bytes, bytes]]] = {}  # partition -> deferred commit records
        # partition -> (group, (topic, partition), cached value before the commit), to undo a failed flush
        self._undo: dict[int, list[tuple[str, tuple[str, int], CommittedOffset | None]]] = {}
        self._lost_pending = False  # a flush failed since flush_pending last answered
        # the partitions whose groups this broker coordinates; None: all of them (a single node)
        self.owned: set[int] | None = set() if broker.config.cluster_mode else None
        # a cluster's commits waiting for the ISR: (group, topic, partition) -> the end of its newest append, so
        # only the newest commit enters the cache (Kafka's pendingOffsetCommits)
        self._awaiting_isr: dict[tuple[str, str, int], int] = {}
        # transactional commits whose transaction has not ended: producer id -> group -> (topic, partition) ->
        # (offset, the end of its batch) (Kafka's pendingTransactionalOffsetCommits), and group -> those producers
        self._txn_offsets: dict[int, dict[str, dict[tuple[str, int], tuple[CommittedOffset, int]]]] = {}
        self._txn_groups: dict[str, set[int]] = {}
        # while a group has pending transactional offsets: (topic, partition) -> the end of the batch whose commit
        # the cache holds, so a transaction ending later does not replace a newer commit (Kafka's olderThan)
        self._cached_ends: dict[str, dict[tuple[str, int], int]] = {}
        self._replay_end = 0  # the end of the batch replay_partition is applying
        topic = broker.topics.get(OFFSETS_TOPIC)
        if topic is not None and self.owned is None:
            self.partitions = topic.partitions
            self._replay()

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.partitions)

    def not_coordinating(self, group: str) -> bool:
        """Whether this broker does not coordinate the group: in a cluster, another broker leads its
        partition; anywhere, the partition sits in a failed log dir (Kafka resigns it as leader)."""
        partition = self.partition_for(group)
        if self.owned is not None and partition not in self.owned:
            return True
        logs = self.broker.logs
        return logs.has_offline_partitions and logs.is_offline(OFFSETS_TOPIC, partition)

    def _ensure_topic(self) -> None:
        """Create the topic on first use, as Kafka does when the first group needs it (a cluster
        creates it through ZooKeeper when FindCoordinator first asks)."""
        if self.owned is None and OFFSETS_TOPIC not in self.broker.topics:
            self.broker.create_topic(OFFSETS_TOPIC, self.partitions, {"cleanup.policy": "compact"})

    def _replay(self) -> None:
        """Rebuild the cache by reading every partition from its start (later records win)."""
        for partition in range(self.partitions):
            self.replay_partition(partition)
        log.info("loaded committed offsets of %d groups", len(self.offsets))

    def replay_partition(self, partition: int) -> None:
        """Add the groups of one partition to the cache, read from its start (later records win)."""
        plog = self.broker.partition_log(OFFSETS_TOPIC, partition)
        if plog is None:
            return
        for buf, pos, header in log_batches(plog):
            if not header.is_control:
                self._replay_end = header.next_offset
                if header.is_transactional and header.producer_id >= 0:
                    self._replay_transactional(buf, pos, header)
                else:
                    for record in iter_records(buf, pos):
                        self._apply(record.key, record.value)
            elif header.is_transactional:
                self._replay_marker(buf, pos, header, partition)
        self._replayed_keys = {}

    def _replay_transactional(self, buf: bytes, pos: int, header: BatchHeader) -> None:
        """A transactional batch met in replay: its offset commits are pending for its producer until a marker
        of that producer follows (a tombstone in it withdraws the producer's pending offset, as in Kafka)."""
        for record in iter_records(buf, pos):
            try:
                key = record.key if record.key is None or type(record.key) is bytes else bytes(record.key)
                parsed = self._replayed_keys.get(key) if key else None
                if parsed is None and key:
                    parsed = decode_key(key)
                if parsed is None:
                    self._apply(key, record.value)  # not an offset commit: as outside a transaction
                    continue
                self._replayed_keys[key] = parsed
                group, topic, partition = parsed
                if record.value is None:
                    self._drop_pending(group, [(topic, partition)], header.producer_id)
                else:
                    self._add_pending(header.producer_id, group, {(topic, partition): decode_value(record.value)},
                                      self._replay_end)
            except Exception:  # one bad record must not stop the broker from starting
                log.exception("skipping an unreadable transactional __consumer_offsets record")

    def _replay_marker(self, buf: bytes, pos: int, header: BatchHeader, partition: int) -> None:
        """A control batch met in replay: a COMMIT or ABORT marker ends its producer's transaction here."""
        try:
            for record in iter_records(buf, pos):
                control = parse_control_key(record.key)
                if control in (CONTROL_COMMIT, CONTROL_ABORT):
                    self.complete_transaction(partition, header.producer_id, control == CONTROL_COMMIT)
                return  # a marker batch holds one record
        except Exception:
            log.exception("skipping an unreadable control batch in %s-%d", OFFSETS_TOPIC, partition)

    def forget_groups(self, group_ids: Iterable[str]) -> None:
        """Drop groups from the cache, their records staying in the log (another broker leads them now)."""
        leaving = set(group_ids)
        for group_id in leaving:
            self.offsets.pop(group_id, None)
            self.loaded_groups.pop(group_id, None)
        for key in [key for key in self._awaiting_isr if key[0] in leaving]:
            del self._awaiting_isr[key]
        for group_id in leaving & self._txn_groups.keys():
            for producer_id in list(self._txn_groups[group_id]):
                self._close_pending(producer_id, group_id)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        try:
            key = key if type(key) is bytes else bytes(key)
            parsed = self._replayed_keys.get(key)
            if parsed is None:
                parsed = decode_key(key)
                if parsed is None:
                    self._apply_group(key, value)
                    return
                self._replayed_keys[key] = parsed  # a group commits the same partitions again and again
            group, topic, partition = parsed
            if value is None:
                self.offsets.get(group, {}).pop((topic, partition), None)
                if not self.offsets.get(group, True):
                    del self.offsets[group]
            else:
                self.offsets.setdefault(group, {})[(topic, partition)] = decode_value(value)
            if self._txn_groups and group in self._txn_groups:
                self._replayed_over_pending(group, (topic, partition), value is None)
        except Exception:  # one bad record must not stop the broker from starting
            log.exception("skipping an unreadable __consumer_offsets record")

    def _replayed_over_pending(self, group: str, topic_partition: tuple[str, int], tombstone: bool) -> None:
        """A plain commit replayed while the group has pending transactional offsets: it is newer than the
        transactional batches before it; a tombstone also withdraws the partition's pending offsets (deletions
        write one for them, as Kafka 4 does, so a restart agrees with what the deletion did in memory)."""
        if tombstone:
            self._drop_pending(group, [topic_partition])
            self._cached_ends.get(group, {}).pop(topic_partition, None)
        else:
            self._cached_ends.setdefault(group, {})[topic_partition] = self._replay_end

    def _apply_group(self, key: bytes, value: bytes | None) -> None:
        group_id = decode_group_key(key)
        if group_id is not None and value is None:
            self.loaded_groups.pop(group_id, None)
        elif group_id is not None:
            self.loaded_groups[group_id] = bytes(value)

    def _append(self, group: str, fields: Sequence[tuple[bytes, bytes]], now_ms: int, *,
                check_isr: bool = True) -> int:
        """One batch of (key field, value field) records in the group's partition, after any
        deferred commits (a tombstone must follow the commit it deletes); the offset after it."""
        if self._pending and not self.flush_pending():
            self._lost_pending = True  # flush_pending tells the network layer when it asks
        return self._append_to(self.partition_for(group), coordinator_batch(fields, now_ms), now_ms,
                               check_isr=check_isr)

    def _append_to(self, partition: int, batch: bytes, now_ms: int, *, check_isr: bool = True) -> int:
        """Appended as the partition's leader (its leader epoch stamped in); the offset after the batch,
        which the high watermark must pass before the append counts as committed (at once on a single
        node, whose ISR is itself). In a cluster a refused append raises CoordinatorWriteError."""
        self._ensure_topic()
        plog = self.writable_log(partition)
        leader = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        if leader is None:
            raise LogDirOfflineError(f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        try:
            acks = ACKS_ALL if self.owned is not None and check_isr else ACKS_LEADER
            info = leader.append_as_leader(batch, now_ms, acks, coordinator=True)
        except OSError as error:
            raise self.broker.logs.io_error(plog, error, f"appending records to {OFFSETS_TOPIC}-{partition}") \
                from error
        except Exception as error:
            code = getattr(error, "error_code", None)  # kbroker.cluster.partition.ReplicationError
            if code is None:
                raise
            raise CoordinatorWriteError(coordinator_error(code), str(error)) from error
        self.broker.notify_appended(OFFSETS_TOPIC, partition)
        return info.last_offset + 1

    def writable_log(self, partition: int):
        """The partition's log; LogDirOfflineError when its log dir has failed."""
        plog = self.broker.partition_log(OFFSETS_TOPIC, partition)
        if plog is None:
            raise LogDirOfflineError(f"{OFFSETS_TOPIC}-{partition} is offline")
        return plog

    def _key_field(self, group: str, topic: str, partition: int) -> bytes:
        """The record key field of an offset commit, from the cache (bounded: cleared when full)."""
        cache_key = (group, topic, partition)
        field = self._key_fields.get(cache_key)
        if field is None:
            if len(self._key_fields) >= _KEY_CACHE_LIMIT:
                self._key_fields.clear()
            field = self._key_fields[cache_key] = length_prefixed(encode_key(group, topic, partition))
        return field

    def write_group(self, group: str, value: bytes | None, now_ms: int) -> int:
        """A group-metadata record (None: its tombstone, appended without an ISR check) in the group's partition;
        the offset after it."""
        return self._append(group, [(length_prefixed(encode_group_key(group)), length_prefixed(value))], now_ms,
                            check_isr=value is not None)

    def commit(self, group: str, commits: dict[tuple[str, int], CommittedOffset], now_ms: int) -> int | None:
        """Append the commits as one batch to the group's partition (or, deferring, stage them for
        `flush_pending`), then update the cache (in a cluster the caller does, once the high watermark
        passed them). Appended now: the offset the high watermark must reach."""
        if not commits:
            return None
        key_field = self._key_field
        fields = [(key_field(group, topic, partition), value_field(committed))
                  for (topic, partition), committed in commits.items()]
        if not self.deferring or (self._txn_groups and group in self._txn_groups):
            end = self._append(group, fields, now_ms)
            if self.owned is None:
                self.offsets.setdefault(group, {}).update(commits)
                if self._txn_groups and group in self._txn_groups:  # newer than its pending transactions' batches
                    self._cached_ends.setdefault(group, {}).update(dict.fromkeys(commits, end))
            else:  # a cluster's commits enter the cache once the ISR has them (replicated_commits)
                for topic, partition in commits:
                    self._awaiting_isr[(group, topic, partition)] = end
            return end
        partition = self.partition_for(group)
        self._pending.setdefault(partition, []).extend(fields)
        cached = self.offsets.setdefault(group, {})
        undo = self._undo.setdefault(partition, [])
        for topic_partition, committed in commits.items():
            undo.append((group, topic_partition, cached.get(topic_partition)))
            cached[topic_partition] = committed
        return None

    def replicated_commits(self, group: str, commits: dict[tuple[str, int], CommittedOffset], end: int,
                           held: bool) -> None:
        """A cluster's commits appended up to `end` are settled: those that `held` (the ISR has them) enter the
        cache, unless a newer commit of the same partition was appended since or its offsets were deleted."""
        cached = None
        for (topic, partition), committed in commits.items():
            key = (group, topic, partition)
            if self._awaiting_isr.get(key) != end:
                continue
            del self._awaiting_isr[key]
            if held:
                cached = self.offsets.setdefault(group, {}) if cached is None else cached
                cached[(topic, partition)] = committed
                if self._txn_groups and group in self._txn_groups:  # newer than its pending transactions' batches
                    self._cached_ends.setdefault(group, {})[(topic, partition)] = end

    def flush_pending(self) -> bool:
        """Append the deferred commits, one batch per partition. False when some could not be
        written since the last call: their cache entries are undone, and the responses that
        acknowledged them must not reach the client (closing the connection makes it retry)."""
        if not self._pending:
            ok, self._lost_pending = not self._lost_pending, False
            return ok
        pending, undo = self._pending, self._undo
        self._pending, self._undo = {}, {}
        now_ms = time.time_ns() // 1_000_000
        ok = not self._lost_pending
        self._lost_pending = False
        for partition, fields in pending.items():
            try:
                for chunk in _chunks(fields, _DEFERRED_BATCH_BYTES):
                    self._append_to(partition, coordinator_batch(chunk, now_ms), now_ms)
            except Exception:
                log.exception("cannot append %d deferred offset commits to %s-%d", len(fields), OFFSETS_TOPIC,
                              partition)
                self._undo_commits(undo[partition])
                ok = False
        return ok

    def _undo_commits(self, undo: list[tuple[str, tuple[str, int], CommittedOffset | None]]) -> None:
        """Put back what (group, partition, previous value) entries say, newest first."""
        for group, topic_partition, previous in reversed(undo):
            cached = self.offsets.get(group)
            if cached is None:
                continue
            if previous is None:
                cached.pop(topic_partition, None)
                if not cached:
                    del self.offsets[group]
            else:
                cached[topic_partition] = previous

    def delete(self, group: str, partitions: list[tuple[str, int]], now_ms: int) -> None:
        """Tombstones for the group's offsets of `partitions`, so compaction drops them too (and commits still
        waiting for the ISR, or pending in a transaction, will not enter the cache)."""
        for topic, partition in partitions:
            self._awaiting_isr.pop((group, topic, partition), None)
        current = self.offsets.get(group, {})
        # Kafka's removeOffsets drops the partitions' pending transactional offsets; Kafka 4 also writes them a
        # tombstone (replay then drops them too), so a transaction committed later leaves them deleted
        pending = self._drop_pending(group, partitions) if group in self._txn_groups else set()
        doomed = [tp for tp in partitions if tp in current or tp in pending]
        if doomed:  # tombstones are appended as Kafka's cleanupGroupMetadata does: with acks=0, no ISR check
            self._append(group, [(self._key_field(group, t, p), length_prefixed(None)) for t, p in doomed], now_ms,
                         check_isr=False)
            for tp in doomed:
                current.pop(tp, None)
        if not current:
            self.offsets.pop(group, None)

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.offsets.get(group, {}).get((topic, partition))

    def group_offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.get(group, {})

    # --- transactional commits (TxnOffsetCommit) ---------------------------------------------

    def commit_transactional(self, group: str, producer_id: int, producer_epoch: int,
                             commits: dict[tuple[str, int], CommittedOffset], now_ms: int) -> int:
        """Append a TxnOffsetCommit's offsets as one transactional batch of the producer to the group's
        partition (at once, after any deferred commits) and hold them pending until the transaction ends;
        the offset after the batch, which the high watermark must pass in a cluster."""
        batch = transactional_batch([(encode_key(group, topic, partition), encode_value(committed))
                                     for (topic, partition), committed in commits.items()],
                                    now_ms, producer_id, producer_epoch)
        if self._pending and not self.flush_pending():
            self._lost_pending = True  # flush_pending tells the network layer when it asks
        end = self._append_to(self.partition_for(group), batch, now_ms)
        self._add_pending(producer_id, group, commits, end)
        return end

    def abandon_transactional(self, group: str, producer_id: int, partitions: Iterable[tuple[str, int]],
                              end: int) -> None:
        """The batch appended up to `end` did not reach the ISR: its offsets are no longer pending (Kafka's
        failPendingTxnOffsetCommit; the client retries), unless a later batch replaced them."""
        self._drop_pending(group, partitions, producer_id, end)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT or ABORT marker is in `__consumer_offsets`-`partition`: the producer's pending
        offsets of the groups there become their committed offsets, each unless a commit appended after its
        batch holds the partition (Kafka's completePendingTxnOffsetCommit), or are dropped."""
        by_group = self._txn_offsets.get(producer_id)
        if not by_group:
            return
        for group in [group for group in by_group if self.partition_for(group) == partition]:
            if commit:
                self._commit_pending(group, by_group[group])
            self._close_pending(producer_id, group)

    def unstable(self, group: str, topic: str, partition: int) -> bool:
        """Whether a commit of the partition is still in flight: pending in a transaction or, in a cluster,
        waiting for the ISR (Kafka's hasPendingOffsetCommitsForTopicPartition, which require_stable asks)."""
        if (group, topic, partition) in self._awaiting_isr:
            return True
        producers = self._txn_groups.get(group)
        return producers is not None and any((topic, partition) in self._txn_offsets[producer_id][group]
                                             for producer_id in producers)

    def has_unstable(self) -> bool:
        """Whether any commit is in flight at all (if not, `unstable` is False for every partition)."""
        return bool(self._txn_groups or self._awaiting_isr)

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """The partitions the group has pending transactional offsets for."""
        return {topic_partition for producer_id in self._txn_groups.get(group, ())
                for topic_partition in self._txn_offsets[producer_id][group]}

    def has_pending_transactions(self, group: str) -> bool:
        """Whether an open transaction holds offsets of the group (Kafka keeps such a group, and its offsets)."""
        return group in self._txn_groups

    def groups_with_pending_transactions(self) -> Iterable[str]:
        """The groups open transactions hold offsets of (they are the coordinator's even without other state)."""
        return self._txn_groups.keys()

    def _add_pending(self, producer_id: int, group: str, commits: dict[tuple[str, int], CommittedOffset],
                     end: int) -> None:
        pending = self._txn_offsets.setdefault(producer_id, {}).setdefault(group, {})
        for topic_partition, committed in commits.items():
            pending[topic_partition] = (committed, end)
        self._txn_groups.setdefault(group, set()).add(producer_id)

    def _drop_pending(self, group: str, partitions: Iterable[tuple[str, int]], producer_id: int | None = None,
                      end: int | None = None) -> set[tuple[str, int]]:
        """Withdraw pending offsets of the group's `partitions`: one producer's or every producer's, with `end`
        only those of the batch ending there. The partitions that had some."""
        dropped: set[tuple[str, int]] = set()
        producers = self._txn_groups.get(group)
        if not producers:
            return dropped
        partitions = list(partitions)
        for pid in [producer_id] if producer_id is not None else list(producers):
            pending = self._txn_offsets.get(pid, {}).get(group)
            if pending is None:
                continue
            for topic_partition in partitions:
                entry = pending.get(topic_partition)
                if entry is not None and (end is None or entry[1] == end):
                    del pending[topic_partition]
                    dropped.add(topic_partition)
            if not pending:
                self._close_pending(pid, group)
        return dropped

    def _close_pending(self, producer_id: int, group: str) -> None:
        """The producer holds no more pending offsets of the group; with nothing pending left, neither do the
        group's batch ends matter any longer (a later transaction's batch comes after every cached commit)."""
        by_group = self._txn_offsets.get(producer_id)
        if by_group is not None:
            by_group.pop(group, None)
            if not by_group:
                del self._txn_offsets[producer_id]
        producers = self._txn_groups.get(group)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._txn_groups[group]
                self._cached_ends.pop(group, None)

    def _commit_pending(self, group: str, pending: dict[tuple[str, int], tuple[CommittedOffset, int]]) -> None:
        """A committed transaction's offsets of the group enter the cache, each unless the cached commit of its
        partition was appended after its batch."""
        ends = self._cached_ends.get(group)
        others_open = len(self._txn_groups.get(group, ())) > 1
        cached = self.offsets.setdefault(group, {})
        for (topic, partition), (committed, end) in pending.items():
            if ends is not None and ends.get((topic, partition), -1) > end:
                continue
            waiting = self._awaiting_isr.get((group, topic, partition))
            if waiting is not None and waiting < end:  # an older commit still waiting for the ISR stays out
                del self._awaiting_isr[(group, topic, partition)]
            cached[(topic, partition)] = committed
            if others_open:
                self._cached_ends.setdefault(group, {})[(topic, partition)] = end
        if not cached:
            del self.offsets[group]
