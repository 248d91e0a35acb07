"""DescribeTopicPartitions (75, KIP-966): topics and their partitions, paged by a partition budget and a cursor.

As Kafka's KRaft broker answers it (kafka-topics.sh --describe and the Java admin use it from Kafka 3.8 on):
topics in name order, at most min(ResponsePartitionLimit, max.request.partition.size.limit) partitions per
answer, NextCursor naming the first topic and partition left out. An empty topic list means every topic.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.authorization import OPERATIONS_NOT_REQUESTED, ResourceType, authorized_operations
from kbroker.broker import LEADER_EPOCH, Broker, Topic, topic_name_problem
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

Response = messages.DescribeTopicPartitionsResponse
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000  # Kafka's max.request.partition.size.limit default
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Topic.isInternal


def _partition(broker: Broker, topic: Topic, index: int):
    nodes = [broker.node_id]
    offline = broker.logs.is_offline(topic.name, index)
    return Response.DescribeTopicPartitionsResponsePartition(
        error_code=ErrorCode.NONE, partition_index=index, leader_id=-1 if offline else broker.node_id,
        leader_epoch=LEADER_EPOCH, replica_nodes=nodes, isr_nodes=nodes, eligible_leader_replicas=[],
        last_known_elr=[], offline_replicas=nodes if offline else [])


def _topic(name: str, error: int, topic_id=ZERO_UUID, internal: bool = False, partitions: list | None = None,
           operations: int | None = None):
    """A topic's entry; Kafka always reports its authorized operations here (kbroker.authorization)."""
    return Response.DescribeTopicPartitionsResponseTopic(
        error_code=error, name=name, topic_id=topic_id, is_internal=internal, partitions=partitions or [],
        topic_authorized_operations=authorized_operations(ResourceType.TOPIC, name) if operations is None
        else operations)


def _missing(name: str) -> object:
    """A requested topic that does not exist (never listed when every topic was asked for)."""
    error = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_problem(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return _topic(name, error, internal=name in INTERNAL_TOPICS)


def _invalid_request(request) -> object:
    """Kafka's answer to a request it refuses whole (getErrorResponse): every requested topic with the error."""
    return Response(throttle_time_ms=0, next_cursor=None, topics=[
        _topic(t.name, ErrorCode.INVALID_REQUEST, operations=OPERATIONS_NOT_REQUESTED) for t in request.topics])


def _page(broker: Broker, names: list[str], cursor, budget: int, every_topic: bool):
    """(topics, next cursor): partitions of `names` in order until `budget` partitions are given."""
    topics = []
    for name in names:
        if budget <= 0:  # spent exactly at the end of the previous topic (a negative limit gives nothing at all)
            return topics, Response.Cursor(topic_name=name, partition_index=0) if budget == 0 else None
        topic = broker.topics.get(name)
        if topic is None:
            if not every_topic:
                topics.append(_missing(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(topic.partitions, start + budget)
        partitions = [_partition(broker, topic, index) for index in range(start, end)]
        topics.append(_topic(name, ErrorCode.NONE, topic.topic_id, name in INTERNAL_TOPICS, partitions))
        if end < topic.partitions:
            return topics, Response.Cursor(topic_name=name, partition_index=end)
        budget -= len(partitions)
    return topics, None


@handles(75)
async def describe_topic_partitions(broker: Broker, header, request):
    every_topic = not request.topics
    after = request.cursor.topic_name if request.cursor is not None else ""
    requested = broker.topics if every_topic else {t.name: None for t in request.topics}
    names = sorted(name for name in requested if name >= after)
    if request.cursor is not None and not every_topic and request.cursor.topic_name not in names:
        return _invalid_request(request)  # the cursor's topic must be one of those asked for
    budget = min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit)
    topics, next_cursor = _page(broker, names, request.cursor, budget, every_topic)
    return Response(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
