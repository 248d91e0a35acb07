"""ListOffsets (2): earliest, latest, by timestamp, max timestamp."""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import LEADER_EPOCH, Broker, leader_epoch_error
from wire import messages
from wire.errors import ErrorCode

Response = messages.ListOffsetsResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _lookup(log, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) for one ListOffsets query, as Kafka answers it."""
    if timestamp in (LATEST, LATEST_TIERED):
        return -1, log.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, log.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
        return (found.timestamp, found.offset) if found is not None else (-1, -1)
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, found_timestamp = found
    return found_timestamp, offset


def _refused(index: int, error: int):
    return Response.ListOffsetsPartitionResponse(partition_index=index, error_code=error, timestamp=-1, offset=-1,
                                                 leader_epoch=-1)


def _partition(broker: Broker, topic: str, wanted, version: int):
    index = wanted.partition_index
    log = broker.partition_log(topic, index)
    if log is None:
        return _refused(index, broker.partition_error(topic, index))
    epoch_error = leader_epoch_error(wanted.current_leader_epoch) if version >= 4 else ErrorCode.NONE
    if epoch_error:
        return _refused(index, epoch_error)
    try:
        timestamp, offset = _lookup(log, wanted.timestamp)
    except OSError as error:  # the indexes and segments are read from disk
        return _refused(index, broker.logs.io_error(log, error, f"looking up offsets of {topic}-{index}").error_code)
    return Response.ListOffsetsPartitionResponse(
        partition_index=index, error_code=0, timestamp=timestamp, offset=offset,
        leader_epoch=LEADER_EPOCH if version >= 4 else -1)  # the field exists from v4


@handles(2)
async def list_offsets(broker: Broker, header, request):
    version = header.request_api_version
    topics = [Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
        _partition(broker, topic.name, wanted, version) for wanted in topic.partitions]) for topic in request.topics]
    return Response(throttle_time_ms=0, topics=topics)
