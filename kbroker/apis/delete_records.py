"""DeleteRecords (21): move partitions' log start offsets forward (the low watermark); in a cluster on the
leader, answered once its followers have moved theirs too."""

from __future__ import annotations

import asyncio

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.log.errors import OffsetOutOfRangeError
from wire import messages
from wire.errors import ErrorCode

Response = messages.DeleteRecordsResponse
INVALID_LOW_WATERMARK = -1  # what Kafka reports beside an error
FOLLOWER_CHECK_S = 0.05     # how often a cluster's DeleteRecords looks at its followers' log starts again


def _delete(broker: Broker, topic: str, partition: int, offset: int, now: int) -> tuple[int, int]:
    """(error code, low watermark) for one partition, with Kafka's errors: a missing partition,
    a compact-only topic (its records are not the client's to delete) and an offset beyond the
    high watermark (or below zero, other than -1 for "up to the high watermark")."""
    log = broker.partition_log(topic, partition)
    if log is None:
        return broker.partition_error(topic, partition), INVALID_LOW_WATERMARK
    if not log.config.deletes_by_retention:
        return ErrorCode.POLICY_VIOLATION, INVALID_LOW_WATERMARK
    try:
        return ErrorCode.NONE, log.delete_records_before(offset, now)
    except OffsetOutOfRangeError:
        return ErrorCode.OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK
    except OSError as error:  # deleting the segments below the new log start failed
        return broker.logs.io_error(log, error, f"deleting records of {topic}-{partition}").error_code, \
            INVALID_LOW_WATERMARK


def _delete_as_leader(broker: Broker, topic: str, partition: int, offset: int, now: int) -> tuple[int, int, object]:
    """A cluster member's `_delete`: only the partition's leader deletes (NOT_LEADER_OR_FOLLOWER elsewhere);
    with the partition, to wait on its followers."""
    found = broker.replicas.lookup(topic, partition)
    if isinstance(found, ErrorCode):
        return found, INVALID_LOW_WATERMARK, None
    if not found.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK, None
    error, low_watermark = _delete(broker, topic, partition, offset, now)
    return error, low_watermark, found


async def _wait_for_followers(broker: Broker, waiting: list[tuple[object, int, object]], timeout_ms: int) -> None:
    """Kafka's DelayedDeleteRecords: each result holds once the lowest log start offset among the partition's
    replicas on live brokers reaches the offset deleted before (followers learn it from their fetches);
    REQUEST_TIMED_OUT after the request's timeout, NOT_LEADER_OR_FOLLOWER if the leadership moves."""
    if not waiting:
        return
    metadata = broker.cluster.metadata
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    while waiting:
        pending = []
        for partition, required, result in waiting:
            moved = _moved(broker, partition)
            if moved:
                result.error_code, result.low_watermark = moved, INVALID_LOW_WATERMARK
                continue
            low_watermark = partition.low_watermark(lambda broker_id: metadata.alive_broker(broker_id) is not None)
            if low_watermark >= required:
                result.low_watermark = low_watermark
            else:
                pending.append((partition, required, result))
        if pending and loop.time() >= deadline:
            for _, _, result in pending:  # the low watermark stays the leader's, as Kafka's expired delete answers
                result.error_code = ErrorCode.REQUEST_TIMED_OUT
            return
        waiting = pending
        if waiting:
            await asyncio.sleep(FOLLOWER_CHECK_S)


def _moved(broker: Broker, partition) -> int:
    """Why a partition waited on can no longer answer (Kafka's DelayedDeleteRecords.tryComplete): no longer
    hosted, its log dir failed, or no longer led here; NONE while it can."""
    if broker.replicas.get(partition.topic, partition.index) is not partition:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if partition.log is None or partition.log.closed:
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE if partition.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER


@handles(21)
async def delete_records(broker: Broker, header, request):
    now = now_ms()
    in_cluster = getattr(broker, "cluster", None) is not None
    topics = []
    waiting: list[tuple[object, int, object]] = []  # (partition, offset its replicas must start at, result)
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            leader = None
            if in_cluster:
                error, low_watermark, leader = _delete_as_leader(broker, topic.name, p.partition_index, p.offset, now)
            else:
                error, low_watermark = _delete(broker, topic.name, p.partition_index, p.offset, now)
            result = Response.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=low_watermark, error_code=error)
            if leader is not None and not error:
                waiting.append((leader, low_watermark if p.offset == -1 else p.offset, result))
            partitions.append(result)
        topics.append(Response.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    await _wait_for_followers(broker, waiting, request.timeout_ms)
    return Response(throttle_time_ms=0, topics=topics)
