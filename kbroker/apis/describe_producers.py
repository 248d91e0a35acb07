"""DescribeProducers (61): the active idempotent producers of partitions (kafka-transactions.sh).

Answered from each partition's producer state, as Kafka's ReplicaManager.activeProducerState
does: coordinator_epoch is the one the producer's last transaction marker carried (-1 before any), and
current_txn_start_offset the first offset of its open transaction (-1 without one), which
`kafka-transactions.sh abort` needs to end a hanging transaction.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.log.producer_state import ProducerStateEntry
from wire import messages
from wire.errors import ErrorCode

Response = messages.DescribeProducersResponse
# Kafka's text for a topic it does not know; a missing partition of a known topic gets none
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def _producer(entry: ProducerStateEntry):
    return Response.ProducerState(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        last_sequence=entry.last_seq,
        last_timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_start_offset=entry.current_txn_first_offset,
    )


def _partition(broker: Broker, topic: str, index: int):
    log = broker.partition_log(topic, index)
    if log is None:
        message = UNKNOWN_TOPIC_MESSAGE if topic not in broker.topics else None
        return Response.PartitionResponse(partition_index=index, error_code=broker.partition_error(topic, index),
                                          error_message=message, active_producers=[])
    producers = [_producer(e) for e in log.producer_state.producers.values()]
    return Response.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE, error_message=None,
                                      active_producers=producers)


@handles(61)
async def describe_producers(broker: Broker, header, request):
    topics = [
        Response.TopicResponse(name=t.name, partitions=[_partition(broker, t.name, i) for i in t.partition_indexes])
        for t in request.topics
    ]
    return Response(throttle_time_ms=0, topics=topics)
