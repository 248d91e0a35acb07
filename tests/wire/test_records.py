"""wire.records: RecordBatch v2 build/parse, CRC, in-place patches, hostile input."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from wire.exceptions import CorruptRecordError, DecodeError, EncodeError, RecordLayoutError
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    Record,
    build_batch,
    build_end_txn_batch,
    check_record_layout,
    decode_batch,
    encode_records_section,
    iter_batches,
    iter_records,
    max_record_timestamp_delta,
    parse_control_key,
    parse_end_txn_value,
    patch_base_offset,
    patch_partition_leader_epoch,
    peek_magic,
    read_batch_header,
    records_section,
    set_max_timestamp,
    validate_batch,
)

CODECS = [0, 1, 2, 3, 4]
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)

nullable_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=10), nullable_bytes), max_size=3)


@st.composite
def record_lists(draw: st.DrawFn, min_size: int = 1) -> tuple[int, list[Record]]:
    """(base_offset, records) with increasing offsets (gaps allowed, as after compaction)."""
    base_offset = draw(st.integers(0, 2**40))
    base_ts = draw(st.integers(0, 2**42))
    count = draw(st.integers(min_size, 8))
    offset = base_offset
    records = []
    for _ in range(count):
        records.append(
            Record(
                offset,
                base_ts + draw(st.integers(-(10**6), 10**6)),
                draw(nullable_bytes),
                draw(nullable_bytes),
                draw(headers),
            )
        )
        offset += draw(st.integers(1, 3))
    return base_offset, records


def _sample(codec: int = 0, **kwargs) -> bytes:
    records = [
        Record(100 + i, 1_700_000_000_000 + i, b"key%d" % i, b"value %d " % i * 5, [("h", b"v")])
        for i in range(4)
    ]
    return build_batch(records, base_offset=100, codec=codec, **kwargs)


def _readers(buf: bytes) -> None:
    """Every reader over hostile bytes: each must succeed or raise DecodeError."""
    for call in (
        lambda: read_batch_header(buf),
        lambda: validate_batch(buf),
        lambda: list(iter_records(buf, max_output=1 << 20)),
        lambda: list(iter_batches(buf)),
        lambda: peek_magic(buf),
    ):
        with contextlib.suppress(DecodeError):
            call()


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25)
@given(sample=record_lists())
def test_build_parse_round_trip(codec: int, sample: tuple[int, list[Record]]) -> None:
    base_offset, records = sample
    batch = build_batch(records, base_offset=base_offset, codec=codec)
    validate_batch(batch)
    assert list(iter_records(batch)) == [r._replace(headers=list(r.headers)) for r in records]


@given(
    producer_id=INT64,
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    base_sequence=INT32,
    leader_epoch=INT32,
    transactional=st.booleans(),
)
def test_build_writes_header_fields(
    producer_id: int, producer_epoch: int, base_sequence: int, leader_epoch: int, transactional: bool
) -> None:
    batch = build_batch(
        [Record(5, 10, None, b"v"), Record(7, 30, None, b"w"), Record(8, 20, None, b"x")],
        base_offset=5,
        codec=3,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        partition_leader_epoch=leader_epoch,
    )
    header = validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    assert header.partition_leader_epoch == leader_epoch
    assert header.is_transactional is transactional
    assert header.is_control is False
    assert header.codec == 3
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (5, 3, 3)
    assert (header.base_timestamp, header.max_timestamp) == (10, 30)
    assert header.size == len(batch)


@pytest.mark.parametrize("codec", CODECS)
def test_build_output_is_read_by_kafka_python(codec: int) -> None:
    batch = _sample(codec, producer_id=9, producer_epoch=1, base_sequence=3)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == [
        tuple(r) for r in iter_records(batch)
    ]


def test_empty_batch_round_trips() -> None:
    batch = build_batch([], base_offset=42, last_offset_delta=3)
    header = validate_batch(batch)
    assert (header.record_count, header.last_offset, header.base_timestamp) == (0, 45, -1)
    assert list(iter_records(batch)) == []


def test_delete_horizon_is_stored_as_base_timestamp() -> None:
    batch = build_batch([Record(0, 5000, b"k", None)], delete_horizon_ms=9000)
    header = validate_batch(batch)
    assert header.has_delete_horizon and header.base_timestamp == 9000
    assert next(iter_records(batch)).timestamp == 5000


def test_log_append_time_batch_reports_max_timestamp_for_every_record() -> None:
    records = [Record(0, 1, None, b"a"), Record(1, 2, None, b"b")]
    batch = build_batch(records, timestamp_type=LOG_APPEND_TIME, max_timestamp=777)
    assert [r.timestamp for r in iter_records(batch)] == [777, 777]


def test_compressed_records_section_equals_uncompressed_encoding() -> None:
    plain = _sample(0)
    for codec in CODECS[1:]:
        _, section = records_section(_sample(codec))
        assert section == plain[HEADER_SIZE:]


def test_encode_records_section_matches_build_batch_body() -> None:
    records = [Record(10, 100, b"k", b"v", [("a", None)]), Record(11, 90, None, None)]
    assert build_batch(records, base_offset=10)[HEADER_SIZE:] == encode_records_section(records, 10, 100)


def test_decode_batch_returns_header_and_records() -> None:
    header, records = decode_batch(_sample(2))
    assert header.record_count == len(records) == 4


def test_build_rejects_non_bytes_value() -> None:
    with pytest.raises(EncodeError):
        build_batch([Record(0, 0, None, "text")])  # type: ignore[arg-type]


def test_build_rejects_offset_delta_beyond_int32() -> None:
    with pytest.raises(EncodeError):
        build_batch([Record(2**31, 0, None, b"")], base_offset=0)


def test_build_rejects_out_of_range_header_field() -> None:
    with pytest.raises(EncodeError):
        build_batch([Record(0, 0, None, b"")], producer_epoch=2**15)


def test_build_rejects_unknown_codec() -> None:
    with pytest.raises(EncodeError):
        build_batch([Record(0, 0, None, b"")], codec=5)


# --- control records ----------------------------------------------------------------------


@pytest.mark.parametrize(("commit", "control_type"), [(True, CONTROL_COMMIT), (False, CONTROL_ABORT)])
def test_end_txn_batch_carries_marker(commit: bool, control_type: int) -> None:
    batch = build_end_txn_batch(
        commit, producer_id=77, producer_epoch=3, coordinator_epoch=12, timestamp=1000, base_offset=50
    )
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, -1)
    (record,) = iter_records(batch)
    assert record.offset == 50
    assert parse_control_key(record.key) == control_type
    assert parse_end_txn_value(record.value) == 12


def test_end_txn_batch_is_read_by_kafka_python_as_control() -> None:
    batch = build_end_txn_batch(True, producer_id=1, producer_epoch=0, coordinator_epoch=4, timestamp=1)
    theirs = DefaultRecordBatch(batch)
    assert theirs.is_control_batch
    (record,) = list(theirs)
    assert record.commit


def test_short_control_key_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        parse_control_key(b"\x00")


# --- CRC and in-place patches -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_flipping_any_bit_in_crc_region_is_corrupt(codec: int) -> None:
    # Exhaustive over the CRC field and every byte it covers (attributes .. end).
    batch = _sample(codec)
    validate_batch(batch)
    for bit in range(17 * 8, len(batch) * 8):
        mutated = bytearray(batch)
        mutated[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptRecordError):
            validate_batch(mutated)


def test_flipped_bit_in_record_value_is_reported_as_crc_mismatch() -> None:
    batch = bytearray(_sample(0))
    batch[-5] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(batch)


@given(base_offset=INT64)
def test_patch_base_offset_keeps_crc_valid(base_offset: int) -> None:
    batch = bytearray(_sample(1))
    patch_base_offset(batch, 0, base_offset)
    header = validate_batch(batch)
    assert header.base_offset == base_offset
    assert [r.offset for r in iter_records(batch)] == [base_offset + i for i in range(4)]


@given(epoch=INT32)
def test_patch_partition_leader_epoch_keeps_crc_valid(epoch: int) -> None:
    batch = bytearray(_sample(0))
    patch_partition_leader_epoch(batch, 0, epoch)
    assert validate_batch(batch).partition_leader_epoch == epoch


def test_patches_work_through_memoryview_at_an_offset() -> None:
    log = bytearray(_sample(0) + _sample(4))
    second = len(_sample(0))
    view = memoryview(log)
    patch_base_offset(view, second, 1000)
    patch_partition_leader_epoch(view, second, 7)
    header = validate_batch(log, second)
    assert (header.base_offset, header.partition_leader_epoch) == (1000, 7)
    assert validate_batch(log, 0).base_offset == 100


def test_patch_refuses_legacy_magic() -> None:
    batch = bytearray(_sample(0))
    batch[16] = 1
    with pytest.raises(CorruptRecordError):
        patch_partition_leader_epoch(batch, 0, 1)


def test_patch_refuses_out_of_range_value() -> None:
    with pytest.raises(EncodeError):
        patch_partition_leader_epoch(bytearray(_sample(0)), 0, 2**31)


def test_set_max_timestamp_switches_to_log_append_time_and_re_crcs() -> None:
    batch = bytearray(_sample(3))
    set_max_timestamp(batch, 0, LOG_APPEND_TIME, 123456)
    header = validate_batch(batch)
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == 123456
    assert header.codec == 3
    assert {r.timestamp for r in iter_records(batch)} == {123456}


# --- walking a log ------------------------------------------------------------------------


def test_iter_batches_walks_a_concatenation() -> None:
    parts = [_sample(0), _sample(1), _sample(4)]
    log = b"".join(parts)
    walker = iter_batches(log)
    positions = [pos for pos, _ in walker]
    assert positions == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert (walker.valid_end, walker.truncated) == (len(log), False)


@given(cut=st.integers(min_value=1))
def test_iter_batches_stops_cleanly_at_truncated_tail(cut: int) -> None:
    first, second = _sample(0), _sample(2)
    log = first + second
    keep = len(first) + cut % len(second)  # somewhere inside the second batch
    walker = iter_batches(log[:keep])
    assert [pos for pos, _ in walker] == [0]
    assert walker.valid_end == len(first)
    assert walker.truncated is (keep > len(first))


def test_iter_batches_reports_valid_end_for_a_torn_log() -> None:
    log = _sample(0) + _sample(0)[:30]
    walker = iter_batches(log)
    list(walker)
    assert walker.valid_end == len(_sample(0))
    assert walker.truncated


def test_iter_batches_raises_on_impossible_length() -> None:
    log = bytearray(_sample(0) * 2)
    struct.pack_into(">i", log, len(_sample(0)) + 8, 10)
    walker = iter_batches(log)
    with pytest.raises(CorruptRecordError):
        list(walker)
    assert walker.valid_end == len(_sample(0))


def test_iter_batches_raises_on_legacy_magic() -> None:
    log = bytearray(_sample(0))
    log[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batches(log))


def test_iter_batches_reads_headers_without_the_records() -> None:
    # A header walk must not care what the records section holds.
    batch = bytearray(_sample(0))
    batch[HEADER_SIZE:] = b"\xff" * (len(batch) - HEADER_SIZE)
    ((_, header),) = list(iter_batches(batch))
    assert header.record_count == 4


# --- structural validation ----------------------------------------------------------------


def _with_crc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def test_validate_rejects_wrong_magic() -> None:
    batch = bytearray(_sample(0))
    batch[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(batch)


def test_validate_rejects_length_below_minimum() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(CorruptRecordError, match="minimum"):
        validate_batch(batch)


def test_validate_rejects_length_past_buffer() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 8, len(batch))
    with pytest.raises(CorruptRecordError, match="past the end"):
        validate_batch(batch)


def test_validate_rejects_negative_record_count() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 57, -1)
    with pytest.raises(CorruptRecordError, match="negative"):
        validate_batch(_with_crc(batch))


def test_validate_rejects_record_count_that_cannot_fit() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        validate_batch(_with_crc(batch))


def test_validate_rejects_unknown_codec() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">h", batch, 21, 6)
    with pytest.raises(CorruptRecordError, match="codec"):
        validate_batch(_with_crc(batch))


def test_validate_rejects_short_buffer() -> None:
    with pytest.raises(CorruptRecordError):
        validate_batch(_sample(0)[:60])


def test_records_with_trailing_bytes_are_corrupt() -> None:
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 57, 3)  # claim one record fewer than present
    with pytest.raises(CorruptRecordError, match="left after"):
        list(iter_records(batch))


def test_record_length_disagreeing_with_fields_is_corrupt() -> None:
    batch = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    batch[HEADER_SIZE] += 2  # record length varint: 1 more (zigzag), fields unchanged
    batch += b"\x00"
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


def test_non_utf8_header_key_is_corrupt() -> None:
    batch = bytearray(build_batch([Record(0, 0, None, None, [("k", None)])]))
    batch[batch.index(b"k", HEADER_SIZE)] = 0xFF
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        list(iter_records(batch))


# --- hostile input ------------------------------------------------------------------------


@settings(max_examples=200)
@given(garbage=st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(garbage: bytes) -> None:
    _readers(garbage)


@settings(max_examples=150)
@given(garbage=st.binary(min_size=44, max_size=200))
def test_random_bytes_with_magic_2_raise_only_decode_error(garbage: bytes) -> None:
    buf = bytearray(garbage)
    buf[16] = 2
    _readers(bytes(buf))


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60)
@given(cut=st.integers(min_value=0))
def test_truncated_batch_raises_only_decode_error(codec: int, cut: int) -> None:
    batch = _sample(codec)
    _readers(batch[: cut % len(batch)])
    with pytest.raises(DecodeError):
        list(iter_records(batch[: cut % len(batch)]))


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60)
@given(
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4),
    fix_crc=st.booleans(),
)
def test_mutated_batch_raises_only_decode_error(
    codec: int, edits: list[tuple[int, int]], fix_crc: bool
) -> None:
    batch = bytearray(_sample(codec))
    for where, byte in edits:
        batch[where % len(batch)] = byte
    if fix_crc:
        # Get past the CRC so the record parser sees the damage.
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    _readers(bytes(batch))


@pytest.mark.parametrize(
    ("offset", "fmt", "value"),
    [
        (8, ">i", 2**31 - 1),  # batchLength
        (8, ">i", -(2**31)),
        (57, ">i", 2**31 - 1),  # record count
        (57, ">i", -1),
        (23, ">i", 2**31 - 1),  # lastOffsetDelta
    ],
)
@pytest.mark.parametrize("codec", [0, 1])
def test_huge_header_length_fields_raise_decode_error(codec: int, offset: int, fmt: str, value: int) -> None:
    batch = bytearray(_sample(codec))
    struct.pack_into(fmt, batch, offset, value)
    _readers(bytes(_with_crc(batch)))


@pytest.mark.parametrize(
    "varint", [b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01"]
)
def test_huge_record_length_varint_is_a_decode_error(varint: bytes) -> None:
    batch = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    body = varint + bytes(batch[HEADER_SIZE + 1 :])
    batch[HEADER_SIZE:] = body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(DecodeError):
        list(iter_records(_with_crc(batch)))


@pytest.mark.parametrize("field", ["key", "value", "header key", "header value", "header count"])
def test_huge_inner_length_varint_is_a_decode_error(field: str) -> None:
    # Rebuild a one-record batch by hand with one length replaced by ~2^31.
    huge = b"\xfe\xff\xff\xff\x0f"
    one = b"\x02"  # zigzag(1)
    parts = {
        "key": huge if field == "key" else one + b"k",
        "value": huge if field == "value" else one + b"v",
        "header count": huge if field == "header count" else one,
        "header key": huge if field == "header key" else one + b"h",
        "header value": huge if field == "header value" else one + b"x",
    }
    body = b"\x00\x00\x00" + parts["key"] + parts["value"] + parts["header count"]
    if field != "header count":
        body += parts["header key"] + parts["header value"]
    record = bytes([len(body) * 2]) + body
    batch = bytearray(build_batch([Record(0, 0, None, None)]))
    batch[HEADER_SIZE:] = record
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(DecodeError):
        list(iter_records(_with_crc(batch)))


def test_decompression_bomb_is_a_decode_error() -> None:
    batch = build_batch([Record(0, 0, None, bytes(2_000_000))], codec=4)
    assert len(batch) < 2000
    with pytest.raises(DecodeError):
        list(iter_records(batch, max_output=1_000_000))


@pytest.mark.parametrize("value_size", [10, 100, 9_000])
def test_max_record_timestamp_delta_is_the_largest_delta_in_the_section(value_size):
    deltas = [0, 5, 70_000, 3]  # from the first record, which sets baseTimestamp; one- and multi-byte varints
    records = [Record(i, 1_000 + d, b"k", b"v" * value_size, []) for i, d in enumerate(deltas)]
    header, section = records_section(build_batch(records, max_timestamp=1_000))
    assert max_record_timestamp_delta(section, header.record_count) == 70_000


def test_max_record_timestamp_delta_refuses_a_section_shorter_than_its_count():
    _, section = records_section(build_batch([Record(0, 1_000, None, b"v", [])]))
    with pytest.raises(CorruptRecordError):
        max_record_timestamp_delta(section, 2)


_DELTAS = st.one_of(st.integers(0, 60), st.integers(-60, 60), st.integers(64, 8_191), st.integers(-8_192, 8_191),
                    st.sampled_from([0, 63, 64, 70_000]))


@settings(max_examples=150, deadline=None)
@given(count=st.sampled_from([1, 2, 17, 63, 64, 65, 300]), value_size=st.sampled_from([0, 10, 100, 2_000]),
       same_size=st.booleans(), deltas=st.lists(_DELTAS, min_size=300, max_size=300),
       sizes=st.lists(st.integers(0, 8), min_size=300, max_size=300), as_view=st.booleans(),
       claim_error=st.one_of(st.none(), st.just(0), st.integers(-70, 70)))
def test_max_record_timestamp_delta_matches_the_records_timestamps(count, value_size, same_size, deltas, sizes,
                                                                   as_view, claim_error):
    """Runs of same-sized records are read by column; whatever the shapes and whatever the header
    claims (right, under- or overstated, absent), the answer is the records' own."""
    base = 1_700_000_000_000
    records = [Record(i, base + (deltas[i] if i else 0), None, b"v" * (value_size + (0 if same_size else sizes[i])))
               for i in range(count)]
    header, section = records_section(build_batch(records, base_timestamp=base))
    section = memoryview(section) if as_view else bytes(section)
    largest = max(r.timestamp for r in records) - base
    claimed = -1 if claim_error is None else largest + claim_error
    assert max_record_timestamp_delta(section, header.record_count, claimed) == largest


@pytest.mark.parametrize("claimed", [9, 3, 20, -1], ids=["right", "understated", "overstated", "none"])
def test_max_record_timestamp_delta_checks_the_header_claim_against_the_records(claimed):
    deltas = [0, 3, 9, 3] * 16  # one run of 64 same-sized records, read by column
    records = [Record(i, 1_000 + d, None, b"v" * 100) for i, d in enumerate(deltas)]
    header, section = records_section(build_batch(records, base_timestamp=1_000))
    assert max_record_timestamp_delta(section, header.record_count, claimed) == 9


@pytest.mark.parametrize("late", [[500, 7_000, 64], [500, -300, 64]], ids=["later", "one-earlier"])
def test_max_record_timestamp_delta_reads_two_byte_deltas_of_a_busy_producer(late):
    """Records that waited 64 ms to 8 s in the producer carry two-byte deltas; runs of them are
    read by column too (an earlier record, a negative delta, is read one by one)."""
    deltas = [0] + [100 + i for i in range(40)] + late + [200 + i for i in range(40)]
    records = [Record(i, 1_000 + d, None, b"v" * 100) for i, d in enumerate(deltas)]
    header, section = records_section(build_batch(records, base_timestamp=1_000))
    assert max_record_timestamp_delta(section, header.record_count) == max(deltas)


def test_max_record_timestamp_delta_refuses_a_run_cut_short_by_the_section_end():
    records = [Record(i, 1_000, None, b"v" * 10) for i in range(100)]
    header, section = records_section(build_batch(records, base_timestamp=1_000))
    with pytest.raises(CorruptRecordError):
        max_record_timestamp_delta(bytes(section)[:-5], header.record_count)


# --- the records' layout: walked by max_record_timestamp_delta on the produce path, by check_record_layout alone ---

LAYOUT_WALKS = [pytest.param(max_record_timestamp_delta, id="with-timestamps"),
                pytest.param(check_record_layout, id="layout-only")]


def _section(count: int, value_size: int = 10) -> bytes:
    records = [Record(i, 1_000, None, b"v" * value_size) for i in range(count)]
    return records_section(build_batch(records, base_timestamp=1_000))[1]


@pytest.mark.parametrize("walk", LAYOUT_WALKS)
@pytest.mark.parametrize("count", [1, 100], ids=["one-by-one", "by-column"])
def test_a_record_walk_refuses_more_records_than_the_count(walk, count):
    with pytest.raises(RecordLayoutError, match="bytes left after the last"):
        walk(_section(count + 1), count)


@pytest.mark.parametrize("walk", LAYOUT_WALKS)
@pytest.mark.parametrize("extra", [b"\x00", b"\x02\x00\x00"], ids=["one-byte", "three-bytes"])
def test_a_record_walk_refuses_bytes_after_the_last_record(walk, extra):
    with pytest.raises(RecordLayoutError, match=f"{len(extra)} bytes left"):
        walk(_section(3) + extra, 3)


@pytest.mark.parametrize("walk", LAYOUT_WALKS)
@pytest.mark.parametrize("count", [2, 100], ids=["one-by-one", "by-column"])
def test_a_record_walk_refuses_fewer_records_than_the_count(walk, count):
    with pytest.raises(RecordLayoutError, match="ends before its record count"):
        walk(_section(count), count + 1)


@pytest.mark.parametrize("walk", LAYOUT_WALKS)
@pytest.mark.parametrize("length", [b"\xff\xff\xff\xff\xff\x01", b"\x09", b"\xc8\x01"],
                         ids=["over-long-varint", "negative", "past-the-end"])
def test_a_record_walk_refuses_a_record_length_outside_the_section(walk, length):
    """The first record's length prefix replaced: six varint bytes (Kafka allows five), -5, or 100 bytes."""
    section = _section(1)
    with pytest.raises(RecordLayoutError):
        walk(length + section[1:], 1)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 100, 200, 9_000]), min_size=1, max_size=300), as_view=st.booleans())
def test_check_record_layout_accepts_every_well_formed_section(sizes, as_view):
    """Runs of same-sized records (hopped over by column) mixed with others, one- to three-byte length prefixes."""
    records = [Record(i, 1_000, None, b"v" * size) for i, size in enumerate(sizes)]
    header, section = records_section(build_batch(records))
    check_record_layout(memoryview(section) if as_view else bytes(section), header.record_count)


def test_validate_batch_checks_the_crc_before_the_record_count():
    """A damaged batch is CORRUPT_MESSAGE whatever its count says; the count is checked only in an intact one."""
    batch = bytearray(_sample(0))
    struct.pack_into(">i", batch, 57, 1_000_000)
    with pytest.raises(CorruptRecordError, match="CRC") as refused:
        validate_batch(batch)
    assert not isinstance(refused.value, RecordLayoutError)
    with pytest.raises(RecordLayoutError, match="cannot fit"):
        validate_batch(_with_crc(batch))
