"""wire.legacy: magic 0/1 message sets, plain and compressed wrappers."""

from __future__ import annotations

import contextlib
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from wire.compression import LZ4, compress, xxh32
from wire.exceptions import CorruptRecordError, DecodeError, EncodeError
from wire.legacy import (
    NO_TIMESTAMP,
    build_message_set,
    inner_message_set,
    iter_legacy_records,
    iter_message_set_records,
    iter_messages,
    read_message_header,
    validate_message,
)
from wire.records import LOG_APPEND_TIME, Record

LEGACY_CODECS = [0, 1, 2, 3]
nullable_bytes = st.none() | st.binary(max_size=40)


@st.composite
def legacy_records(draw: st.DrawFn) -> list[Record]:
    first = draw(st.integers(0, 2**40))
    count = draw(st.integers(1, 6))
    return [
        Record(first + i, draw(st.integers(0, 2**42)), draw(nullable_bytes), draw(nullable_bytes), [])
        for i in range(count)
    ]


def _sample(magic: int = 1, codec: int = 0, **kwargs) -> bytes:
    records = [Record(20 + i, 1_600_000_000_000 + i, b"k%d" % i, b"value %d" % i * 4, []) for i in range(3)]
    return build_message_set(records, magic, codec, **kwargs)


def _expected(records: list[Record], magic: int) -> list[Record]:
    return [r._replace(timestamp=r.timestamp if magic else NO_TIMESTAMP) for r in records]


def _readers(buf: bytes) -> None:
    """Every reader over hostile bytes: each must succeed or raise DecodeError."""
    for call in (
        lambda: read_message_header(buf),
        lambda: validate_message(buf),
        lambda: list(iter_legacy_records(buf, max_output=1 << 20)),
        lambda: list(iter_message_set_records(buf, max_output=1 << 20)),
        lambda: list(iter_messages(buf)),
    ):
        with contextlib.suppress(DecodeError):
            call()


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
@settings(max_examples=20)
@given(records=legacy_records())
def test_build_parse_round_trip(magic: int, codec: int, records: list[Record]) -> None:
    message_set = build_message_set(records, magic, codec)
    for pos, _ in iter_messages(message_set):
        validate_message(message_set, pos)
    assert list(iter_message_set_records(message_set)) == _expected(records, magic)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_build_output_is_read_by_kafka_python(magic: int, codec: int, xxhash_shim) -> None:
    message_set = _sample(magic, codec)
    theirs = MemoryRecords(message_set)
    got = []
    while theirs.has_next():
        got += [(r.offset, r.timestamp, r.key, r.value) for r in theirs.next_batch()]
    expected = [
        (r.offset, r.timestamp if magic else None, r.key, r.value)
        for r in iter_message_set_records(message_set)
    ]
    assert got == expected


def test_uncompressed_message_set_has_one_entry_per_record() -> None:
    assert [h.offset for _, h in iter_messages(_sample(1, 0))] == [20, 21, 22]


@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_wrapper_carries_last_offset(magic: int) -> None:
    ((_, header),) = list(iter_messages(_sample(magic, 1)))
    assert header.offset == 22 and header.codec == 1


def test_v1_inner_offsets_are_relative() -> None:
    _, inner = inner_message_set(_sample(1, 2))
    assert [h.offset for _, h in iter_messages(inner)] == [0, 1, 2]


def test_v0_inner_offsets_are_absolute() -> None:
    _, inner = inner_message_set(_sample(0, 2))
    assert [h.offset for _, h in iter_messages(inner)] == [20, 21, 22]


def test_v1_client_wrapper_with_offset_zero_keeps_relative_offsets() -> None:
    # Producers write wrapper offset 0; base = 0 - last relative < 0, so Kafka keeps them.
    message_set = bytearray(_sample(1, 1))
    struct.pack_into(">q", message_set, 0, 0)
    assert [r.offset for r in iter_legacy_records(message_set)] == [0, 1, 2]


def test_v1_wrapper_timestamp_is_the_max_inner_timestamp() -> None:
    ((_, header),) = list(iter_messages(_sample(1, 3)))
    assert header.timestamp == 1_600_000_000_002


def test_log_append_time_wrapper_timestamp_applies_to_inner_records() -> None:
    message_set = bytearray(_sample(1, 1, timestamp_type=LOG_APPEND_TIME))
    # Restamp the wrapper the way a broker does: set the timestamp, then re-CRC.
    struct.pack_into(">q", message_set, 18, 999)
    struct.pack_into(">I", message_set, 12, zlib.crc32(message_set[16:]))
    validate_message(message_set)
    assert {r.timestamp for r in iter_legacy_records(message_set)} == {999}


def test_magic0_lz4_wrapper_uses_broken_header_checksum() -> None:
    message_set = _sample(0, LZ4)
    header = read_message_header(message_set)
    value = message_set[header.key_offset + 8 :]  # skip key length (-1) and value length
    assert (xxh32(value[0:6]) >> 8) & 0xFF == value[6]
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(value)


def test_magic1_lz4_wrapper_uses_correct_header_checksum() -> None:
    message_set = _sample(1, LZ4)
    header = read_message_header(message_set)
    value = message_set[header.key_offset + 8 :]
    assert lz4.frame.decompress(value) == inner_message_set(message_set)[1]


def test_headers_are_dropped_when_building_legacy() -> None:
    message_set = build_message_set([Record(0, 1, b"k", b"v", [("h", b"x")])], 1, 0)
    assert list(iter_legacy_records(message_set)) == [Record(0, 1, b"k", b"v", [])]


def test_build_refuses_zstd_and_magic_2() -> None:
    with pytest.raises(EncodeError):
        build_message_set([Record(0, 0, None, b"")], 1, 4)
    with pytest.raises(EncodeError):
        build_message_set([Record(0, 0, None, b"")], 2, 0)


# --- corruption ---------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1])
def test_flipping_any_bit_in_crc_region_is_corrupt(magic: int, codec: int) -> None:
    message = build_message_set([Record(0, 5, b"key", b"value" * 5, [])], magic, codec)
    validate_message(message)
    for bit in range(12 * 8, len(message) * 8):
        mutated = bytearray(message)
        mutated[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptRecordError):
            validate_message(mutated)


def test_corrupt_inner_message_crc_is_detected() -> None:
    records = [Record(0, 1, b"k", b"v", [])]
    inner = bytearray(build_message_set(records, 1, 0))
    inner[-1] ^= 1  # value byte; inner CRC now wrong
    wrapper = _wrap(bytes(inner), magic=1, codec=1)
    validate_message(wrapper)  # the wrapper itself is fine
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_legacy_records(wrapper))
    assert [r.value for r in iter_legacy_records(wrapper, check_inner_crc=False)] == [b"w"]


def _wrap(inner: bytes, *, magic: int, codec: int, offset: int = 0) -> bytes:
    value = compress(codec, inner, magic=magic)
    ts = b"" if magic == 0 else struct.pack(">q", 0)
    body = struct.pack(">bb", magic, codec) + ts + struct.pack(">ii", -1, len(value)) + value
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def test_nested_compression_is_corrupt() -> None:
    wrapper = _wrap(_sample(1, 1), magic=1, codec=1)
    with pytest.raises(CorruptRecordError, match="nested"):
        list(iter_legacy_records(wrapper))


def test_empty_compressed_wrapper_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="no inner"):
        list(iter_legacy_records(_wrap(b"", magic=1, codec=1)))


def test_inner_magic_differing_from_wrapper_is_corrupt() -> None:
    wrapper = _wrap(_sample(0, 0), magic=1, codec=1)
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_legacy_records(wrapper))


def test_partial_inner_message_is_corrupt() -> None:
    wrapper = _wrap(_sample(1, 0)[:-3], magic=1, codec=2)
    with pytest.raises(CorruptRecordError, match="partial"):
        list(iter_legacy_records(wrapper))


def test_null_wrapper_value_is_corrupt() -> None:
    body = struct.pack(">bbqii", 1, 1, 0, -1, -1)
    message = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="null"):
        list(iter_legacy_records(message))


def test_key_length_past_message_end_is_corrupt() -> None:
    message = bytearray(_sample(1, 0))
    struct.pack_into(">i", message, 26, 10_000)
    with pytest.raises(CorruptRecordError, match="key length"):
        list(iter_legacy_records(message))


@given(cut=st.integers(min_value=1))
def test_iter_messages_stops_cleanly_at_truncated_tail(cut: int) -> None:
    message_set = _sample(1, 0)
    first_size = read_message_header(message_set).size
    keep = cut % len(message_set)
    walker = iter_messages(message_set[:keep])
    complete = [pos for pos, _ in walker]
    assert walker.valid_end == (len(complete) and complete[-1] + first_size)
    assert walker.truncated is (keep != walker.valid_end)


def test_iter_messages_rejects_magic_2() -> None:
    message_set = bytearray(_sample(1, 0))
    message_set[16] = 2
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_messages(message_set))


@settings(max_examples=200)
@given(garbage=st.binary(max_size=120))
def test_random_bytes_raise_only_decode_error(garbage: bytes) -> None:
    _readers(garbage)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
@settings(max_examples=25)
@given(
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=3),
    fix_crc=st.booleans(),
)
def test_mutated_message_raises_only_decode_error(
    magic: int, codec: int, edits: list[tuple[int, int]], fix_crc: bool
) -> None:
    message = bytearray(_sample(magic, codec))
    for where, byte in edits:
        message[where % len(message)] = byte
    if fix_crc and len(message) > 16:
        struct.pack_into(">I", message, 12, zlib.crc32(message[16:]))
    _readers(bytes(message))


@pytest.mark.parametrize("offset", [8, 18, 22])  # messageSize, key length, value length (v0)
def test_huge_length_fields_raise_decode_error(offset: int) -> None:
    message = bytearray(_sample(0, 0))
    struct.pack_into(">i", message, offset, 2**31 - 1)
    _readers(bytes(message))
    with pytest.raises(DecodeError):
        list(iter_legacy_records(message))
