"""A partition's log on its way to another log dir of the same broker (AlterReplicaLogDirs, KIP-113).

As Kafka does, the copy is a second log, the "future" log, in a `<topic>-<partition>.<uuid>-future` directory of
the destination dir. It is filled the way a follower fills its log (Kafka's ReplicaAlterLogDirsThread, which
fetches from the local log): whole batches appended with their offsets, so leader epochs, producer state and
aborted transactions are rebuilt from the batches themselves, while the current log goes on serving. When the
copy reaches the current log's end the log manager swaps them (LogManager.replace_current_with_future).

The current log may be truncated meanwhile (a follower meeting a new leader): the copy is then cut where the two
agree, by comparing leader epochs as a follower does with its leader (KIP-101/279).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbroker.log.leader_epoch_cache import UNDEFINED_EPOCH
from kbroker.log.partition_log import PartitionLog

__all__ = ["FUTURE_SUFFIX", "FutureLog", "copy_step", "truncation_offset"]

FUTURE_SUFFIX = "-future"


@dataclass
class FutureLog:
    """The copy of one partition's log being built in `log_dir`."""

    log: PartitionLog
    log_dir: Path
    truncations_seen: int  # the current log's truncation count the copy is known to agree with


def truncation_offset(log: PartitionLog, diverging_epoch: int, diverging_end: int) -> int:
    """Where to cut `log` when the log it copies says our `diverging_epoch` ends at `diverging_end` there: the
    end of the same epoch locally, or of the largest local epoch below it, never past the other log's end."""
    local_epoch, local_end = log.end_offset_for_epoch(diverging_epoch)
    if local_epoch == UNDEFINED_EPOCH or local_end < 0:
        return min(diverging_end, log.log_end_offset)
    return min(diverging_end, local_end, log.log_end_offset)


def _follow_truncation(current: PartitionLog, future: PartitionLog) -> None:
    """Cut the copy back to where it agrees with the current log, epoch by epoch."""
    for _ in range(len(future.leader_epoch_cache.entries) + 1):
        latest = future.leader_epoch_cache.latest_epoch
        if latest == UNDEFINED_EPOCH:
            cut = min(future.log_end_offset, current.log_end_offset)
        else:
            epoch, end = current.end_offset_for_epoch(latest)
            cut = -1 if epoch == UNDEFINED_EPOCH else truncation_offset(future, epoch, end)
        if cut < current.log_start_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        if not future.truncate_to(cut):
            return


def copy_step(current: PartitionLog, future: FutureLog, max_bytes: int) -> bool:
    """Copy up to `max_bytes` more of `current` into the future log (at least one batch); True once the copy has
    everything the current log has, so the two may be swapped."""
    copy = future.log
    if future.truncations_seen != current.truncation_count:
        _follow_truncation(current, copy)
        future.truncations_seen = current.truncation_count
    start = current.log_start_offset
    if not start <= copy.log_end_offset <= current.log_end_offset:  # retention went past the copy
        copy.truncate_fully_and_start_at(start)
    records = current.read(copy.log_end_offset, max_bytes)
    if records is not None:
        data = records.read_bytes()
        first = int.from_bytes(data[:8], "big")  # every batch format starts with its base offset
        if first < copy.log_end_offset == copy.log_start_offset:
            # the log start falls inside a batch (DeleteRecords): the copy starts at that batch, as Kafka's does
            copy.truncate_fully_and_start_at(first)
        copy.append_as_follower(data)
    copy.update_high_watermark(current.high_watermark)
    if copy.log_start_offset < start:
        copy.delete_records_before(min(start, copy.high_watermark))
    return copy.log_end_offset == current.log_end_offset
