"""OffsetForLeaderEpoch (23): where a leader epoch ended, from each partition's epoch cache.

Followers ask it to find where to truncate after a leader change (KIP-101); consumers ask it to
validate their position once they know a new leader epoch (KIP-320). As Kafka's leader answers:
the latest epoch ends at the log end offset, an older one where the next known epoch starts
(kbroker.log.leader_epoch_cache has the rules), and the request's replica_id (v3+: -1 for a
consumer, a broker id for a follower) changes nothing, since this node leads every partition.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import LEADER_EPOCH, Broker
from wire import messages
from wire.errors import ErrorCode

Response = messages.OffsetForLeaderEpochResponse
NO_PARTITION_LEADER_EPOCH = -1  # current_leader_epoch: the client makes no claim


def current_leader_epoch_error(current_leader_epoch: int) -> ErrorCode:
    """Kafka's Partition.checkCurrentLeaderEpoch: every value but -1 is compared with ours."""
    if current_leader_epoch in (NO_PARTITION_LEADER_EPOCH, LEADER_EPOCH):
        return ErrorCode.NONE
    if current_leader_epoch > LEADER_EPOCH:
        return ErrorCode.UNKNOWN_LEADER_EPOCH  # the client has seen a newer leader than this broker
    return ErrorCode.FENCED_LEADER_EPOCH


def _epoch_end_offset(broker: Broker, topic: str, partition) -> Response.EpochEndOffset:
    log = broker.partition_log(topic, partition.partition)
    error = broker.partition_error(topic, partition.partition) if log is None else \
        current_leader_epoch_error(partition.current_leader_epoch)
    if error:
        return Response.EpochEndOffset(error_code=error, partition=partition.partition, leader_epoch=-1,
                                       end_offset=-1)
    epoch, end_offset = log.end_offset_for_epoch(partition.leader_epoch)
    return Response.EpochEndOffset(error_code=ErrorCode.NONE, partition=partition.partition, leader_epoch=epoch,
                                   end_offset=end_offset)


@handles(23)
async def offset_for_leader_epoch(broker: Broker, header, request):
    topics = [Response.OffsetForLeaderTopicResult(
                  topic=topic.topic, partitions=[_epoch_end_offset(broker, topic.topic, p) for p in topic.partitions])
              for topic in request.topics]
    return Response(throttle_time_ms=0, topics=topics)
