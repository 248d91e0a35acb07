"""What a client gets when a handler fails inside the broker: Kafka's getErrorResponse, which for Produce names
every partition of the request with the error, so the producer fails (and retries) those batches instead of
waiting for partitions the answer leaves out."""

from __future__ import annotations

from kbroker.apis.dispatch import HANDLERS
from wire import messages
from wire.errors import ErrorCode

PRODUCE = 0
PR = messages.ProduceRequest


def produce_request(acks: int) -> object:
    return PR(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        PR.TopicProduceData(name="a", partition_data=[PR.PartitionProduceData(index=0, records=b""),
                                                      PR.PartitionProduceData(index=3, records=b"")]),
        PR.TopicProduceData(name="b", partition_data=[PR.PartitionProduceData(index=1, records=b"")])])


def test_a_failed_produce_answers_every_partition_with_unknown_server_error() -> None:
    response = HANDLERS[PRODUCE].failed(produce_request(-1), ErrorCode.UNKNOWN_SERVER_ERROR)
    messages.encode(response, 9)
    assert [(t.name, p.index, p.error_code) for t in response.responses for p in t.partition_responses] == [
        ("a", 0, ErrorCode.UNKNOWN_SERVER_ERROR), ("a", 3, ErrorCode.UNKNOWN_SERVER_ERROR),
        ("b", 1, ErrorCode.UNKNOWN_SERVER_ERROR)]


def test_a_failed_produce_with_acks_0_gets_no_answer() -> None:
    assert HANDLERS[PRODUCE].failed(produce_request(0), ErrorCode.UNKNOWN_SERVER_ERROR) is None
