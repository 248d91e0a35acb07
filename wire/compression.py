"""Kafka's compression codecs, as the bytes on the wire need them.

A batch's attributes carry a codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd). Each
codec has quirks that real clients depend on, so this module is more than a thin wrapper:

* snappy: Java clients write the xerial "snappy-java" block framing, librdkafka writes
  raw snappy; we read both and write xerial (what the Java client writes).
* lz4: the LZ4 *frame* format. Magic 0 message sets come from Kafka < 0.10, whose frame
  header checksum was computed over the frame magic too (KAFKA-3160); we read magic 0
  lz4 ignoring the header checksum, as Kafka does, and write it the broken way.
* zstd: frames may lack a content size (streaming writers), so we decode by streaming.

Every decoder raises DecodeError (never a library exception) on corrupt input, and stops
with DecodeError once output would exceed `max_output` (decompression-bomb guard).
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from wire.exceptions import DecodeError, EncodeError
from wire.varint import read_uvarint

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "Codec",
    "compress",
    "decompress",
    "xxh32",
]


class Codec(IntEnum):
    """Codec ids as stored in the low 3 bits of batch/message attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


NONE, GZIP, SNAPPY, LZ4, ZSTD = Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD

DEFAULT_MAX_OUTPUT = 256 * 1024 * 1024
"""Largest decompressed size accepted unless the caller says otherwise (bomb guard)."""

_Buffer = bytes | bytearray | memoryview


def compress(codec: int, data: _Buffer, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress a records section (magic 2) or inner message set (magic 0/1).

    `magic` matters for lz4 (magic 0 writes the pre-0.10 broken header checksum) and zstd
    (Kafka only allows it with magic 2). `level` is the codec's own level; None picks what
    the Java client uses by default.
    """
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return _gzip_compress(data, 6 if level is None else level)
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, magic, level)
    if codec == ZSTD:
        if magic < 2:
            raise EncodeError("zstd needs message format v2 (magic 2)")
        return _zstd_compress(data, 3 if level is None else level)
    raise EncodeError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: _Buffer, *, magic: int = 2, max_output: int = DEFAULT_MAX_OUTPUT) -> bytes:
    """Inverse of `compress`; corrupt input or output beyond `max_output` -> DecodeError."""
    if codec == NONE:
        if len(data) > max_output:
            raise DecodeError(f"data is larger than max_output={max_output}")
        return bytes(data)
    if codec == GZIP:
        return _gzip_decompress(data, max_output)
    if codec == SNAPPY:
        return _snappy_decompress(data, max_output)
    if codec == LZ4:
        return _lz4_decompress(data, magic, max_output)
    if codec == ZSTD:
        if magic < 2:
            raise DecodeError("zstd is not allowed before message format v2")
        return _zstd_decompress(data, max_output)
    raise DecodeError(f"unknown compression codec id {codec}")


# --- gzip ---------------------------------------------------------------------------------

_GZIP_MAGIC = b"\x1f\x8b"


def _gzip_compress(data: _Buffer, level: int) -> bytes:
    # wbits=31 writes a gzip member (what GZIPOutputStream writes) with mtime 0, so the
    # output is deterministic for a given input.
    try:
        obj = zlib.compressobj(level, zlib.DEFLATED, 31)
    except ValueError as exc:
        raise EncodeError(f"gzip: {exc}") from exc
    return obj.compress(data) + obj.flush()


def _gzip_decompress(data: _Buffer, max_output: int) -> bytes:
    """Accepts concatenated members, as Java's GZIPInputStream does; nothing may trail."""
    out = bytearray()
    rest: _Buffer = data
    while True:
        obj = zlib.decompressobj(31)
        try:
            out += obj.decompress(rest, max_output - len(out) + 1)
        except zlib.error as exc:
            raise DecodeError(f"gzip: {exc}") from exc
        if len(out) > max_output:
            raise DecodeError(f"gzip output exceeds max_output={max_output}")
        if not obj.eof:
            raise DecodeError("gzip: truncated stream")
        rest = obj.unused_data
        if not rest:
            return bytes(out)
        if rest[:2] != _GZIP_MAGIC:
            raise DecodeError("gzip: trailing bytes after the last member")


# --- snappy -------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
# magic, then version and minimum-compatible version, both 1 (what snappy-java writes).
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
# A snappy element expands at most 64 bytes out of 3 bytes in (a 2-byte-offset copy), so a
# raw block claiming more than ~21x its own size is corrupt. 32x leaves slack.
_SNAPPY_MAX_RATIO = 32


def _xerial_compress(data: _Buffer) -> bytes:
    """Xerial framing, like the Java client: a decoder that knows only raw snappy is rare
    (librdkafka and Java both read xerial), while old Java brokers can't read raw snappy.
    """
    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: _Buffer, max_output: int) -> bytes:
    view = memoryview(data).cast("B")
    if len(view) >= 16 and view[:8] == _XERIAL_MAGIC:
        # Version/compat ints are ignored on purpose: some writers get their byte order
        # wrong, and there is only one xerial block layout anyway.
        out = bytearray()
        pos = 16
        end = len(view)
        while pos < end:
            if end - pos < 4:
                raise DecodeError("snappy: truncated xerial block length")
            (size,) = struct.unpack_from(">i", view, pos)
            pos += 4
            if size < 0 or size > end - pos:
                raise DecodeError(f"snappy: xerial block length {size} out of bounds")
            out += _snappy_raw(view[pos : pos + size], max_output - len(out))
            pos += size
        return bytes(out)
    return _snappy_raw(view, max_output)


def _snappy_raw(block: memoryview, max_output: int) -> bytes:
    # Check the claimed length before the library allocates a buffer of that size.
    claimed, _ = read_uvarint(block, 0)
    if claimed > max_output:
        raise DecodeError("snappy output exceeds max_output")
    if claimed > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise DecodeError(f"snappy: claimed length {claimed} impossible for {len(block)} bytes")
    try:
        out = bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise DecodeError(f"snappy: {exc}") from exc
    if len(out) != claimed:
        raise DecodeError("snappy: output length differs from the stored length")
    return out


# --- lz4 ----------------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01


def _lz4_compress(data: _Buffer, magic: int, level: int | None) -> bytes:
    # Independent 64 KiB blocks, no content size, no checksums: the frame layout Kafka's
    # Java client writes (old brokers reject dependent blocks and the content size).
    try:
        frame = lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    except (RuntimeError, ValueError) as exc:
        raise EncodeError(f"lz4: {exc}") from exc
    if magic == 0:
        header_end = _lz4_header_end(frame)
        return frame[: header_end - 1] + _lz4_broken_hc(frame, header_end) + frame[header_end:]
    return frame


def _lz4_header_end(frame: _Buffer) -> int:
    """Offset just past the frame descriptor's header-checksum byte."""
    if len(frame) < 7 or bytes(frame[:4]) != _LZ4_MAGIC:
        raise DecodeError("lz4: not an LZ4 frame")
    flg = frame[4]
    end = 7 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0)
    if len(frame) < end:
        raise DecodeError("lz4: truncated frame descriptor")
    return end


def _lz4_correct_hc(frame: _Buffer, header_end: int) -> bytes:
    """The spec's header checksum: 2nd byte of xxh32 over FLG..end of descriptor."""
    return bytes(((xxh32(bytes(frame[4 : header_end - 1])) >> 8) & 0xFF,))


def _lz4_broken_hc(frame: _Buffer, header_end: int) -> bytes:
    """Kafka < 0.10's checksum: the same, but hashed from the frame magic on (KAFKA-3160)."""
    return bytes(((xxh32(bytes(frame[: header_end - 1])) >> 8) & 0xFF,))


def _lz4_decompress(data: _Buffer, magic: int, max_output: int) -> bytes:
    if magic == 0:
        # Kafka ignores the descriptor checksum for magic 0 (it may be broken or right);
        # patch in the correct one so the library's strict check passes.
        header_end = _lz4_header_end(data)
        data = bytes(data[: header_end - 1]) + _lz4_correct_hc(data, header_end) + bytes(data[header_end:])
    out = bytearray()
    rest: _Buffer = data
    while True:
        # Concatenated frames decode as one stream, like the lz4 CLI; trailing junk fails.
        chunk, rest = _lz4_one_frame(rest, max_output - len(out))
        if not rest and not out:
            return chunk  # one frame, the usual case: no copy
        out += chunk
        if not rest:
            return bytes(out)


_LZ4_OUTPUT_STEP = 1 << 20


_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_LZ4_BLOCK_HEADER = struct.Struct("<I")


def _lz4_frame_extent(data: _Buffer) -> tuple[int, int] | None:
    """(end of the first frame, most bytes it can decode to), from its descriptor and block
    sizes alone; None when the frame is not whole or not plain, for the careful decoder to judge."""
    if len(data) < 7 or bytes(data[:4]) != _LZ4_MAGIC:
        return None
    flags, block_max_id = data[4], (data[5] >> 4) & 0x07
    if block_max_id < 4 or flags & _LZ4_FLG_CONTENT_SIZE or flags & _LZ4_FLG_DICT_ID:
        return None  # a declared content size makes the library allocate what the frame claims
    block_max = 1 << (8 + 2 * block_max_id)
    trailer = 4 if flags & _LZ4_FLG_BLOCK_CHECKSUM else 0
    position, blocks, end = 7, 0, len(data) - 4
    while position <= end:
        (size,) = _LZ4_BLOCK_HEADER.unpack_from(data, position)
        position += 4
        if size == 0:  # the end mark
            return position + (4 if flags & _LZ4_FLG_CONTENT_CHECKSUM else 0), blocks * block_max
        position += (size & ~_LZ4_UNCOMPRESSED_BLOCK) + trailer
        blocks += 1
    return None


def _lz4_one_frame(data: _Buffer, budget: int) -> tuple[bytes, _Buffer]:
    """Decode one frame, returning its output and the bytes after it."""
    extent = _lz4_frame_extent(data)
    if extent is not None and extent[0] <= len(data) and extent[1] <= budget:
        try:  # every block within the budget: the library decodes the frame in one call
            return lz4.frame.decompress(data[: extent[0]]), data[extent[0] :]
        except RuntimeError as exc:
            raise DecodeError(f"lz4: {exc}") from exc
    return _lz4_one_frame_by_steps(data, budget)


def _lz4_one_frame_by_steps(data: _Buffer, budget: int) -> tuple[bytes, bytes]:
    """Decode one frame a step at a time, stopping as soon as the output passes `budget`."""
    obj = lz4.frame.LZ4FrameDecompressor()
    out = bytearray()
    chunk: _Buffer = data
    try:
        while True:
            # python-lz4 allocates max_length up front: ask for a step at a time, not the whole budget
            step = max(_LZ4_OUTPUT_STEP, 4 * len(chunk))
            out += obj.decompress(chunk, max_length=min(budget - len(out) + 1, step))
            chunk = b""
            if len(out) > budget:
                raise DecodeError("lz4 output exceeds max_output")
            if obj.eof:
                return bytes(out), obj.unused_data or b""
            if obj.needs_input:
                raise DecodeError("lz4: truncated frame")
    except RuntimeError as exc:
        raise DecodeError(f"lz4: {exc}") from exc


# --- zstd ---------------------------------------------------------------------------------


def _zstd_compress(data: _Buffer, level: int) -> bytes:
    """Streaming compression without a content size, as librdkafka and zstd-jni write it.

    Same settings as those clients give the same bytes (tests check librdkafka's), and
    every Kafka consumer already decodes size-less frames.
    """
    try:
        obj = zstandard.ZstdCompressor(level=level, write_content_size=False).compressobj()
        return obj.compress(data) + obj.flush()
    except zstandard.ZstdError as exc:
        raise EncodeError(f"zstd: {exc}") from exc


# Input is fed in small slices so a tiny run-length-encoded bomb cannot produce much more
# than max_output before we notice (a 4-byte zstd RLE block can expand to 128 KiB).
_ZSTD_FEED = 1024


def _zstd_decompress(data: _Buffer, max_output: int) -> bytes:
    """Streaming decode: works whether or not the frame header records the content size."""
    view = memoryview(data).cast("B")
    dctx = zstandard.ZstdDecompressor()
    out = bytearray()
    pos = 0
    try:
        while True:
            obj = dctx.decompressobj()
            while not obj.eof and pos < len(view):
                end = min(pos + _ZSTD_FEED, len(view))
                out += obj.decompress(view[pos:end])
                pos = end
                if len(out) > max_output:
                    raise DecodeError(f"zstd output exceeds max_output={max_output}")
            if not obj.eof:
                raise DecodeError("zstd: truncated frame")
            # Bytes fed past the end of this frame come back as unused_data.
            pos -= len(obj.unused_data)
            if pos >= len(view):
                return bytes(out)
    except zstandard.ZstdError as exc:
        raise DecodeError(f"zstd: {exc}") from exc


# --- xxh32 --------------------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M32, 13) * _P1) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, needed for the lz4 frame header checksum (only ever over a few bytes).

    Pure Python so we do not depend on an extra package for ~15 bytes per batch.
    """
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, pos)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
