"""Writing COMMIT/ABORT markers into the partitions this broker leads: what Kafka's WriteTxnMarkers does on a
partition leader, for the transaction coordinator of this broker and for WriteTxnMarkers requests alike."""

from __future__ import annotations

import logging

from kbroker.cluster.partition import ReplicationError
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from kbroker.log.errors import LogError
from wire.errors import ErrorCode
from wire.records import build_end_txn_batch

log = logging.getLogger(__name__)
ACKS_ALL = -1  # Kafka appends markers with requiredAcks -1


def write_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                 commit: bool, now_ms: int) -> tuple[ErrorCode, int]:
    """Append one marker as the partition's leader: (the answer, the offset after the marker, which the high
    watermark must pass for the marker to count in a cluster; -1 if not written). A marker in `__consumer_offsets`
    also settles the producer's transactional offset commits there (Kafka's scheduleHandleTxnCompletion)."""
    leader = broker.replicas.get(topic, partition)
    if leader is None or broker.partition_log(topic, partition) is None:
        return broker.partition_error(topic, partition), -1
    batch = build_end_txn_batch(commit, producer_id=producer_id, producer_epoch=producer_epoch,
                                coordinator_epoch=coordinator_epoch, timestamp=now_ms)
    try:
        info = leader.append_as_leader(batch, now_ms, ACKS_ALL, coordinator=True)
    except (ReplicationError, LogError) as error:
        return error.error_code, -1
    except OSError as error:
        plog = broker.partition_log(topic, partition)
        failure = broker.logs.io_error(plog, error, f"appending a transaction marker to {topic}-{partition}")
        return failure.error_code, -1
    broker.notify_appended(topic, partition)
    if topic == OFFSETS_TOPIC:
        broker.coordinator.offsets.complete_transaction(partition, producer_id, commit)
    return ErrorCode.NONE, info.last_offset + 1
