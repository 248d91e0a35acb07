"""Kafka's RecordBatch, message format v2 (magic 2): the bytes of produce, fetch and `.log`.

Batch layout (61-byte header, then the records section, compressed as a whole if the
codec bits say so)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
    crc uint32 (CRC-32C of attributes..end) | attributes int16 | lastOffsetDelta int32
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    baseSequence int32 | recordCount int32 | records...

The broker mostly handles batches without decoding records: `read_batch_header` and
`iter_batches` read headers with one `struct.unpack_from`, `validate_batch` checks
structure and CRC, and `patch_*` rewrite the two fields outside the CRC in place.
Malformed input raises DecodeError (CorruptRecordError for failed checks), never
IndexError or struct.error, and no allocation is sized by an unchecked length field.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import crc32c

from wire.compression import DEFAULT_MAX_OUTPUT, compress, decompress
from wire.exceptions import CorruptRecordError, DecodeError, EncodeError, RecordLayoutError
from wire.varint import encode_varint, read_uvarint, read_varint, read_varlong

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "BatchIterator",
    "Record",
    "build_batch",
    "build_batch_like",
    "build_end_txn_batch",
    "check_record_layout",
    "decode_batch",
    "decode_records_section",
    "encode_records_section",
    "iter_batches",
    "iter_records",
    "parse_control_key",
    "parse_end_txn_value",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "peek_magic",
    "read_batch_header",
    "records_section",
    "restamped_header",
    "set_max_timestamp",
    "validate_batch",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

_LEADER_EPOCH_OFFSET = 12
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
# length varint + attributes + timestampDelta + offsetDelta + keyLen + valueLen + headerCount,
# each at least one byte: a cheap upper bound on how many records some bytes can hold.
_MIN_RECORD_SIZE = 7

_CODEC_MASK = 0x07
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40
_MAX_CODEC = 4

CREATE_TIME = 0
LOG_APPEND_TIME = 1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_Buffer = bytes | bytearray | memoryview


class BatchHeader(NamedTuple):
    """The 61-byte batch header, field for field; properties decode the attributes."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def codec(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & _ATTR_LOG_APPEND_TIME else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


# BatchHeader from a tuple of its fields, built in C: no Python-level frame as `_make` has
_new_header = functools.partial(tuple.__new__, BatchHeader)


class Record(NamedTuple):
    """One record as a consumer sees it: absolute offset, effective timestamp.

    For LogAppendTime batches `timestamp` is the batch's maxTimestamp (as in Kafka), so
    the per-record timestamp deltas stored in such a batch are not recoverable from it.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()


# --- reading headers ----------------------------------------------------------------------


def peek_magic(buf: _Buffer, pos: int = 0) -> int:
    """The magic byte of the batch or legacy message at `pos` (same place in all formats)."""
    if pos < 0 or len(buf) - pos <= _MAGIC_OFFSET:
        raise DecodeError("truncated: no magic byte")
    return buf[pos + _MAGIC_OFFSET]


def read_batch_header(buf: _Buffer, pos: int = 0) -> BatchHeader:
    """Header of the magic-2 batch at `pos`, without touching its records."""
    magic = peek_magic(buf, pos)
    if magic != 2:
        raise CorruptRecordError(f"unsupported batch magic {magic} at position {pos}")
    if len(buf) - pos < HEADER_SIZE:
        raise DecodeError(f"truncated record batch header at position {pos}")
    return _new_header(_HEADER.unpack_from(buf, pos))


class BatchIterator:
    """Walks a concatenation of batches, yielding `(position, header)`.

    Stops without error at a truncated tail (a torn `.log` write, or the partial batch a
    fetch response may end with). Afterwards `valid_end` is the position just past the
    last complete batch yielded and `truncated` says whether bytes followed it. A batch
    whose length or magic is impossible raises CorruptRecordError: there is no way to
    find the next batch after it, and the caller decides (e.g. truncate at `valid_end`).
    Headers are not CRC-checked here; call `validate_batch` for that.
    """

    __slots__ = ("_buf", "_start", "truncated", "valid_end")

    def __init__(self, buf: _Buffer, start: int = 0) -> None:
        self._buf = buf
        self._start = start
        self.valid_end = start
        self.truncated = False

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        buf = self._buf
        end = len(buf)
        pos = self._start
        while True:
            remaining = end - pos
            if remaining <= _MAGIC_OFFSET:
                self.truncated = remaining > 0
                return
            (length,) = struct.unpack_from(">i", buf, pos + 8)
            magic = buf[pos + _MAGIC_OFFSET]
            if magic != 2:
                raise CorruptRecordError(f"unsupported batch magic {magic} at position {pos}")
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"batch length {length} at position {pos} is below the minimum {MIN_BATCH_LENGTH}"
                )
            if length + LOG_OVERHEAD > remaining:
                self.truncated = True
                return
            header = _new_header(_HEADER.unpack_from(buf, pos))
            pos += length + LOG_OVERHEAD
            self.valid_end = pos
            yield pos - length - LOG_OVERHEAD, header


def iter_batches(buf: _Buffer, start: int = 0) -> BatchIterator:
    """Iterate the batches in `buf`; see BatchIterator for `valid_end` / `truncated`."""
    return BatchIterator(buf, start)


def validate_batch(buf: _Buffer, pos: int = 0) -> BatchHeader:
    """Structural checks and CRC-32C of the batch at `pos`; no decompression.

    Raises CorruptRecordError naming the first check that failed (RecordLayoutError when the
    CRC holds but the record count cannot fit in the batch).
    """
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated record batch at position {pos}")
    header = _new_header(_HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise CorruptRecordError(f"unsupported batch magic {header.magic}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}"
        )
    if header.batch_length > len(buf) - pos - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} runs past the end of the buffer")
    codec = header.attributes & _CODEC_MASK  # not the property: this runs for every produced batch
    if codec > _MAX_CODEC:
        raise CorruptRecordError(f"unknown compression codec id {codec}")
    if header.record_count < 0:
        raise CorruptRecordError(f"negative record count {header.record_count}")
    crc_end = pos + LOG_OVERHEAD + header.batch_length
    actual = crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET : crc_end])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    body = header.batch_length - MIN_BATCH_LENGTH
    if codec == 0 and header.record_count * _MIN_RECORD_SIZE > body:  # after the CRC, as Kafka checks them
        raise RecordLayoutError(f"record count {header.record_count} cannot fit in {body} bytes of records")
    return header


# --- in-place edits -----------------------------------------------------------------------


def _check_patchable(buf: bytearray | memoryview, pos: int, need: int) -> None:
    if pos < 0 or len(buf) - pos < need:
        raise DecodeError(f"truncated record batch at position {pos}")
    if buf[pos + _MAGIC_OFFSET] != 2:
        raise CorruptRecordError(f"unsupported batch magic {buf[pos + _MAGIC_OFFSET]}")


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's offsets in place; baseOffset is outside the CRC, so no re-CRC."""
    _check_patchable(buf, pos, HEADER_SIZE)
    if not _INT64_MIN <= base_offset <= _INT64_MAX:
        raise EncodeError(f"base offset {base_offset} is not an int64")
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch in place; it is outside the CRC, so no re-CRC."""
    _check_patchable(buf, pos, HEADER_SIZE)
    if not _INT32_MIN <= epoch <= _INT32_MAX:
        raise EncodeError(f"leader epoch {epoch} is not an int32")
    _LEADER_EPOCH.pack_into(buf, pos + _LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_type: int, max_timestamp: int) -> None:
    """Set timestamp type and maxTimestamp in place and re-CRC (LogAppendTime topics).

    Both fields are inside the CRC, unlike the `patch_*` ones; records are untouched, as
    Kafka does for uncompressed batches.
    """
    header = validate_batch(buf, pos)
    attributes = _stamped_attributes(header.attributes, timestamp_type, max_timestamp)
    _ATTRIBUTES.pack_into(buf, pos + _ATTRIBUTES_OFFSET, attributes)
    _MAX_TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET : pos + header.size])
    _CRC.pack_into(buf, pos + _CRC_OFFSET, crc)


def _stamped_attributes(attributes: int, timestamp_type: int, max_timestamp: int) -> int:
    """`attributes` with `timestamp_type` in them, once both values are checked."""
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise EncodeError(f"unknown timestamp type {timestamp_type}")
    if not _INT64_MIN <= max_timestamp <= _INT64_MAX:
        raise EncodeError(f"timestamp {max_timestamp} is not an int64")
    attributes &= ~_ATTR_LOG_APPEND_TIME
    return attributes | _ATTR_LOG_APPEND_TIME if timestamp_type == LOG_APPEND_TIME else attributes



def restamped_header(
    buf: _Buffer,
    pos: int,
    header: BatchHeader,
    base_offset: int,
    leader_epoch: int | None,
    max_timestamp: int,
    timestamp_type: int,
) -> bytearray:
    """A copy of the batch's 61-byte header with offsets, leader epoch, timestamp type and
    maxTimestamp set, to be written ahead of the batch's untouched records.

    The produce path copies headers, not requests. A changed timestamp type or maxTimestamp
    is re-CRCed over the new header and the records where they lie.
    """
    head = bytearray(memoryview(buf)[pos : pos + HEADER_SIZE])
    try:  # the produce path: the header is already validated, so no patch_* checks again
        _BASE_OFFSET.pack_into(head, 0, base_offset)
        if leader_epoch is not None:
            _LEADER_EPOCH.pack_into(head, _LEADER_EPOCH_OFFSET, leader_epoch)
    except struct.error as error:
        raise EncodeError(f"cannot restamp batch header: {error}") from None
    attributes = _stamped_attributes(header.attributes, timestamp_type, max_timestamp)
    if attributes != header.attributes or max_timestamp != header.max_timestamp:
        _ATTRIBUTES.pack_into(head, _ATTRIBUTES_OFFSET, attributes)
        _MAX_TIMESTAMP.pack_into(head, _MAX_TIMESTAMP_OFFSET, max_timestamp)
        crc = crc32c.crc32c(memoryview(head)[_ATTRIBUTES_OFFSET:])
        crc = crc32c.crc32c(memoryview(buf)[pos + HEADER_SIZE : pos + header.size], crc)
        _CRC.pack_into(head, _CRC_OFFSET, crc)
    return head


# --- records ------------------------------------------------------------------------------


def records_section(
    buf: _Buffer, pos: int = 0, *, max_output: int = DEFAULT_MAX_OUTPUT
) -> tuple[BatchHeader, bytes]:
    """The batch header and its records section, decompressed if the codec says so."""
    header = read_batch_header(buf, pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {header.batch_length} is below the minimum")
    if header.batch_length > len(buf) - pos - LOG_OVERHEAD:
        raise DecodeError(f"truncated record batch at position {pos}")
    body = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    if header.codec > _MAX_CODEC:
        raise CorruptRecordError(f"unknown compression codec id {header.codec}")
    return header, decompress(header.codec, body, max_output=max_output)


_MIN_RUN = 16  # records in a run worth reading by column
_FIRST_PROBE = 64  # records compared per column at first; eight times more while the run goes on
_COPY_RECORDS_BELOW = 1024  # average record size (bytes) under which a section is scanned as bytes


def max_record_timestamp_delta(section: _Buffer, record_count: int, claimed: int = -1) -> int:
    """The largest timestampDelta among a records section's records (-1 when it has none).

    Kafka takes a batch's maxTimestamp from its records, not from what the producer wrote in
    the header, so this runs for every produced record. It hops from record to record by
    length, reading only the delta. Where consecutive records have the same length prefix
    (same-sized values: the records sit a fixed stride apart), the whole run is checked and
    its deltas read with strided slices, in C; a short section surfaces as the IndexError
    of reading past its end. `claimed` (the header's maxTimestamp - baseTimestamp) is only
    a guess checked first: the answer is always what the records hold.

    The same walk is the produce path's check of the records' layout (Kafka's LogValidator walks
    every record too): exactly `record_count` records, each length prefix a valid varint of at
    least the smallest record and inside the section, and no byte after the last record, or
    RecordLayoutError. It follows length prefixes and decodes only the timestamp deltas."""
    view: _Buffer = memoryview(section)
    if type(section) is not bytes and len(view) <= record_count * _COPY_RECORDS_BELOW:
        view = bytes(view)  # small records: bytes reads and strided slices beat a memoryview's
    largest = -1
    pos = done = 0
    plain_until = 0  # records up to here go one by one (a run whose deltas could not be read by column)
    columns: list[bytes] = []  # the one-byte zigzag deltas of the runs
    try:
        while done < record_count:
            byte = view[pos]
            if byte < 0x80:
                prefix, raw = 1, byte
            elif (second := view[pos + 1]) < 0x80:  # records of 64 B to 8 KiB
                prefix, raw = 2, (byte & 0x7F) | (second << 7)
            else:
                raw, after = read_uvarint(view, pos)
                prefix = after - pos
            length = (raw >> 1) ^ -(raw & 1)
            if length < _MIN_RECORD_SIZE - 1:
                raise RecordLayoutError(f"record length {length} out of bounds")
            step = prefix + length
            if done >= plain_until and record_count - done > 1 and view[pos + step] == byte:
                run = _uniform_run(view, pos, step, prefix, record_count - done)
                deltas = _run_deltas(view, pos + prefix + 1, step, run) if run >= _MIN_RUN else None
                if deltas is None:
                    plain_until = done + run
                else:
                    if type(deltas) is bytes:
                        columns.append(deltas)
                    elif deltas > largest:
                        largest = deltas
                    done += run
                    pos += run * step
                    continue
            byte = view[pos + prefix + 1]  # after the attributes byte
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
            elif (second := view[pos + prefix + 2]) < 0x80:  # 64 ms to 8.19 s after the first record
                raw = (byte & 0x7F) | (second << 7)
                delta = (raw >> 1) ^ -(raw & 1)
            else:
                delta, _ = read_varlong(view, pos + prefix + 1)
            if delta > largest:
                largest = delta
            done += 1
            pos += step
    except RecordLayoutError:
        raise
    except IndexError:
        raise RecordLayoutError(f"records section ends before its record count {record_count}") from None
    except DecodeError as error:  # a varint longer than Kafka allows
        raise RecordLayoutError(f"record {done}: {error}") from None
    _check_walk_end(pos, len(view), record_count)
    if columns:
        return max(largest, _largest_zigzag_byte(columns[0] if len(columns) == 1 else b"".join(columns), claimed))
    return largest


def check_record_layout(section: _Buffer, record_count: int) -> None:
    """The layout check of `max_record_timestamp_delta` alone, for batches whose record timestamps
    are not needed (LogAppendTime topics): it follows the length prefixes, hopping over runs of
    same-sized records at once, and decodes nothing else. RecordLayoutError when the records
    disagree with `record_count` or the section's size."""
    view: _Buffer = memoryview(section)
    if type(section) is not bytes and len(view) <= record_count * _COPY_RECORDS_BELOW:
        view = bytes(view)
    pos = done = 0
    try:
        while done < record_count:
            byte = view[pos]
            if byte < 0x80:
                prefix, raw = 1, byte
            elif (second := view[pos + 1]) < 0x80:
                prefix, raw = 2, (byte & 0x7F) | (second << 7)
            else:
                raw, after = read_uvarint(view, pos)
                prefix = after - pos
            length = (raw >> 1) ^ -(raw & 1)
            if length < _MIN_RECORD_SIZE - 1:
                raise RecordLayoutError(f"record length {length} out of bounds")
            step = prefix + length
            run = 1
            if record_count - done > 1 and view[pos + step] == byte:
                run = _uniform_run(view, pos, step, prefix, record_count - done) or 1
            done += run
            pos += run * step
    except RecordLayoutError:
        raise
    except IndexError:
        raise RecordLayoutError(f"records section ends before its record count {record_count}") from None
    except DecodeError as error:
        raise RecordLayoutError(f"record {done}: {error}") from None
    _check_walk_end(pos, len(view), record_count)


def _check_walk_end(pos: int, end: int, record_count: int) -> None:
    """After walking `record_count` records: the last one must end where the section does."""
    if pos > end:
        raise RecordLayoutError("the last record runs past the end of the records section")
    if pos < end:
        raise RecordLayoutError(f"{end - pos} bytes left after the last of {record_count} records")


def _uniform_run(view: _Buffer, pos: int, step: int, prefix: int, limit: int) -> int:
    """How many records from `pos` on (at most `limit`) begin with the same `prefix` bytes of
    length as the one at `pos`, each therefore `step` bytes after the last. Whole records only.
    Each probe compares whole columns at once (memcmp); only a column that differs is searched,
    and a probe is not started when the record it would begin with already differs."""
    limit = min(limit, (len(view) - pos) // step)
    first = bytes(view[pos : pos + prefix])
    lead = first[0]
    run, probe = 0, _FIRST_PROBE
    while run < limit:
        count = probe if probe < limit - run else limit - run
        start = pos + run * step
        same = count
        for k in range(prefix):
            column = bytes(view[start + k : start + k + count * step : step])
            expected = first[k : k + 1]
            if column != expected * count:
                matching = len(column) - len(column.lstrip(expected))
                if matching < same:
                    same = matching
        run += same
        if same < count or (run < limit and view[pos + run * step] != lead):
            break
        probe *= 8
    return run


_ODD_BYTES = bytes(range(1, 256, 2))
# per one-byte delta d >= 0: every zigzag byte of a delta <= d (the even ones up to 2d, every odd one)
_NOT_ABOVE = [bytes(range(0, 2 * d + 1, 2)) + _ODD_BYTES[:64] for d in range(64)]
_MAX_BY_ITERATION = 256  # longer columns: membership tests (memchr) beat max() reading byte by byte
_EVEN_CONTINUED = bytes(range(0x80, 0x100, 2))  # first bytes of two-byte zigzag varints of deltas >= 0
_LITTLE_ENDIAN = sys.byteorder == "little"


def _run_deltas(view: _Buffer, first: int, step: int, run: int) -> bytes | int | None:
    """The timestampDeltas of `run` records whose deltas start `step` bytes apart from `first`:
    their zigzag bytes when all are one-byte varints, the largest when all are two-byte
    varints of deltas >= 0, else None (to be read one by one)."""
    column = bytes(view[first : first + run * step : step])
    return column if column.isascii() else _two_byte_run_max(view, first, step, run, column)


def _two_byte_run_max(view: _Buffer, first: int, step: int, run: int, low: bytes) -> int | None:
    """The largest timestampDelta of a run whose deltas are all two-byte varints of deltas
    >= 0 (64 ms to 8.19 s, batches that waited in a busy producer), else None. `low` holds
    their first bytes. Each (second, first) byte pair is laid out as one unsigned short so
    that a single max() in C orders them as the deltas."""
    if low.translate(None, _EVEN_CONTINUED):
        return None
    high = bytes(view[first + 1 : first + 1 + run * step : step])
    if not high.isascii():
        return None
    pairs = bytearray(2 * run)
    pairs[0::2], pairs[1::2] = (low, high) if _LITTLE_ENDIAN else (high, low)
    high_byte, low_byte = divmod(max(memoryview(pairs).cast("H")), 0x100)
    return ((high_byte << 7) | (low_byte & 0x7F)) >> 1


def _largest_zigzag_byte(deltas: bytes, claimed: int) -> int:
    """The largest delta of one-byte zigzag varints. Zigzag puts deltas >= 0 on even bytes in
    order and negative ones on odd bytes. The producer's claim, when it is there and nothing
    is above it, settles it with two C scans; otherwise the largest even byte wins, if any."""
    if 0 <= claimed < 64 and claimed << 1 in deltas and not deltas.translate(None, _NOT_ABOVE[claimed]):
        return claimed
    non_negative = deltas.translate(None, _ODD_BYTES)
    if len(non_negative if non_negative else deltas) <= _MAX_BY_ITERATION:
        largest = max(non_negative) if non_negative else min(deltas)
    elif non_negative:
        largest = next(byte for byte in range(126, -1, -2) if byte in non_negative)
    else:  # every delta negative: the smallest odd byte is the largest
        largest = next(byte for byte in range(1, 128, 2) if byte in deltas)
    return (largest >> 1) ^ -(largest & 1)


def iter_records(buf: _Buffer, pos: int = 0, *, max_output: int = DEFAULT_MAX_OUTPUT) -> Iterator[Record]:
    """Records of the batch at `pos`, decompressing first if needed. Does not check CRC."""
    header, section = records_section(buf, pos, max_output=max_output)
    return decode_records_section(section, header)


def decode_batch(
    buf: _Buffer, pos: int = 0, *, max_output: int = DEFAULT_MAX_OUTPUT
) -> tuple[BatchHeader, list[Record]]:
    """Header and every record of the batch at `pos`, eagerly."""
    header, section = records_section(buf, pos, max_output=max_output)
    return header, list(decode_records_section(section, header))


def decode_records_section(section: _Buffer, header: BatchHeader) -> Iterator[Record]:
    """Parse an uncompressed records section; the header gives bases and the count."""
    count = header.record_count
    end = len(section)
    if count < 0 or count * _MIN_RECORD_SIZE > end:
        raise RecordLayoutError(f"record count {count} cannot fit in {end} bytes of records")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    pos = 0
    for _ in range(count):
        record, pos = _read_record(section, pos, base_offset, base_timestamp, append_time)
        yield record
    if pos != end:
        raise RecordLayoutError(f"{end - pos} bytes left after the last of {count} records")


def _read_record(
    buf: _Buffer, pos: int, base_offset: int, base_timestamp: int, append_time: int | None
) -> tuple[Record, int]:
    length, pos = read_varint(buf, pos)
    if length < _MIN_RECORD_SIZE - 1 or length > len(buf) - pos:
        raise RecordLayoutError(f"record length {length} out of bounds")
    end = pos + length
    pos += 1  # record attributes: unused by every version so far
    timestamp_delta, pos = read_varlong(buf, pos)
    offset_delta, pos = read_varint(buf, pos)
    key, pos = _read_bytes(buf, pos, end, "key")
    value, pos = _read_bytes(buf, pos, end, "value")
    header_count, pos = read_varint(buf, pos)
    # Every header takes at least two bytes (two length varints).
    if header_count < 0 or header_count * 2 > end - pos:
        raise CorruptRecordError(f"record header count {header_count} out of bounds")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(header_count):
        raw_key, pos = _read_bytes(buf, pos, end, "header key")
        if raw_key is None:
            raise CorruptRecordError("record header key is null")
        try:
            header_key = raw_key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"record header key is not UTF-8: {exc}") from exc
        header_value, pos = _read_bytes(buf, pos, end, "header value")
        headers.append((header_key, header_value))
    if pos != end:
        raise CorruptRecordError(f"record length {length} disagrees with its fields")
    timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), pos


def _read_bytes(buf: _Buffer, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    size, pos = read_varint(buf, pos)
    if size == -1:
        return None, pos
    if size < 0 or size > end - pos:
        raise CorruptRecordError(f"record {what} length {size} out of bounds")
    return bytes(buf[pos : pos + size]), pos + size


# --- building -----------------------------------------------------------------------------


def _encode_bytes(value: bytes | bytearray | memoryview | None, what: str) -> bytes:
    if value is None:
        return b"\x01"  # zigzag(-1)
    if not isinstance(value, bytes | bytearray | memoryview):
        raise EncodeError(f"record {what} must be bytes or None, not {type(value).__name__}")
    if len(value) > _INT32_MAX:
        raise EncodeError(f"record {what} is too large")
    return encode_varint(len(value)) + bytes(value)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> bytes:
    if not _INT32_MIN <= offset_delta <= _INT32_MAX:
        raise EncodeError(f"offset delta {offset_delta} is not an int32")
    if not _INT64_MIN <= timestamp_delta <= _INT64_MAX:
        raise EncodeError(f"timestamp delta {timestamp_delta} is not an int64")
    parts = [
        b"\x00",  # attributes
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
        _encode_bytes(key, "key"),
        _encode_bytes(value, "value"),
    ]
    headers = list(headers)
    parts.append(encode_varint(len(headers)))
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise EncodeError(f"record header key must be str, not {type(header_key).__name__}")
        parts.append(_encode_bytes(header_key.encode("utf-8"), "header key"))
        parts.append(_encode_bytes(header_value, "header value"))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_records_section(records: Iterable[Record], base_offset: int, base_timestamp: int) -> bytes:
    """The uncompressed records section: deltas are taken against the given bases."""
    return b"".join(
        _encode_record(
            record.offset - base_offset,
            record.timestamp - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
        for record in records
    )


def build_batch(
    records: Iterable[Record],
    base_offset: int = 0,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    *,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one magic-2 batch, the way the Java producer lays it out.

    Record offsets are absolute (deltas are taken from `base_offset`). Unless given,
    baseTimestamp is the first record's timestamp (or `delete_horizon_ms`, which sets
    attribute bit 6), maxTimestamp the largest record timestamp, and lastOffsetDelta
    the last record's delta; an empty batch gets -1, -1 and 0. The codec is applied even
    when it does not shrink the data (unlike some clients).
    """
    records = list(records)
    if codec < 0 or codec > _MAX_CODEC:
        raise EncodeError(f"unknown compression codec id {codec}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise EncodeError(f"unknown timestamp type {timestamp_type}")
    attributes = codec
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= _ATTR_LOG_APPEND_TIME
    if is_transactional:
        attributes |= _ATTR_TRANSACTIONAL
    if is_control:
        attributes |= _ATTR_CONTROL
    if delete_horizon_ms is not None:
        if base_timestamp is not None and base_timestamp != delete_horizon_ms:
            raise EncodeError("delete_horizon_ms is stored as baseTimestamp; they must agree")
        attributes |= _ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon_ms
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else -1
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=-1)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    section = encode_records_section(records, base_offset, base_timestamp)
    if codec:
        section = compress(codec, section, level=compression_level)
    out = bytearray(HEADER_SIZE + len(section))
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            MIN_BATCH_LENGTH + len(section),
            partition_leader_epoch,
            2,
            0,  # CRC, filled in below
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as exc:
        raise EncodeError(f"batch header field out of range: {exc}") from exc
    out[HEADER_SIZE:] = section
    crc = crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:])
    struct.pack_into(">I", out, _CRC_OFFSET, crc)
    return bytes(out)


def build_batch_like(header: BatchHeader, records: Iterable[Record], **overrides: Any) -> bytes:
    """`records` in the frame of an existing batch: its offsets, producer fields, attributes,
    codec and leader epoch (what Kafka's cleaner and LogValidator keep); `overrides` win."""
    frame: dict[str, Any] = dict(
        base_offset=header.base_offset, codec=header.codec, producer_id=header.producer_id,
        producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
        is_transactional=header.is_transactional, is_control=header.is_control,
        timestamp_type=header.timestamp_type, partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta)
    frame.update(overrides)
    return build_batch(records, **frame)


# --- control records ----------------------------------------------------------------------

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


def build_end_txn_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: a transactional control batch holding one COMMIT/ABORT record."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    try:
        value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise EncodeError(f"coordinator epoch out of range: {exc}") from exc
    return build_batch(
        [Record(base_offset, timestamp, key, value, ())],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_key(key: bytes | None) -> int:
    """The control record type (CONTROL_ABORT, CONTROL_COMMIT, ...) from a control key."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key is too short")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"negative control record key version {version}")
    return control_type


def parse_end_txn_value(value: bytes | None) -> int:
    """The coordinator epoch from a COMMIT/ABORT marker's value."""
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise CorruptRecordError("transaction marker value is too short")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"negative transaction marker version {version}")
    return coordinator_epoch
