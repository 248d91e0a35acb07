"""Reading a coordinator's partition from its start, batch by batch: how the group and transaction coordinators
rebuild their state from `__consumer_offsets` and `__transaction_state`."""

from __future__ import annotations

from collections.abc import Iterator

from wire.records import BatchHeader, read_batch_header

REPLAY_CHUNK = 1 << 20
_BATCH_HEADER_SIZE = 61


def log_batches(plog) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """(buffer, position, header) of every whole batch from the log start to the log end; a batch the reader
    cannot step past ends the replay rather than loop."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, REPLAY_CHUNK)
        if chunk is None:
            return
        buf = chunk.read_bytes()
        pos = 0
        while pos + _BATCH_HEADER_SIZE <= len(buf):
            header = read_batch_header(buf, pos)
            if pos + header.size > len(buf):
                break
            yield buf, pos, header
            offset = header.base_offset + header.last_offset_delta + 1
            pos += header.size
        if pos == 0:
            return
