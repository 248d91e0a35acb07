"""What `kbroker dump-log` prints: Kafka's DumpLogSegments (kafka-dump-log.sh) over the same files, line for line.

Pure: files in, lines out. Each file becomes a FileDump whose `items` are Kafka's own fields by Kafka's names
(what --json prints) and whose `lines` are those items as the tool prints them (Java's formatting: true/false,
OptionalLong.empty, unsigned CRCs). Problems the tool reports at the end on stderr (index entries pointing at
the wrong batch, time index trouble, non-consecutive offsets) collect in a Problems, printed in the order
Java's HashMap iterates them, since that is what Kafka 4's tool does.

    problems = Problems()
    for line in dump_file("00000000000000000000.log", DumpOptions(deep_iteration=True), problems).lines:
        print(line)
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker.log.errors import CorruptIndexError, CorruptSnapshotError, LogError
from kbroker.log.offset_index import OffsetIndex
from kbroker.log.producer_state import decode_snapshot, increment_sequence
from kbroker.log.time_index import TimeIndex
from kbroker.log.transaction_index import TransactionIndex
from wire import messages
from wire.exceptions import CorruptRecordError, DecodeError, RecordLayoutError
from wire.json_converter import render, to_json_tree
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    Record,
    decode_batch,
    iter_batches,
    parse_control_key,
    parse_end_txn_value,
    validate_batch,
)

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_MESSAGE_SIZE", "OFFSETS", "STRING", "TRANSACTION_LOG", "DumpOptions",
           "FileDump", "Problems", "dump_file", "dump_files", "java_hash_order"]

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
DEFAULT_MAX_BYTES = 2**31 - 1  # Kafka's --max-bytes default (Integer.MAX_VALUE)
RECORD_INDENT = "|"
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
NO_TIMESTAMP = -1
STRING = "string"
OFFSETS = "offsets"
TRANSACTION_LOG = "transaction-log"
_VERSION = struct.Struct(">h")
# __consumer_offsets: the key's int16 prefix (its record type) -> (key spec, value spec), as Kafka's
# GroupCoordinatorRecordSerde reads them
_GROUP_RECORD_TYPES = {
    0: ("OffsetCommitKey", "OffsetCommitValue"),
    1: ("OffsetCommitKey", "OffsetCommitValue"),
    2: ("GroupMetadataKey", "GroupMetadataValue"),
    3: ("ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue"),
    4: ("ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue"),
    5: ("ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue"),
    6: ("ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMetadataValue"),
    7: ("ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue"),
    8: ("ConsumerGroupCurrentMemberAssignmentKey", "ConsumerGroupCurrentMemberAssignmentValue"),
}
# Kafka's TransactionState names by the id TransactionLogValue stores
_TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                       "Dead", "PrepareEpochFence")
_CONSUMER_PROTOCOL = "consumer"


@dataclass(frozen=True)
class DumpOptions:
    """Kafka's flags, with Kafka's defaults and implications (a decoder prints data, printing iterates deep)."""

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    decoder: str = STRING
    skip_record_metadata: bool = False

    @property
    def prints_data(self) -> bool:
        return self.print_data_log or self.decoder != STRING

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.prints_data


@dataclass
class FileDump:
    """One file's dump: its kind, Kafka's fields per batch/entry (`items`) and the tool's lines."""

    path: str
    kind: str
    items: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    error: str | None = None  # why the dump stopped where Kafka's tool dies (its lines so far are kept)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "kind": self.kind, "items": self.items, "error": self.error}


@dataclass
class Problems:
    """What the tool prints on stderr after every file, by file (absolute path), in Kafka's order."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # a file the tool could not read at all

    def lines(self) -> list[str]:
        out = list(self.errors)
        for name, pairs in _in_java_order(self.index_mismatches):
            out.append(f"Mismatches in :{name}")
            out += [f"  Index offset: {index}, log offset: {log}" for index, log in reversed(pairs)]  # newest first
        for name, pairs in _in_java_order(self.time_mismatches):
            out.append(f"Found timestamp mismatch in :{name}")
            out += [f"  Index timestamp: {index}, log timestamp: {log}" for index, log in pairs]
        for name, pairs in _in_java_order(self.time_out_of_order):
            out.append(f"Found out of order timestamp in :{name}")
            out += [f"  Index timestamp: {index}, Previously indexed timestamp: {previous}"
                    for index, previous in pairs]
        for name, pairs in _in_java_order(self.time_offsets_not_found):
            out.append(f"The following indexed offsets are not found in :{name}")
            out += [f"Indexed offset: {index}, found log offset: {log}" for index, log in pairs]
        for name, pairs in _in_java_order(self.non_consecutive):
            out.append(f"Non-consecutive offsets in {name}")
            out += [f"  {first} is followed by {second}" for first, second in pairs]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"indexMismatches": self.index_mismatches, "timestampMismatches": self.time_mismatches,
                "outOfOrderTimestamps": self.time_out_of_order, "indexedOffsetsNotFound": self.time_offsets_not_found,
                "nonConsecutiveOffsets": self.non_consecutive, "errors": self.errors}


def _in_java_order(by_name: dict[str, list[tuple[int, int]]]) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(name, by_name[name]) for name in java_hash_order(list(by_name))]


def java_hash_order(keys: Sequence[str]) -> list[str]:
    """`keys` (inserted in this order) as a java.util.HashMap iterates them: by bucket of the spread String
    hash in a table doubled from 16 while over 3/4 full, insertion order within a bucket."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    ranked = sorted(enumerate(keys), key=lambda pair: (_spread(_java_string_hash(pair[1])) & (capacity - 1), pair[0]))
    return [key for _, key in ranked]


def _java_string_hash(text: str) -> int:
    """String.hashCode over UTF-16 code units, as an unsigned 32-bit value."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (value * 31 + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value


def _spread(value: int) -> int:
    return value ^ (value >> 16)


# --- Java's text ------------------------------------------------------------------------------------


def java_text(value: Any) -> str:
    """A value as Java's string concatenation prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def java_utf8(raw: bytes) -> str:
    """Kafka's StringDecoder: new String(bytes, UTF-8), malformed input as U+FFFD."""
    return raw.decode("utf-8", errors="replace")


# --- dispatch ---------------------------------------------------------------------------------------


def dump_file(path: str, options: DumpOptions, problems: Problems) -> FileDump:
    """One file as the tool dumps it, chosen by its suffix (after the last dot) as Kafka chooses."""
    name = Path(path).name
    suffix = name[name.rfind("."):] if "." in name else ""
    dumper = _DUMPERS.get(suffix)
    if dumper is None:
        problems.errors.append(f"Ignoring unknown file {path}")
        return FileDump(path, "unknown", lines=[f"Dumping {path}"])
    dump = FileDump(path, suffix.lstrip("."), lines=[f"Dumping {path}"])
    try:
        dumper(Path(path), options, problems, dump)
    except (OSError, LogError, ValueError) as error:  # ValueError: wire's DecodeError, a batch past reading
        dump.error = f"{type(error).__name__}: {error}"
    return dump


def _base_offset(path: Path) -> int:
    return int(path.name.split(".")[0])


def _sibling(path: Path, suffix: str) -> Path:
    return path.absolute().parent / (path.name.split(".")[0] + suffix)


def _existing(path: Path) -> Path:
    """`path`, which must be there: the tool opens an index's .log before the index, and the index readers
    would create a missing index file, which a dump must not."""
    if not path.exists():
        raise FileNotFoundError(f"NoSuchFileException: {path}")
    return path


def _read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes (the first `limit`), without a descriptor left open."""
    if not path.exists():
        return b""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return b""
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return bytes(mapped[:limit] if limit is not None else mapped)


# --- .log ----------------------------------------------------------------------------------------


def _dump_log(path: Path, options: DumpOptions, problems: Problems, dump: FileDump) -> None:
    dump.lines.append(f"Log starting offset: {_base_offset(path)}")
    size = path.stat().st_size
    buf = _read_bytes(path, min(size, options.max_bytes))
    batches = iter_batches(buf)
    last_offset = -1
    parse = _parser(options.decoder)
    for position, header in batches:
        batch = _batch_fields(buf, position, header)
        dump.lines.append(_batch_line(batch))
        if options.deep:
            batch["records"] = []
            for record in decode_batch(buf, position)[1]:
                if record.offset != last_offset + 1:
                    problems.non_consecutive.setdefault(str(path.absolute()), []).append((last_offset, record.offset))
                last_offset = record.offset
                fields = _record_fields(header, record, options, parse)
                batch["records"].append(fields)
                dump.lines.append(_record_line(fields, options))
        dump.items.append(batch)
    trailing = size - batches.valid_end
    if trailing > 0 and options.max_bytes == DEFAULT_MAX_BYTES:
        dump.lines.append(f"Found {trailing} invalid bytes at the end of {path.name}")


def _batch_fields(buf: bytes, position: int, header: BatchHeader) -> dict[str, Any]:
    """DumpLogSegments' batch-level fields, in its order."""
    return {
        "baseOffset": header.base_offset, "lastOffset": header.last_offset, "count": header.record_count,
        "baseSequence": header.base_sequence, "lastSequence": _sequence(header, header.last_offset_delta),
        "producerId": header.producer_id, "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch, "isTransactional": header.is_transactional,
        "isControl": header.is_control,
        "deleteHorizonMs": header.base_timestamp if header.has_delete_horizon else None,
        "position": position, "timestampType": TIMESTAMP_TYPES[header.timestamp_type],
        "maxTimestamp": header.max_timestamp, "size": header.size, "magic": header.magic,
        "compresscodec": CODEC_NAMES[header.codec] if header.codec < len(CODEC_NAMES) else str(header.codec),
        "crc": header.crc, "isvalid": _is_valid(buf, position),
    }


def _sequence(header: BatchHeader, offset_delta: int) -> int:
    """Kafka's sequence of the record `offset_delta` into the batch; -1 for a batch without sequences."""
    return -1 if header.base_sequence == -1 else increment_sequence(header.base_sequence, offset_delta)


def _is_valid(buf: bytes, position: int) -> bool:
    """Kafka's isValid: the stored CRC-32C is that of the batch (a record count that cannot fit is not a CRC
    failure)."""
    try:
        validate_batch(buf, position)
    except RecordLayoutError:
        return True
    except CorruptRecordError:
        return False
    return True


def _batch_line(batch: dict[str, Any]) -> str:
    head = " ".join(f"{name}: {java_text(batch[name])}" for name in (
        "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId", "producerEpoch",
        "partitionLeaderEpoch", "isTransactional", "isControl"))
    tail = " ".join(f"{name}: {java_text(batch[name])}" for name in (
        "size", "magic", "compresscodec", "crc", "isvalid"))
    return (f"{head} deleteHorizonMs: {optional_long(batch['deleteHorizonMs'])} position: {batch['position']} "
            f"{batch['timestampType']}: {batch['maxTimestamp']} {tail}")


def _record_fields(header: BatchHeader, record: Record, options: DumpOptions,
                   parse: Callable[[Record], tuple[str | None, str | None]]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "offset": record.offset, "timestampType": TIMESTAMP_TYPES[header.timestamp_type],
        "timestamp": record.timestamp, "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": _sequence(header, record.offset - header.base_offset),
        "headerKeys": [key for key, _ in record.headers],
    }
    if header.is_control:
        fields["control"] = _control_text(record)
    elif options.prints_data:
        fields["key"], fields["payload"] = parse(record)
    return fields


def _control_text(record: Record) -> str:
    """What the tool adds after a control record's metadata: the marker, or the control type's id."""
    control_type = parse_control_key(record.key)
    if control_type in (CONTROL_ABORT, CONTROL_COMMIT):
        marker = "ABORT" if control_type == CONTROL_ABORT else "COMMIT"
        return f"endTxnMarker: {marker} coordinatorEpoch: {parse_end_txn_value(record.value)}"
    return f"controlType: UNKNOWN({control_type})"


def _record_line(fields: dict[str, Any], options: DumpOptions) -> str:
    parts = []
    if not options.skip_record_metadata:
        parts.append(f"offset: {fields['offset']} {fields['timestampType']}: {fields['timestamp']} "
                     f"keySize: {fields['keySize']} valueSize: {fields['valueSize']} "
                     f"sequence: {fields['sequence']} headerKeys: [{','.join(fields['headerKeys'])}]")
        if "control" in fields:
            parts.append(fields["control"])
    if fields.get("key") is not None:
        parts.append(f"key: {fields['key']}")
    if fields.get("payload") is not None:
        parts.append(f"payload: {fields['payload']}")
    return f"{RECORD_INDENT} {' '.join(parts)}" if parts else ""


# --- decoders ----------------------------------------------------------------------------------


def _parser(decoder: str) -> Callable[[Record], tuple[str | None, str | None]]:
    return {OFFSETS: _parse_group_record, TRANSACTION_LOG: _parse_transaction_record}.get(decoder, _parse_strings)


def _parse_strings(record: Record) -> tuple[str | None, str | None]:
    return (None if record.key is None else java_utf8(record.key),
            None if record.value is None else java_utf8(record.value))


def _parse_group_record(record: Record) -> tuple[str | None, str | None]:
    """--offsets-decoder: the key as {"type":..,"data":..} and the value as {"version":..,"data":..} in the
    JSON of Kafka's converters, "<DELETE>" for a tombstone."""
    if record.key is None:
        raise ValueError(f"Failed to decode message at offset {record.offset} using offset topic decoder "
                         "(message had a missing key)")
    try:
        (record_type,) = _VERSION.unpack_from(record.key)
        if record_type not in _GROUP_RECORD_TYPES:
            return f"Unknown record type {record_type} at offset {record.offset}, skipping.", None
        key_spec, value_spec = _GROUP_RECORD_TYPES[record_type]
        key = _versioned_json("type", key_spec, record.key)
        if record.value is None:
            return key, "<DELETE>"
        tree, version = _decoded_tree(value_spec, record.value)
        if value_spec == "GroupMetadataValue":
            _decode_consumer_protocol(tree)
        return key, render({"version": str(version), "data": tree})
    except (DecodeError, struct.error) as error:
        return f"Error at offset {record.offset}, skipping. {error}", None


def _parse_transaction_record(record: Record) -> tuple[str | None, str | None]:
    """--transaction-log-decoder: as Kafka 4's tool, the converters' JSON with the state by its name."""
    if record.key is None:
        raise ValueError(f"Failed to decode message at offset {record.offset} (message had a missing key)")
    try:
        key = _versioned_json("type", "TransactionLogKey", record.key)
        if record.value is None:
            return key, "<DELETE>"
        tree, version = _decoded_tree("TransactionLogValue", record.value)
        status = tree.get("transactionStatus")
        if isinstance(status, int) and 0 <= status < len(_TRANSACTION_STATES):
            tree["transactionStatus"] = _TRANSACTION_STATES[status]
        return key, render({"version": str(version), "data": tree})
    except (DecodeError, struct.error, messages.UnsupportedVersion) as error:
        return f"Error at offset {record.offset}, skipping. {error}", None


def _decoded_tree(spec_name: str, raw: bytes) -> tuple[dict[str, Any], int]:
    (version,) = _VERSION.unpack_from(raw)
    message, _ = messages.decode(spec_name, version, raw, _VERSION.size)
    return to_json_tree(message, version), version


def _versioned_json(label: str, spec_name: str, raw: bytes) -> str:
    tree, version = _decoded_tree(spec_name, raw)
    return render({label: str(version), "data": tree})


def _decode_consumer_protocol(tree: dict[str, Any]) -> None:
    """As Kafka's tool: a consumer group's member subscription and assignment bytes shown decoded (left as
    bytes when they do not parse)."""
    if tree.get("protocolType") != _CONSUMER_PROTOCOL:
        return
    for member in tree.get("members") or ():
        for name, spec_name in (("subscription", "ConsumerProtocolSubscription"),
                                ("assignment", "ConsumerProtocolAssignment")):
            raw = member.get(name)
            if not isinstance(raw, bytes | bytearray):
                continue
            with contextlib.suppress(DecodeError, struct.error, messages.UnsupportedVersion):
                member[name] = _decoded_tree(spec_name, bytes(raw))[0]


# --- .index and .timeindex ------------------------------------------------------------------------
# Kafka's tool opens an index read-only, so every slot of the file counts as an entry, the zero slots a broker
# preallocates included (it stops at the first slot naming the base offset again); kbroker's readers, made for
# the broker, leave those slots out. So the slots are read here, in the readers' own entry layout.


def _offset_slots(path: Path, base: int) -> list[tuple[int, int]]:
    """(offset, position) of every slot of an offset index file."""
    return [(base + relative, position) for relative, position in _slots(path, OffsetIndex.ENTRY)]


def _time_slots(path: Path, base: int) -> list[tuple[int, int]]:
    """(timestamp, offset) of every slot of a time index file."""
    return [(timestamp, base + relative) for timestamp, relative in _slots(path, TimeIndex.ENTRY)]


def _slots(path: Path, entry: struct.Struct) -> list[tuple[int, ...]]:
    data = _read_bytes(path)
    return list(entry.iter_unpack(data[:len(data) - len(data) % entry.size]))


def _dump_offset_index(path: Path, options: DumpOptions, problems: Problems, dump: FileDump) -> None:
    base = _base_offset(path)
    log_path = _existing(_sibling(path, ".log"))
    slots = _offset_slots(_existing(path), base)
    if not slots:
        dump.lines.append(f"{path} is empty.")
        return
    if options.index_sanity_check:
        _check_offset_index(path, base, slots)
        dump.lines.append(f"{path} passed sanity check.")
        return
    log = _read_bytes(log_path)
    for slot, (offset, position) in enumerate(slots):
        if offset == base and slot > 0:
            return  # a preallocated zero slot: the tool stops there
        first_last = _first_batch_last_offset(log, position, options.max_message_size)
        if first_last != offset:
            problems.index_mismatches.setdefault(str(path.absolute()), []).append((offset, first_last))
        dump.items.append({"offset": offset, "position": position})
        if not options.verify_index_only:
            dump.lines.append(f"offset: {offset} position: {position}")


def _check_offset_index(path: Path, base: int, slots: list[tuple[int, int]]) -> None:
    """Kafka's OffsetIndex.sanityCheck, in its words."""
    _check_whole_entries(path, OffsetIndex.ENTRY.size)
    if slots[-1][0] < base:
        raise CorruptIndexError(f"Corrupt index found, index file ({path.absolute()}) has non-zero size but the "
                                f"last offset is {slots[-1][0]} which is less than the base offset {base}.")


def _check_time_index(path: Path, base: int, slots: list[tuple[int, int]]) -> None:
    """Kafka's TimeIndex.sanityCheck, in its words."""
    _check_whole_entries(path, TimeIndex.ENTRY.size)
    if not slots:
        return
    (first_timestamp, _), (last_timestamp, last_offset) = slots[0], slots[-1]
    prefix = f"Corrupt time index found, time index file ({path.absolute()}) has non-zero size but the last"
    if last_timestamp < first_timestamp:
        raise CorruptIndexError(f"{prefix} timestamp is {last_timestamp} which is less than the first timestamp "
                                f"{first_timestamp}")
    if last_offset < base:
        raise CorruptIndexError(f"{prefix} offset is {last_offset} which is less than the first offset {base}")


def _check_whole_entries(path: Path, entry_size: int) -> None:
    size = path.stat().st_size
    if size % entry_size:
        raise CorruptIndexError(f"Index file {path.name} is corrupt, found {size} bytes which is neither positive "
                                f"nor a multiple of {entry_size}.")


def _first_batch_last_offset(log: bytes, position: int, max_size: int) -> int:
    window = log[position:position + max_size]
    for _, header in iter_batches(window):
        return header.last_offset
    return -1


def _dump_time_index(path: Path, options: DumpOptions, problems: Problems, dump: FileDump) -> None:
    base = _base_offset(path)
    log_path = _existing(_sibling(path, ".log"))
    slots = _time_slots(_existing(path), base)
    index_path = _sibling(path, ".index")
    offsets = _offset_slots(index_path, base) if index_path.exists() else []
    if options.index_sanity_check:
        _check_time_index(path, base, slots)
        dump.lines.append(f"{path} passed sanity check.")
        return
    log = _read_bytes(log_path)
    previous = NO_TIMESTAMP
    name = str(path.absolute())
    for slot, (timestamp, offset) in enumerate(slots):
        if offset == base and slot > 0:
            return
        _check_time_entry(log, _lookup_position(offsets, offset), timestamp, offset, previous, name, problems)
        dump.items.append({"timestamp": timestamp, "offset": offset})
        if not options.verify_index_only:
            dump.lines.append(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp


def _lookup_position(slots: list[tuple[int, int]], target: int) -> int:
    """Kafka's OffsetIndex.lookup over every slot: the position of the greatest offset <= target (binary
    search as Kafka runs it, zero slots and all), or 0."""
    if not slots or slots[0][0] > target:
        return 0
    low, high = 0, len(slots) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if slots[middle][0] > target:
            high = middle - 1
        elif slots[middle][0] < target:
            low = middle
        else:
            return slots[middle][1]
    return slots[low][1]


def _check_time_entry(log: bytes, start: int, timestamp: int, offset: int, previous: int, name: str,
                      problems: Problems) -> None:
    """The tool's checks of one time index entry: it names the last offset of a batch whose largest record
    timestamp it is, and timestamps grow."""
    found = next(((position, header) for position, header in iter_batches(log, start)
                  if header.last_offset >= offset), None)
    if found is None:
        problems.time_offsets_not_found.setdefault(name, []).append((offset, -1))
        return
    position, header = found
    if header.last_offset != offset:
        problems.time_offsets_not_found.setdefault(name, []).append((offset, header.last_offset))
        return
    records = decode_batch(log, position)[1]
    largest = max((record.timestamp for record in records), default=NO_TIMESTAMP)
    if largest != timestamp:
        problems.time_mismatches.setdefault(name, []).append((timestamp, largest))
    if previous >= timestamp:
        problems.time_out_of_order.setdefault(name, []).append((timestamp, previous))


# --- .snapshot and .txnindex -------------------------------------------------------------------


def _dump_producer_snapshot(path: Path, options: DumpOptions, problems: Problems, dump: FileDump) -> None:
    try:
        entries = decode_snapshot(_read_bytes(path))
    except CorruptSnapshotError as error:
        problems.errors.append(str(error))
        return
    for entry in entries:
        fields: dict[str, Any] = {
            "producerId": entry.producer_id, "producerEpoch": entry.producer_epoch,
            "coordinatorEpoch": entry.coordinator_epoch,
            "currentTxnFirstOffset": None if entry.current_txn_first_offset < 0 else entry.current_txn_first_offset,
            "lastTimestamp": entry.last_timestamp}
        line = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
                f"coordinatorEpoch: {entry.coordinator_epoch} "
                f"currentTxnFirstOffset: {optional_long(fields['currentTxnFirstOffset'])} "
                f"lastTimestamp: {entry.last_timestamp} ")
        if entry.batches:
            batch = entry.batches[0]
            fields.update(firstSequence=batch.first_seq, lastSequence=batch.last_seq, lastOffset=batch.last_offset,
                          offsetDelta=batch.offset_delta, timestamp=batch.timestamp)
            line += (f"firstSequence: {batch.first_seq} lastSequence: {batch.last_seq} lastOffset: {batch.last_offset} "
                     f"offsetDelta: {batch.offset_delta} timestamp: {batch.timestamp}")
        dump.items.append(fields)
        dump.lines.append(line)


def _dump_txn_index(path: Path, options: DumpOptions, problems: Problems, dump: FileDump) -> None:
    index = TransactionIndex(path, _base_offset(path))
    for aborted in index.all_aborted_txns():
        fields = {"version": 0, "producerId": aborted.producer_id, "firstOffset": aborted.first_offset,
                  "lastOffset": aborted.last_offset, "lastStableOffset": aborted.last_stable_offset}
        dump.items.append(fields)
        dump.lines.append(" ".join(f"{name}: {value}" for name, value in fields.items()))


_DUMPERS: dict[str, Callable[[Path, DumpOptions, Problems, FileDump], None]] = {
    ".log": _dump_log,
    ".index": _dump_offset_index,
    ".timeindex": _dump_time_index,
    ".snapshot": _dump_producer_snapshot,
    ".txnindex": _dump_txn_index,
}


def dump_files(paths: Sequence[str], options: DumpOptions) -> tuple[Iterator[FileDump], Problems]:
    """Every file in order (lazily: a file is read when its dump is asked for) and the problems they raise."""
    problems = Problems()
    return (dump_file(path, options, problems) for path in paths), problems

