"""DeleteRecords (21): move partitions' log start offsets forward (the low watermark)."""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.log.errors import OffsetOutOfRangeError
from wire import messages
from wire.errors import ErrorCode

Response = messages.DeleteRecordsResponse
INVALID_LOW_WATERMARK = -1  # what Kafka reports beside an error


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


@handles(21)
async def delete_records(broker: Broker, header, request):
    now = now_ms()
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error, low_watermark = _delete(broker, topic.name, p.partition_index, p.offset, now)
            partitions.append(Response.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=low_watermark, error_code=error))
        topics.append(Response.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    return Response(throttle_time_ms=0, topics=topics)
