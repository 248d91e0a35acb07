"""Shared builders for the storage tests: batches, decoded reads, raw index entries."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from kbroker.log import FileSlice, PartitionLog
from wire.compression import compress
from wire.records import HEADER_SIZE, LOG_OVERHEAD, Record, build_batch, decode_batch, iter_batches

INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes before the records


def batch(count: int = 1, *, timestamp: int = 1_000, value_size: int = 100, **kwargs: object) -> bytes:
    """A magic-2 batch of `count` records (offsets 0..count-1) all stamped `timestamp`."""
    records = [Record(i, timestamp, b"key-%d" % i, b"v" * value_size, ()) for i in range(count)]
    return build_batch(records, **kwargs)


def forged_batch(section: bytes, record_count: int, codec: int = 0, timestamp: int = 1_000) -> bytes:
    """A batch with a valid CRC whose header claims `record_count` records (lastOffsetDelta to match) over
    `section`, compressed with `codec`: what a producer that miscounts its records would send."""
    body = compress(codec, section) if codec else section
    out = bytearray(HEADER_SIZE) + body
    BATCH_HEADER.pack_into(out, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, codec, record_count - 1,
                           timestamp, timestamp, -1, -1, -1, record_count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in `data`."""
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def read_records(log: PartitionLog, offset: int = 0) -> list[Record]:
    """Every record from `offset` to the log end, through the real read path."""
    records: list[Record] = []
    while offset < log.log_end_offset:
        found = log.read(offset, 1 << 20)
        assert found is not None
        data = found.read_bytes()
        for position, _ in iter_batches(data):
            records += [r for r in decode_batch(data, position)[1] if r.offset >= offset]
        offset = batch_offsets(data)[-1][1] + 1
    return records


def slice_offsets(found: FileSlice | None) -> list[tuple[int, int]]:
    assert found is not None
    return batch_offsets(found.read_bytes())


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [INDEX_ENTRY.unpack_from(data, i) for i in range(0, len(data), INDEX_ENTRY.size)]


def time_index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [TIME_INDEX_ENTRY.unpack_from(data, i) for i in range(0, len(data), TIME_INDEX_ENTRY.size)]


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        value = f.read(1)[0]
        f.seek(position)
        f.write(bytes([value ^ 0xFF]))
