"""The keys of a batch's records without building Record objects.

Compaction needs every record's key (to build its offset map and to decide what survives),
and a compacted topic refuses records without one at produce time. Both are per-record
loops over the whole partition, so this walks the records section with the least Python
it can: offset delta, key and whether a value is present; headers are skipped.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.exceptions import CorruptRecordError, DecodeError, RecordLayoutError
from wire.records import BatchHeader, records_section

__all__ = ["RecordKey", "record_keys"]

_Buffer = bytes | bytearray | memoryview


class RecordKey(NamedTuple):
    offset: int
    key: bytes | None
    has_value: bool


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is too long")


def _scan(section: bytes, header: BatchHeader) -> list[RecordKey]:
    """The record walk; one-byte varints (most deltas and key lengths) are decoded inline."""
    base = header.base_offset
    size = len(section)
    found: list[RecordKey] = []
    pos = 0
    for _ in range(header.record_count):
        byte = section[pos]
        if byte < 0x80:
            length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
        else:
            length, pos = _zigzag(section, pos)
        end = pos + length
        if length < 6 or end > size:
            raise RecordLayoutError(f"record length {length} out of bounds")
        cursor = pos + 1  # record attributes
        while section[cursor] & 0x80:  # timestampDelta: not needed, skipped
            cursor += 1
        byte = section[cursor + 1]
        if byte < 0x80:
            offset_delta, cursor = (byte >> 1) ^ -(byte & 1), cursor + 2
        else:
            offset_delta, cursor = _zigzag(section, cursor + 1)
        byte = section[cursor]
        if byte < 0x80:
            key_length, cursor = (byte >> 1) ^ -(byte & 1), cursor + 1
        else:
            key_length, cursor = _zigzag(section, cursor)
        key = None
        if key_length >= 0:
            key = section[cursor : cursor + key_length]
            cursor += key_length
        if cursor >= end:
            raise CorruptRecordError("record fields run past the record's length")
        # valueLength is a zigzag varint: its first byte's low bit is the sign (null = -1)
        found.append(RecordKey(base + offset_delta, key, not section[cursor] & 1))
        pos = end
    if pos != size:
        raise RecordLayoutError(f"{size - pos} bytes left after the last of {header.record_count} records")
    return found


def record_keys(batch: _Buffer, header: BatchHeader) -> list[RecordKey]:
    """(offset, key, has value) of every record of `batch` (one whole batch), decompressing if needed."""
    _, section = records_section(batch)
    try:
        return _scan(section, header)
    except IndexError:
        raise RecordLayoutError("a record runs past the end of the records section") from None
    except DecodeError:
        raise
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None
