"""A blocking Kafka client over a plain socket (built on `wire`) and request builders for the fault tests."""

from __future__ import annotations

import socket
import struct
import time

from wire import headers, messages
from wire.records import Record, build_batch

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, JOIN_GROUP, OFFSET_COMMIT = 0, 1, 3, 10, 11, 8
P = messages.ProduceRequest
TOPIC = "orders"  # the two-partition topic of the `broker` fixture


class WireClient:
    """One connection; `call` sends a request and decodes its answer."""

    def __init__(self, bootstrap: str, client_id: str = "fault-test", timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, request) -> None:
        self.correlation_id += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self.correlation_id, client_id=self.client_id)
        body = bytes(messages.encode(request, version, headers.encode_request_header(header)))
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def receive(self, api_key: int, version: int):
        frame = self.read_exactly(struct.unpack(">i", self.read_exactly(4))[0])
        header, at = headers.decode_response_header(frame, api_key, version)
        assert header.correlation_id == self.correlation_id
        return messages.decode(messages.api(api_key).response.name, version, frame, at)[0]

    def call(self, api_key: int, version: int, request):
        self.send(api_key, version, request)
        return self.receive(api_key, version)

    def read_exactly(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)


def batch(value: bytes = b"v", producer_id: int = -1, sequence: int = -1) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([Record(0, now, None, value, ())], producer_id=producer_id, producer_epoch=0 if
                       producer_id >= 0 else -1, base_sequence=sequence)


def produce_request(partitions: dict[str, list[int]], acks: int = -1) -> object:
    """One batch for each partition named, per topic."""
    return P(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=index, records=batch())
                                                       for index in indexes])
        for topic, indexes in partitions.items()])


def partition_errors(response) -> dict[tuple[str, int], int]:
    """(topic, partition) -> error code of a produce response."""
    return {(topic.name, partition.index): partition.error_code
            for topic in response.responses for partition in topic.partition_responses}
