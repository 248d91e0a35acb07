"""wire.compression: round trips, the framings real clients write, and corrupt input."""

from __future__ import annotations

import contextlib
import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from wire.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    compress,
    decompress,
    xxh32,
)
from wire.exceptions import DecodeError, EncodeError

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
XERIAL_MAGIC = b"\x82SNAPPY\x00"
LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _compressible(n: int) -> bytes:
    return (b"kafka record payload %d " * (n // 20 + 1))[:n]


def _lz4_header_checksums(frame: bytes) -> tuple[int, int]:
    """(correct, kafka-0.8-broken) header checksum of a frame without optional fields."""
    return (xxh32(frame[4:6]) >> 8) & 0xFF, (xxh32(frame[0:6]) >> 8) & 0xFF


@pytest.mark.parametrize("codec", ALL_CODECS)
@settings(max_examples=50)
@given(data=st.binary(max_size=3000))
def test_round_trip_per_codec(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", [0, 1])
@settings(max_examples=25)
@given(data=st.binary(max_size=2000))
def test_round_trip_for_legacy_magic(codec: int, magic: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_round_trip_of_large_compressible_input(codec: int) -> None:
    data = _compressible(300_000)
    compressed = compress(codec, data)
    assert len(compressed) < len(data) // 5
    assert decompress(codec, compressed) == data


def test_gzip_output_is_a_standard_gzip_member() -> None:
    assert gzip.decompress(compress(GZIP, b"hello gzip")) == b"hello gzip"


def test_gzip_decodes_concatenated_members() -> None:
    assert decompress(GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_gzip_rejects_trailing_garbage() -> None:
    with pytest.raises(DecodeError):
        decompress(GZIP, gzip.compress(b"ab") + b"junk")


def test_snappy_compress_writes_xerial_framing() -> None:
    out = compress(SNAPPY, b"x" * 100)
    assert out[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    (block_len,) = struct.unpack(">i", out[16:20])
    assert len(out) == 20 + block_len
    assert bytes(cramjam.snappy.decompress_raw(out[20:])) == b"x" * 100


def test_snappy_compress_splits_into_32k_blocks_like_snappy_java() -> None:
    out = compress(SNAPPY, _compressible(70_000))
    pos, blocks = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]


def test_snappy_decodes_raw_block() -> None:
    raw = bytes(cramjam.snappy.compress_raw(b"raw snappy as librdkafka writes it"))
    assert decompress(SNAPPY, raw) == b"raw snappy as librdkafka writes it"


def test_snappy_decodes_self_framed_xerial_stream() -> None:
    chunks = [b"first block " * 50, b"second " * 10, b"", b"third"]
    stream = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for chunk in chunks:
        block = bytes(cramjam.snappy.compress_raw(chunk))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(SNAPPY, stream) == b"".join(chunks)


def test_snappy_decodes_xerial_with_little_endian_version_fields() -> None:
    block = bytes(cramjam.snappy.compress_raw(b"payload"))
    stream = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(SNAPPY, stream) == b"payload"


def test_snappy_decodes_java_style_output_from_kafka_python() -> None:
    # kafka-python's snappy_encode mirrors snappy-java's SnappyOutputStream (xerial header,
    # 32 KiB blocks, Google's C++ snappy via python-snappy): a second, independent writer.
    data = _compressible(100_000)
    assert decompress(SNAPPY, kafka_codec.snappy_encode(data)) == data


def test_snappy_output_is_readable_by_kafka_python() -> None:
    data = _compressible(100_000)
    assert kafka_codec.snappy_decode(compress(SNAPPY, data)) == data


def test_snappy_rejects_claimed_length_impossible_for_input() -> None:
    # uvarint 0xFFFFFFF0 claims ~4 GiB from 6 bytes: refused before any allocation.
    with pytest.raises(DecodeError):
        decompress(SNAPPY, b"\xf0\xff\xff\xff\x0f\x00")


def test_snappy_rejects_xerial_block_length_past_end() -> None:
    stream = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(DecodeError):
        decompress(SNAPPY, stream)


def test_xxh32_known_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF


@given(data=st.binary(max_size=200))
def test_xxh32_matches_lz4_content_checksum(data: bytes) -> None:
    # The lz4 C library appends xxh32(content) little-endian when content_checksum is on.
    frame = lz4.frame.compress(data, content_checksum=True, store_size=False)
    assert xxh32(data) == struct.unpack("<I", frame[-4:])[0]


def test_lz4_magic2_frame_has_independent_blocks_and_no_content_size() -> None:
    info = lz4.frame.get_frame_info(compress(LZ4, b"abc" * 100))
    assert info["block_linked"] is False
    assert info["content_size"] == 0


def test_lz4_magic2_output_has_correct_header_checksum() -> None:
    frame = compress(LZ4, b"abc" * 100)
    correct, _ = _lz4_header_checksums(frame)
    assert frame[6] == correct
    assert lz4.frame.decompress(frame) == b"abc" * 100


def test_lz4_magic0_writes_broken_header_checksum() -> None:
    frame = compress(LZ4, b"abc" * 100, magic=0)
    correct, broken = _lz4_header_checksums(frame)
    assert correct != broken
    assert frame[6] == broken


def test_lz4_magic0_output_is_rejected_by_a_strict_decoder() -> None:
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(compress(LZ4, b"abc" * 100, magic=0))


def test_lz4_magic0_decodes_broken_checksum_written_by_kafka_python(xxhash_shim) -> None:
    data = _compressible(5000)
    assert decompress(LZ4, kafka_codec.lz4_encode_old_kafka(data), magic=0) == data


def test_lz4_magic0_output_is_readable_by_kafka_python_old_decoder(xxhash_shim) -> None:
    data = _compressible(5000)
    assert kafka_codec.lz4_decode_old_kafka(compress(LZ4, data, magic=0)) == data


def test_lz4_magic0_also_accepts_a_correct_header_checksum() -> None:
    # Kafka ignores the descriptor checksum for magic 0, whichever way it was computed.
    assert decompress(LZ4, compress(LZ4, b"abc" * 100, magic=2), magic=0) == b"abc" * 100


def test_lz4_magic1_rejects_broken_header_checksum() -> None:
    with pytest.raises(DecodeError):
        decompress(LZ4, compress(LZ4, b"abc" * 100, magic=0), magic=1)


def test_lz4_decodes_frame_with_content_size_and_linked_blocks() -> None:
    data = _compressible(200_000)
    frame = lz4.frame.compress(data, store_size=True, block_linked=True, content_checksum=True)
    assert decompress(LZ4, frame) == data


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 300_000), block_size=st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB,
                                                                 lz4.frame.BLOCKSIZE_MAX256KB]),
       block_checksum=st.booleans(), content_checksum=st.booleans(), store_size=st.booleans(),
       slack=st.integers(-2, 2))
def test_lz4_frames_of_any_layout_decode_up_to_max_output_and_not_beyond(
        size: int, block_size: int, block_checksum: bool, content_checksum: bool, store_size: bool,
        slack: int) -> None:
    data = _compressible(size)
    frame = lz4.frame.compress(data, block_size=block_size, block_checksum=block_checksum,
                               content_checksum=content_checksum, store_size=store_size)
    max_output = max(0, size + slack)
    if size <= max_output:
        assert decompress(LZ4, frame, max_output=max_output) == data
    else:
        with pytest.raises(DecodeError):
            decompress(LZ4, frame, max_output=max_output)


def test_lz4_output_of_exactly_full_blocks_one_byte_over_max_output_is_refused() -> None:
    data = bytes(4 * 65536)
    with pytest.raises(DecodeError):
        decompress(LZ4, compress(LZ4, data), max_output=len(data) - 1)


def test_lz4_decodes_concatenated_frames_as_one_stream() -> None:
    assert decompress(LZ4, compress(LZ4, b"one ") + compress(LZ4, b"two")) == b"one two"


def test_lz4_rejects_trailing_garbage() -> None:
    with pytest.raises(DecodeError):
        decompress(LZ4, compress(LZ4, b"abc" * 100) + b"junk")


def test_lz4_rejects_a_block_whose_checksum_is_wrong() -> None:
    frame = bytearray(lz4.frame.compress(_compressible(1000), block_checksum=True, content_checksum=False))
    frame[-5] ^= 0xFF  # the block checksum sits just before the 4-byte end mark
    with pytest.raises(DecodeError):
        decompress(LZ4, bytes(frame))


def test_zstd_decodes_frame_without_content_size() -> None:
    data = _compressible(50_000)
    obj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = obj.compress(data) + obj.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(ZSTD, frame) == data


def test_zstd_compress_writes_no_content_size() -> None:
    frame = compress(ZSTD, b"abc" * 100)
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN


def test_zstd_decodes_concatenated_frames() -> None:
    cctx = zstandard.ZstdCompressor()
    assert decompress(ZSTD, cctx.compress(b"one ") + cctx.compress(b"two")) == b"one two"


def test_zstd_is_refused_for_legacy_magic() -> None:
    with pytest.raises(EncodeError):
        compress(ZSTD, b"x", magic=1)
    with pytest.raises(DecodeError):
        decompress(ZSTD, compress(ZSTD, b"x"), magic=1)


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(EncodeError):
        compress(5, b"x")
    with pytest.raises(DecodeError):
        decompress(7, b"x")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_output_beyond_max_output_is_a_decode_error(codec: int) -> None:
    data = bytes(200_000)
    compressed = compress(codec, data)
    assert decompress(codec, compressed, max_output=len(data)) == data
    with pytest.raises(DecodeError):
        decompress(codec, compressed, max_output=len(data) - 1)


def test_uncompressed_beyond_max_output_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decompress(NONE, b"12345", max_output=4)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_empty_input_is_a_decode_error(codec: int) -> None:
    with pytest.raises(DecodeError):
        decompress(codec, b"")


@pytest.mark.parametrize("codec", COMPRESSED)
@settings(max_examples=80)
@given(garbage=st.binary(max_size=300))
def test_random_bytes_raise_only_decode_error(codec: int, garbage: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decompress(codec, garbage, max_output=1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED)
@settings(max_examples=50)
@given(data=st.binary(min_size=1, max_size=500), cut=st.integers(min_value=1))
def test_truncated_output_raises_decode_error(codec: int, data: bytes, cut: int) -> None:
    compressed = compress(codec, data)
    # A xerial stream cut exactly after its 16-byte header is a valid empty stream, so
    # for snappy keep at least part of the first block's length.
    keep_at_least = 17 if codec == SNAPPY else 1
    keep = keep_at_least + cut % (len(compressed) - keep_at_least)
    with pytest.raises(DecodeError):
        decompress(codec, compressed[:keep])


@pytest.mark.parametrize("codec", COMPRESSED)
@settings(max_examples=80)
@given(data=st.binary(min_size=1, max_size=500), where=st.integers(min_value=0), byte=st.integers(0, 255))
def test_mutated_output_raises_only_decode_error(codec: int, data: bytes, where: int, byte: int) -> None:
    compressed = bytearray(compress(codec, data))
    compressed[where % len(compressed)] = byte
    with contextlib.suppress(DecodeError):
        decompress(codec, bytes(compressed), max_output=1 << 20)
