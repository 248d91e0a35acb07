"""OffsetForLeaderEpoch (23): where a leader epoch ended, from each partition's epoch cache.

Followers ask it to find where to truncate after a leader change (KIP-101); consumers ask it to
validate their position once they know a new leader epoch (KIP-320). As Kafka's leader answers:
the latest epoch ends at the log end offset, an older one where the next known epoch starts
(kbroker.log.leader_epoch_cache has the rules). Only the leader answers (NOT_LEADER_OR_FOLLOWER
elsewhere), after checking the request's current_leader_epoch (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH); the replica_id (v3+: -1 for a consumer, a broker id for a follower)
changes nothing, as in Kafka.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.partition import Partition
from wire import messages
from wire.errors import ErrorCode

Response = messages.OffsetForLeaderEpochResponse


def _epoch_end_offset(broker: Broker, topic: str, partition) -> Response.EpochEndOffset:
    found = broker.replicas.lookup(topic, partition.partition)
    error = found.local_log_error(partition.current_leader_epoch, require_leader=True) \
        if isinstance(found, Partition) else found
    if error:
        return Response.EpochEndOffset(error_code=error, partition=partition.partition, leader_epoch=-1,
                                       end_offset=-1)
    epoch, end_offset = found.log.end_offset_for_epoch(partition.leader_epoch)
    return Response.EpochEndOffset(error_code=ErrorCode.NONE, partition=partition.partition, leader_epoch=epoch,
                                   end_offset=end_offset)


@handles(23)
async def offset_for_leader_epoch(broker: Broker, header, request):
    topics = [Response.OffsetForLeaderTopicResult(
                  topic=topic.topic, partitions=[_epoch_end_offset(broker, topic.topic, p) for p in topic.partitions])
              for topic in request.topics]
    return Response(throttle_time_ms=0, topics=topics)
