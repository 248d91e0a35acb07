"""Batches written by real clients, captured by the tests themselves (no checked-in blobs).

(a) kafka-python's own batch builders (v2 DefaultRecordBatchBuilder and the v0/v1 legacy
    builder, both through MemoryRecordsBuilder), for every codec each format allows.
(b) librdkafka (confluent-kafka) producing to its built-in mock cluster; the stored
    batches are fetched back raw with a hand-written Fetch v4 over a plain socket.

For each captured batch we check: the CRC validates, decoded keys/values/headers/
timestamps equal what was produced, a flipped bit is reported as a CRC failure, and
re-encoding the parsed records with build_batch / build_message_set and the same header
parameters reproduces the original. What "reproduces" means:

* codec none: the whole batch, byte for byte.
* compressed: every header field except batchLength and CRC (which depend on the
  compressed bytes) is identical, and the decompressed records section (v2) or inner
  message set (v0/v1) is byte-identical. Compressor output itself is only compared
  where both sides run the same deterministic algorithm with the same settings:
  librdkafka's gzip (zlib level 6, mtime 0), lz4 (frame, independent 64 KiB blocks, no
  content size) and zstd (level 3, streamed, no content size). librdkafka writes raw
  snappy while we write xerial framing (like the Java client), and kafka-python uses
  gzip level 9 with a timestamp and lz4/zstd frames with a content size, so those differ.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from wire.exceptions import CorruptRecordError
from wire.legacy import (
    NO_TIMESTAMP,
    build_message_set,
    inner_message_set,
    iter_message_set_records,
    iter_messages,
    read_message_header,
    validate_message,
)
from wire.records import (
    BatchHeader,
    Record,
    build_batch,
    decode_records_section,
    iter_batches,
    records_section,
    validate_batch,
)

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# (key, value, headers, timestamp). Values repeat so every client really compresses;
# timestamps are not monotonic so deltas go negative and maxTimestamp != last.
PRODUCED: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (b"key-0", b"value zero " * 30, [("trace", b"abc"), ("empty", None)], 1_700_000_000_000),
    (None, b"value one " * 30, [], 1_700_000_000_050),
    (b"key-2", b"", [("ключ", b"\x00\xff")], 1_700_000_000_020),
    (b"key-3", None, [("a", b""), ("a", b"dup")], 1_699_999_999_990),
    (b"key-4", b"value four " * 30, [], 1_700_000_000_049),
]


def _expected(base_offset: int = 0, *, with_headers: bool = True, timestamps: bool = True) -> list[Record]:
    return [
        Record(
            base_offset + i,
            ts if timestamps else NO_TIMESTAMP,
            key,
            value,
            list(headers) if with_headers else [],
        )
        for i, (key, value, headers, ts) in enumerate(PRODUCED)
    ]


def _without_size_and_crc(header: BatchHeader) -> BatchHeader:
    return header._replace(batch_length=0, crc=0)


def _rebuild_v2(buf: bytes, pos: int) -> tuple[bytes, bytes]:
    """Re-encode the batch at `pos` from its parsed records; returns (original, rebuilt).

    Asserts the always-true part: header fields and decompressed records section.
    """
    header, section = records_section(buf, pos)
    records = list(decode_records_section(section, header))
    rebuilt = build_batch(
        records,
        base_offset=header.base_offset,
        codec=header.codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        timestamp_type=header.timestamp_type,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        last_offset_delta=header.last_offset_delta,
    )
    validate_batch(rebuilt)
    rebuilt_header, rebuilt_section = records_section(rebuilt)
    assert _without_size_and_crc(rebuilt_header) == _without_size_and_crc(header)
    assert rebuilt_section == section
    return bytes(buf[pos : pos + header.size]), rebuilt


def _assert_bit_flip_is_crc_failure(batch: bytes) -> None:
    mutated = bytearray(batch)
    mutated[len(mutated) // 2 + 40] ^= 0x04  # inside the records section
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(mutated)


# --- (a) kafka-python ---------------------------------------------------------------------


def _kafka_python_v2(codec: int) -> bytes:
    builder = MemoryRecordsBuilder(
        2, codec, 1 << 20, offset=0, producer_id=4242, producer_epoch=3, base_sequence=17
    )
    for key, value, headers, ts in PRODUCED:
        assert builder.append(ts, key, value, headers) is not None
    builder.close()
    return bytes(builder.buffer())


def _kafka_python_legacy(magic: int, codec: int) -> bytes:
    builder = MemoryRecordsBuilder(magic, codec, 1 << 20)
    for key, value, _, ts in PRODUCED:
        assert builder.append(ts, key, value) is not None
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_kafka_python_v2_batch_decodes_to_what_was_appended(codec: int) -> None:
    batch = _kafka_python_v2(codec)
    header = validate_batch(batch)
    assert header.codec == codec  # kafka-python did compress (it skips when useless)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
    _, section = records_section(batch)
    assert list(decode_records_section(section, header)) == _expected()


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_kafka_python_v2_batch_re_encodes(codec: int) -> None:
    original, rebuilt = _rebuild_v2(_kafka_python_v2(codec), 0)
    if codec == 0:
        assert rebuilt == original


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_kafka_python_v2_bit_flip_is_crc_failure(codec: int) -> None:
    _assert_bit_flip_is_crc_failure(_kafka_python_v2(codec))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=CODEC_NAMES.get)
def test_kafka_python_legacy_set_decodes_to_what_was_appended(magic: int, codec: int, xxhash_shim) -> None:
    message_set = _kafka_python_legacy(magic, codec)
    entries = list(iter_messages(message_set))
    assert {h.codec for _, h in entries} == {codec}
    for pos, header in entries:
        assert validate_message(message_set, pos).magic == header.magic == magic
    expected = _expected(with_headers=False, timestamps=magic == 1)
    assert list(iter_message_set_records(message_set)) == expected


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=CODEC_NAMES.get)
def test_kafka_python_legacy_set_re_encodes(magic: int, codec: int, xxhash_shim) -> None:
    message_set = _kafka_python_legacy(magic, codec)
    records = list(iter_message_set_records(message_set))
    if codec == 0:
        assert build_message_set(records, magic, 0) == message_set
        return
    # Compressed: one wrapper; its inner set must re-encode byte for byte. kafka-python
    # writes inner offsets 0..n-1 (relative in v1, absolute-from-0 in v0), which is what
    # an uncompressed set of these records (offsets 0..n-1) holds.
    header, inner = inner_message_set(message_set)
    assert build_message_set(records, magic, 0) == inner
    rebuilt = build_message_set(records, magic, codec)
    rebuilt_header, rebuilt_inner = inner_message_set(rebuilt)
    assert (rebuilt_header.magic, rebuilt_header.codec) == (header.magic, header.codec)
    assert rebuilt_inner == inner


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=CODEC_NAMES.get)
def test_kafka_python_legacy_bit_flip_is_crc_failure(magic: int, codec: int, xxhash_shim) -> None:
    message = bytearray(_kafka_python_legacy(magic, codec))
    size = read_message_header(message).size
    message[size - 3] ^= 0x20
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_message(message)


# --- (b) librdkafka via its mock cluster --------------------------------------------------

TOPIC = "captured"


def _fetch_v4(host: str, port: int, topic: str, partition: int) -> bytes:
    """Send one Fetch v4 (non-flexible) and return the partition's raw record set."""

    def string(s: str) -> bytes:
        raw = s.encode()
        return struct.pack(">h", len(raw)) + raw

    body = (
        struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)  # replica, max wait, min/max bytes, isolation
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iqi", partition, 0, 1 << 20)  # partition, fetch offset, max bytes
    )
    request = struct.pack(">hhi", 1, 4, 99) + string("wire-tests") + body
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        stream = sock.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        response = stream.read(size)
    assert len(response) == size
    correlation_id, _throttle, n_topics = struct.unpack_from(">iii", response, 0)
    assert (correlation_id, n_topics) == (99, 1)
    pos = 12
    (name_len,) = struct.unpack_from(">h", response, pos)
    pos += 2 + name_len
    (n_partitions,) = struct.unpack_from(">i", response, pos)
    assert n_partitions == 1
    pos += 4
    got_partition, error, _hwm, _lso, n_aborted = struct.unpack_from(">ihqqi", response, pos)
    assert (got_partition, error) == (partition, 0)
    pos += 26 + 16 * max(n_aborted, 0)
    (records_len,) = struct.unpack_from(">i", response, pos)
    return response[pos + 4 : pos + 4 + records_len]


def _librdkafka_capture(codec_name: str) -> bytes:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer(
        {
            "test.mock.num.brokers": 1,  # librdkafka starts a mock cluster on 127.0.0.1
            "compression.type": codec_name,
            "linger.ms": 200,
            "enable.idempotence": True,  # real producer id / epoch / sequence in the header
            "log_level": 4,
        }
    )
    metadata = producer.list_topics(timeout=10)
    (broker,) = metadata.brokers.values()
    for key, value, headers, ts in PRODUCED:
        producer.produce(TOPIC, value=value, key=key, headers=headers, timestamp=ts, partition=0)
    assert producer.flush(10) == 0
    return _fetch_v4(broker.host, broker.port, TOPIC, 0)


@pytest.fixture(scope="module")
def librdkafka_sets() -> Iterator[dict[int, bytes]]:
    yield {codec: _librdkafka_capture(name) for codec, name in CODEC_NAMES.items()}


def _batches(record_set: bytes) -> list[tuple[int, BatchHeader]]:
    walker = iter_batches(record_set)
    batches = list(walker)
    assert batches and not walker.truncated and walker.valid_end == len(record_set)
    return batches


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_librdkafka_batch_decodes_to_what_was_produced(codec: int, librdkafka_sets) -> None:
    record_set = librdkafka_sets[codec]
    decoded = []
    for pos, header in _batches(record_set):
        assert validate_batch(record_set, pos) == header
        assert header.codec == codec
        assert header.producer_id >= 0 and header.base_sequence >= 0
        _, section = records_section(record_set, pos)
        decoded += decode_records_section(section, header)
    assert decoded == _expected()


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_librdkafka_batch_re_encodes(codec: int, librdkafka_sets) -> None:
    record_set = librdkafka_sets[codec]
    for pos, _ in _batches(record_set):
        original, rebuilt = _rebuild_v2(record_set, pos)
        if codec != 2:  # raw snappy (librdkafka) vs xerial (ours, like Java): see module doc
            assert rebuilt == original


@pytest.mark.parametrize("codec", list(CODEC_NAMES), ids=CODEC_NAMES.get)
def test_librdkafka_bit_flip_is_crc_failure(codec: int, librdkafka_sets) -> None:
    record_set = librdkafka_sets[codec]
    pos, header = _batches(record_set)[0]
    _assert_bit_flip_is_crc_failure(record_set[pos : pos + header.size])
