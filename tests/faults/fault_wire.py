"""Request builders and answer readers for the fault tests (their client is tests/broker/raw_client.py)."""

from __future__ import annotations

import time

from wire import messages
from wire.records import Record, build_batch, iter_batches, iter_records

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, JOIN_GROUP, OFFSET_COMMIT = 0, 1, 3, 10, 11, 8
P = messages.ProduceRequest
TOPIC = "orders"  # the two-partition topic of the `broker` fixture


def batch(value: bytes = b"v", producer_id: int = -1, sequence: int = -1) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([Record(0, now, None, value, ())], producer_id=producer_id, producer_epoch=0 if
                       producer_id >= 0 else -1, base_sequence=sequence)


def produce_request(partitions: dict[str, list[int]], acks: int = -1, value: bytes = b"v") -> object:
    """One batch of one record `value` for each partition named, per topic."""
    return P(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=index, records=batch(value))
                                                       for index in indexes])
        for topic, indexes in partitions.items()])


def read_records(broker, topic: str, partition: int) -> list[Record]:
    """Every record of the partition's log, in offset order."""
    data = broker.broker.partition_log(topic, partition).read(0, 1 << 20).read_bytes()
    return [record for at, _ in iter_batches(data) for record in iter_records(data, at)]


def partition_errors(response) -> dict[tuple[str, int], int]:
    """(topic, partition) -> error code of a produce response."""
    return {(topic.name, partition.index): partition.error_code
            for topic in response.responses for partition in topic.partition_responses}
