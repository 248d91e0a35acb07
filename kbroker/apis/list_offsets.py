"""ListOffsets (2): earliest, latest, by timestamp, max timestamp.

Served by the partition's leader only (except to replica_id -2, Kafka's debugging client), after
the request's current_leader_epoch is checked (v4+). "Latest" is the high watermark for a consumer
(replica_id -1) and the log end for a replica; a leader whose high watermark has not yet reached
the start of its epoch (just elected) answers OFFSET_NOT_AVAILABLE to a consumer's "latest"
(LEADER_NOT_AVAILABLE before v5), as Kafka does.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.partition import Partition
from wire import messages
from wire.errors import ErrorCode

Response = messages.ListOffsetsResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def _lookup(log, timestamp: int, client: bool) -> tuple[int, int]:
    """(timestamp, offset) for one ListOffsets query, as Kafka answers it."""
    if timestamp == LATEST:
        return -1, log.high_watermark if client else log.log_end_offset
    if timestamp == LATEST_TIERED:
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


def _partition(broker: Broker, topic: str, wanted, version: int, replica_id: int):
    index = wanted.partition_index
    partition = broker.replicas.lookup(topic, index)
    if not isinstance(partition, Partition):
        return _refused(index, partition)
    claimed_epoch = wanted.current_leader_epoch if version >= 4 else -1
    error = partition.local_log_error(claimed_epoch, require_leader=replica_id != DEBUGGING_REPLICA_ID)
    if error:
        return _refused(index, error)
    log = partition.log
    client = replica_id == CONSUMER_REPLICA_ID
    if (client and wanted.timestamp == LATEST and partition.epoch_start_offset is not None
            and partition.epoch_start_offset > log.high_watermark):
        return _refused(index, ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE)
    try:
        timestamp, offset = _lookup(log, wanted.timestamp, client)
    except OSError as error:  # the indexes and segments are read from disk
        return _refused(index, broker.logs.io_error(log, error, f"looking up offsets of {topic}-{index}").error_code)
    return Response.ListOffsetsPartitionResponse(
        partition_index=index, error_code=0, timestamp=timestamp, offset=offset,
        leader_epoch=partition.leader_epoch if version >= 4 else -1)  # the field exists from v4


@handles(2)
async def list_offsets(broker: Broker, header, request):
    version = header.request_api_version
    replica_id = request.replica_id
    topics = [Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
        _partition(broker, topic.name, wanted, version, replica_id) for wanted in topic.partitions])
        for topic in request.topics]
    return Response(throttle_time_ms=0, topics=topics)
