"""ListOffsets (2): earliest, latest, by timestamp, max timestamp.

Served by the partition's leader only (except to replica_id -2, Kafka's debugging client), after
the request's current_leader_epoch is checked (v4+). As Kafka's Partition.fetchOffsetForTimestamp,
each query is bounded by the last offset the asker may fetch: the last stable offset for a
consumer (replica_id -1) reading committed records (isolation_level 1, v2+), the high watermark
for any other consumer, the log end for a replica. "Latest" is that offset; a record found by
timestamp (or the max timestamp's) at or past it is answered as not found (-1, -1); earliest is
never bounded. A leader whose high watermark has not yet reached the start of its epoch (just
elected) answers OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5) to a consumer's "latest",
and to a lookup it would answer -1 for, as Kafka does.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.partition import READ_COMMITTED, Partition
from wire import messages
from wire.errors import ErrorCode

Response = messages.ListOffsetsResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2
ISOLATION_LEVEL_FROM = 2  # ListOffsets v2 adds isolation_level
NOT_FOUND = (-1, -1)


def _last_fetchable_offset(log, client: bool, isolation_level: int) -> int:
    """Kafka's lastFetchableOffset: what the asker could fetch up to."""
    if not client:
        return log.log_end_offset
    return log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark


def _lookup(log, timestamp: int, last_fetchable: int) -> tuple[int, int]:
    """(timestamp, offset) for one ListOffsets query, as Kafka answers it; NOT_FOUND for a record found at or
    past `last_fetchable`."""
    if timestamp == LATEST:
        return -1, last_fetchable
    if timestamp == LATEST_TIERED:
        return -1, log.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, log.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found.offset >= last_fetchable:
        return NOT_FOUND
    return found.timestamp, found.offset


def _refused(index: int, error: int):
    return Response.ListOffsetsPartitionResponse(partition_index=index, error_code=error, timestamp=-1, offset=-1,
                                                 leader_epoch=-1)


def _partition(broker: Broker, topic: str, wanted, version: int, replica_id: int, isolation_level: int):
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
    lagging = (client and partition.epoch_start_offset is not None
               and partition.epoch_start_offset > log.high_watermark)
    not_available = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    if lagging and wanted.timestamp == LATEST:
        return _refused(index, not_available)
    isolation_level = isolation_level if version >= ISOLATION_LEVEL_FROM else 0
    try:
        timestamp, offset = _lookup(log, wanted.timestamp, _last_fetchable_offset(log, client, isolation_level))
    except OSError as error:  # the indexes and segments are read from disk
        return _refused(index, broker.logs.io_error(log, error, f"looking up offsets of {topic}-{index}").error_code)
    if lagging and (timestamp, offset) == NOT_FOUND and wanted.timestamp not in (EARLIEST, EARLIEST_LOCAL):
        return _refused(index, not_available)
    return Response.ListOffsetsPartitionResponse(
        partition_index=index, error_code=0, timestamp=timestamp, offset=offset,
        leader_epoch=partition.leader_epoch if version >= 4 else -1)  # the field exists from v4


@handles(2)
async def list_offsets(broker: Broker, header, request):
    version = header.request_api_version
    replica_id = request.replica_id
    topics = [Response.ListOffsetsTopicResponse(name=topic.name, partitions=[
        _partition(broker, topic.name, wanted, version, replica_id, request.isolation_level)
        for wanted in topic.partitions])
        for topic in request.topics]
    return Response(throttle_time_ms=0, topics=topics)
