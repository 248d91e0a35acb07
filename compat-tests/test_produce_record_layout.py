"""Produce: the records inside a batch are checked against its header, in raw Produce requests.

Each batch here is intact (its CRC holds) but its records disagree with its header: more or fewer records
than its count, bytes after the last record, a record length outside the batch. Kafka's LogValidator walks
the records of every produced batch (decompressed when compressed) and refuses such a batch with
INVALID_RECORD; nothing of the request is appended. The batches are forged with the project's own codecs
and sent as the same bytes to any broker.
"""

from __future__ import annotations

import struct
import uuid

import crc32c
import pytest

from wire.compression import compress
from wire.errors import ErrorCode
from wire.records import HEADER_SIZE, LOG_OVERHEAD, Record, build_batch, encode_records_section

import differential as wd

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Produce: records inside a batch are checked")]

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
CODECS = [pytest.param(0, id="none"), pytest.param(1, id="gzip")]


def _section(count: int) -> bytes:
    """The uncompressed records of `count` small keyed records."""
    records = [Record(i, wd.TIMESTAMP, b"k%d" % i, b"v" * 20) for i in range(count)]
    return encode_records_section(records, 0, wd.TIMESTAMP)


def _forged(section: bytes, record_count: int, codec: int) -> bytes:
    """An intact batch (right CRC, lastOffsetDelta = count - 1) whose header claims `record_count` records."""
    body = compress(codec, section) if codec else section
    batch = bytearray(HEADER_SIZE) + body
    BATCH_HEADER.pack_into(batch, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, codec, record_count - 1,
                           wd.TIMESTAMP, wd.TIMESTAMP, -1, -1, -1, record_count)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)


GOOD = build_batch([Record(0, wd.TIMESTAMP, b"k", b"v")])


@pytest.fixture(scope="module")
def conn(bootstrap: str):
    connection = wd.Connection(bootstrap)
    yield connection
    connection.close()


@pytest.fixture
def partition(conn: wd.Connection) -> wd.Ctx:
    """A fresh one-partition topic (as `ctx.key`) holding one good record."""
    topic = f"record-layout-{uuid.uuid4().hex[:10]}"
    ctx = wd.Ctx(conn, 9, topic)
    wd.create_topic(ctx, topic, 1)
    wd.wait_for(lambda: wd.produce(ctx, topic, GOOD) == 0, f"a first write to {topic}")
    return ctx


def _log_end_offset(ctx: wd.Ctx) -> int:
    request = wd.build("ListOffsetsRequest", 1, {"replica_id": -1, "topics": [
        {"name": ctx.key, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return ctx.conn.call(2, 1, request).topics[0].partitions[0].offset


def _produce_refused(ctx: wd.Ctx, records: bytes) -> int:
    """The error code of producing a good batch followed by `records`; the partition must be left as it was."""
    error = wd.produce(ctx, ctx.key, GOOD + records)
    assert _log_end_offset(ctx) == 1, "nothing of a refused request is appended"
    return error


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_holding_more_records_than_its_count_is_invalid_record(partition, codec):
    assert _produce_refused(partition, _forged(_section(2), 1, codec)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_holding_fewer_records_than_its_count_is_invalid_record(partition, codec):
    assert _produce_refused(partition, _forged(_section(2), 3, codec)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("extra", [b"\x00", b"\x00\x00\x00"], ids=["one-byte", "three-bytes"])
@pytest.mark.parametrize("codec", CODECS)
def test_bytes_after_the_last_record_are_invalid_record(partition, codec, extra):
    assert _produce_refused(partition, _forged(_section(1) + extra, 1, codec)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("length", [b"\xc8\x01", b"\x09"], ids=["past-the-batch-end", "negative"])
def test_a_record_length_outside_an_uncompressed_batch_is_invalid_record(partition, length):
    """The record's length prefix replaced by 100 (more than the batch holds) or -5."""
    section = length + _section(1)[1:]
    assert _produce_refused(partition, _forged(section, 1, 0)) == ErrorCode.INVALID_RECORD


def test_an_over_long_length_varint_in_a_compressed_batch_is_invalid_record(partition):
    """Six varint bytes where Kafka allows five. (Uncompressed, Kafka 3.9 and 4.4 answer UNKNOWN_SERVER_ERROR,
    kbroker INVALID_RECORD: docs/compatibility.md.)"""
    section = b"\xff" * 5 + b"\x01" + _section(1)
    assert _produce_refused(partition, _forged(section, 1, 1)) == ErrorCode.INVALID_RECORD
