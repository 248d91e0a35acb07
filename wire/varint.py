"""Protocol varints: unsigned (compact lengths, tag numbers) and zigzag (record fields).

Every reader takes `(buf, pos)` and returns `(value, new_pos)`; malformed or truncated
input raises DecodeError, never IndexError.
"""

from wire.exceptions import DecodeError

_MAX_UVARINT_BYTES = 5
_MAX_UVARLONG_BYTES = 10


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 that must fit in 32 bits (Kafka's readUnsignedVarint)."""
    return _read_unsigned(buf, pos, _MAX_UVARINT_BYTES)


def read_uvarlong(buf, pos: int) -> tuple[int, int]:
    return _read_unsigned(buf, pos, _MAX_UVARLONG_BYTES)


def _read_unsigned(buf, pos: int, max_bytes: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise DecodeError("varint is too long")


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint."""
    raw, pos = _read_unsigned(buf, pos, _MAX_UVARINT_BYTES)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 64-bit varint."""
    raw, pos = _read_unsigned(buf, pos, _MAX_UVARLONG_BYTES)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag signed varint (32- or 64-bit; Python ints make the width irrelevant)."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)
