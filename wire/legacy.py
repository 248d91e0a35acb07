"""Legacy message sets, message formats v0 and v1 (magic 0 and 1).

Old clients (Produce v0-v2, Fetch v0-v3) speak these. Each entry is::

    offset int64 | messageSize int32 | crc uint32 (CRC-32 of magic..end) | magic int8
    attributes int8 (bits 0-2 codec, bit 3 LogAppendTime in v1)
    [timestamp int64, v1 only] | key bytes (int32 length, -1 null) | value bytes

A compressed entry is a *wrapper*: its value is the compressed bytes of an inner message
set. Inner offsets are absolute in v0; in v1 they are relative (0..n-1) and the wrapper
carries the absolute offset of the last inner message. Malformed input raises DecodeError
(CorruptRecordError for failed checks), never IndexError or struct.error.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from wire.compression import DEFAULT_MAX_OUTPUT, ZSTD, compress, decompress
from wire.exceptions import CorruptRecordError, DecodeError, EncodeError
from wire.records import CREATE_TIME, LOG_APPEND_TIME, LOG_OVERHEAD, Record

__all__ = [
    "NO_TIMESTAMP",
    "MessageHeader",
    "MessageIterator",
    "build_message_set",
    "inner_message_set",
    "iter_legacy_records",
    "iter_message_set_records",
    "iter_messages",
    "read_message_header",
    "validate_message",
]

_HEADER_V0 = struct.Struct(">qiIbb")
_HEADER_V1 = struct.Struct(">qiIbbq")
_LENGTH = struct.Struct(">i")
_CRC_OFFSET = 12
_MAGIC_OFFSET = 16
# messageSize minimums: crc + magic + attributes (+ timestamp) + key length + value length.
_MIN_SIZE = {0: 4 + 1 + 1 + 4 + 4, 1: 4 + 1 + 1 + 8 + 4 + 4}
_CODEC_MASK = 0x07
_ATTR_LOG_APPEND_TIME = 0x08

NO_TIMESTAMP = -1

_Buffer = bytes | bytearray | memoryview


class MessageHeader(NamedTuple):
    """Fixed-size fields of one entry; `timestamp` is NO_TIMESTAMP for magic 0."""

    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int

    @property
    def size(self) -> int:
        """Bytes the whole entry occupies, offset and size fields included."""
        return self.message_size + LOG_OVERHEAD

    @property
    def codec(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic > 0 and self.attributes & _ATTR_LOG_APPEND_TIME:
            return LOG_APPEND_TIME
        return CREATE_TIME

    @property
    def key_offset(self) -> int:
        """Where the key length sits, relative to the entry's start."""
        return _HEADER_V0.size if self.magic == 0 else _HEADER_V1.size


def read_message_header(buf: _Buffer, pos: int = 0) -> MessageHeader:
    """Header of the magic 0/1 entry at `pos`, checking only that it is all there."""
    if pos < 0 or len(buf) - pos <= _MAGIC_OFFSET:
        raise DecodeError(f"truncated message at position {pos}")
    magic = buf[pos + _MAGIC_OFFSET]
    if magic == 0:
        if len(buf) - pos < _HEADER_V0.size:
            raise DecodeError(f"truncated message at position {pos}")
        return MessageHeader(*_HEADER_V0.unpack_from(buf, pos), NO_TIMESTAMP)
    if magic == 1:
        if len(buf) - pos < _HEADER_V1.size:
            raise DecodeError(f"truncated message at position {pos}")
        return MessageHeader._make(_HEADER_V1.unpack_from(buf, pos))
    raise CorruptRecordError(f"unsupported message magic {magic} at position {pos}")


class MessageIterator:
    """Walks a message set, yielding `(position, header)` per top-level entry.

    Like records.BatchIterator: stops quietly at a truncated tail (fetch responses may end
    with a partial message), leaving `valid_end` and `truncated`; an impossible size or
    magic raises CorruptRecordError. No CRC checks; see `validate_message`.
    """

    __slots__ = ("_buf", "_start", "truncated", "valid_end")

    def __init__(self, buf: _Buffer, start: int = 0) -> None:
        self._buf = buf
        self._start = start
        self.valid_end = start
        self.truncated = False

    def __iter__(self) -> Iterator[tuple[int, MessageHeader]]:
        buf = self._buf
        end = len(buf)
        pos = self._start
        while True:
            remaining = end - pos
            if remaining <= _MAGIC_OFFSET:
                self.truncated = remaining > 0
                return
            (size,) = _LENGTH.unpack_from(buf, pos + 8)
            magic = buf[pos + _MAGIC_OFFSET]
            if magic not in _MIN_SIZE:
                raise CorruptRecordError(f"unsupported message magic {magic} at position {pos}")
            if size < _MIN_SIZE[magic]:
                raise CorruptRecordError(f"message size {size} at position {pos} is too small")
            if size + LOG_OVERHEAD > remaining:
                self.truncated = True
                return
            header = read_message_header(buf, pos)
            self.valid_end = pos + header.size
            yield pos, header
            pos += header.size


def iter_messages(buf: _Buffer, start: int = 0) -> MessageIterator:
    """Iterate the top-level entries of a message set; see MessageIterator."""
    return MessageIterator(buf, start)


def validate_message(buf: _Buffer, pos: int = 0) -> MessageHeader:
    """Size, key/value layout and CRC-32 of the entry at `pos`; no decompression."""
    try:
        header = read_message_header(buf, pos)
    except CorruptRecordError:
        raise
    except DecodeError as exc:
        raise CorruptRecordError(str(exc)) from exc
    if header.message_size < _MIN_SIZE[header.magic]:
        raise CorruptRecordError(f"message size {header.message_size} is too small")
    if header.size > len(buf) - pos:
        raise CorruptRecordError(f"message size {header.message_size} runs past the buffer")
    end = pos + header.size
    _read_key_value(buf, pos + header.key_offset, end)
    actual = zlib.crc32(memoryview(buf)[pos + _MAGIC_OFFSET : end])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def _read_sized(buf: _Buffer, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptRecordError(f"message {what} length is truncated")
    (size,) = _LENGTH.unpack_from(buf, pos)
    pos += 4
    if size == -1:
        return None, pos
    if size < 0 or size > end - pos:
        raise CorruptRecordError(f"message {what} length {size} out of bounds")
    return bytes(buf[pos : pos + size]), pos + size


def _read_key_value(buf: _Buffer, pos: int, end: int) -> tuple[bytes | None, bytes | None]:
    key, pos = _read_sized(buf, pos, end, "key")
    value, pos = _read_sized(buf, pos, end, "value")
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the message value")
    return key, value


def _entry_bounds(buf: _Buffer, pos: int) -> tuple[MessageHeader, int]:
    header = read_message_header(buf, pos)
    if header.message_size < _MIN_SIZE[header.magic]:
        raise CorruptRecordError(f"message size {header.message_size} is too small")
    if header.size > len(buf) - pos:
        raise DecodeError(f"truncated message at position {pos}")
    return header, pos + header.size


def inner_message_set(
    buf: _Buffer, pos: int = 0, *, max_output: int = DEFAULT_MAX_OUTPUT
) -> tuple[MessageHeader, bytes]:
    """A compressed wrapper's header and its decompressed inner message set."""
    header, end = _entry_bounds(buf, pos)
    if header.codec == 0:
        raise DecodeError("message is not compressed")
    if header.codec == ZSTD:
        raise CorruptRecordError("zstd is not allowed in message format v0/v1")
    _, value = _read_key_value(buf, pos + header.key_offset, end)
    if value is None:
        raise CorruptRecordError("compressed message has a null value")
    return header, decompress(header.codec, value, magic=header.magic, max_output=max_output)


def iter_legacy_records(
    buf: _Buffer,
    pos: int = 0,
    *,
    max_output: int = DEFAULT_MAX_OUTPUT,
    check_inner_crc: bool = True,
) -> Iterator[Record]:
    """Records of the entry at `pos`, unwrapping a compressed wrapper; no outer CRC check.

    Offsets follow Kafka's rule: in v1, inner relative offsets become absolute only when
    wrapper offset - last relative offset is >= 0 (a client-built wrapper has offset 0).
    Timestamps are NO_TIMESTAMP for v0 and the wrapper's for a LogAppendTime wrapper.
    Inner CRCs are checked unless `check_inner_crc` is False (Kafka checks them too).
    """
    header, end = _entry_bounds(buf, pos)
    if header.codec == 0:
        key, value = _read_key_value(buf, pos + header.key_offset, end)
        yield Record(header.offset, header.timestamp, key, value, [])
        return
    header, inner = inner_message_set(buf, pos, max_output=max_output)
    walker = MessageIterator(inner)
    entries = list(walker)
    if walker.truncated:
        raise CorruptRecordError("compressed message set ends with a partial message")
    if not entries:
        raise CorruptRecordError("compressed message has no inner messages")
    base = -1
    if header.magic > 0:
        base = header.offset - entries[-1][1].offset
    append_time = header.timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    for inner_pos, inner_header in entries:
        if inner_header.magic != header.magic:
            raise CorruptRecordError(
                f"inner message magic {inner_header.magic} differs from wrapper magic {header.magic}"
            )
        if inner_header.codec != 0:
            raise CorruptRecordError("nested compression in a message set")
        if check_inner_crc:
            validate_message(inner, inner_pos)
        inner_end = inner_pos + inner_header.size
        key, value = _read_key_value(inner, inner_pos + inner_header.key_offset, inner_end)
        offset = inner_header.offset + base if base >= 0 else inner_header.offset
        timestamp = inner_header.timestamp if append_time is None else append_time
        yield Record(offset, timestamp, key, value, [])


def iter_message_set_records(buf: _Buffer, *, max_output: int = DEFAULT_MAX_OUTPUT) -> Iterator[Record]:
    """Every record of a message set (a truncated tail is ignored, as in a fetch)."""
    for pos, _ in iter_messages(buf):
        yield from iter_legacy_records(buf, pos, max_output=max_output)


# --- building -----------------------------------------------------------------------------


def _encode_sized(value: bytes | bytearray | memoryview | None, what: str) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    if not isinstance(value, bytes | bytearray | memoryview):
        raise EncodeError(f"message {what} must be bytes or None, not {type(value).__name__}")
    if len(value) > 2**31 - 1:
        raise EncodeError(f"message {what} is too large")
    return _LENGTH.pack(len(value)) + bytes(value)


def _encode_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
) -> bytes:
    try:
        if magic == 0:
            after_crc = struct.pack(">bb", 0, attributes)
        else:
            after_crc = struct.pack(">bbq", 1, attributes, timestamp)
        after_crc += _encode_sized(key, "key") + _encode_sized(value, "value")
        crc = zlib.crc32(after_crc)
        return struct.pack(">qiI", offset, len(after_crc) + 4, crc) + after_crc
    except struct.error as exc:
        raise EncodeError(f"message field out of range: {exc}") from exc


def build_message_set(
    records: Iterable[Record],
    magic: int = 1,
    codec: int = 0,
    *,
    timestamp_type: int = CREATE_TIME,
    compression_level: int | None = None,
) -> bytes:
    """Encode records as a v0/v1 message set (down-conversion, tests).

    Offsets are the records' own. Uncompressed: one entry per record. Compressed: one
    wrapper whose offset is the last record's; inner offsets are absolute for v0 and
    relative to the first record for v1, and the v1 wrapper timestamp is the largest
    record timestamp. v0 has no timestamps; headers cannot be represented in v0/v1 and
    are dropped, as Kafka does when down-converting.
    """
    if magic not in (0, 1):
        raise EncodeError(f"legacy message sets have magic 0 or 1, not {magic}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise EncodeError(f"unknown timestamp type {timestamp_type}")
    if codec == ZSTD:
        raise EncodeError("zstd is not allowed in message format v0/v1")
    ts_attribute = _ATTR_LOG_APPEND_TIME if magic == 1 and timestamp_type == LOG_APPEND_TIME else 0
    records = list(records)
    if not codec:
        return b"".join(
            _encode_message(r.offset, magic, ts_attribute, r.timestamp, r.key, r.value) for r in records
        )
    if not records:
        raise EncodeError("a compressed message set needs at least one record")
    first = records[0].offset
    inner = b"".join(
        _encode_message(
            r.offset - first if magic == 1 else r.offset,
            magic,
            ts_attribute,
            r.timestamp,
            r.key,
            r.value,
        )
        for r in records
    )
    wrapper_value = compress(codec, inner, magic=magic, level=compression_level)
    wrapper_timestamp = max(r.timestamp for r in records) if magic == 1 else NO_TIMESTAMP
    return _encode_message(
        records[-1].offset,
        magic,
        codec | ts_attribute,
        wrapper_timestamp,
        None,
        wrapper_value,
    )
