"""Partition sizes by DescribeLogDirs, sent with kbroker's own `wire` codecs: confluent-kafka's AdminClient has
no describe_log_dirs. Still the Kafka protocol only, so it works against any broker that allows it."""

from __future__ import annotations

import socket
import struct

from wire import headers, messages

DESCRIBE_LOG_DIRS = 35
VERSION = 1  # the oldest version Kafka 4 still answers, and not yet flexible: the simplest frame
_SIZE = struct.Struct(">i")


def partition_sizes(host: str, port: int, topic: str, partitions: list[int], timeout: float = 10) -> dict[int, int]:
    """Bytes on disk of those `partitions` of `topic` this broker holds (the largest copy across its log dirs)."""
    described_topic = messages.classes("DescribeLogDirsRequest")["DescribableLogDirTopic"]
    request = messages.DescribeLogDirsRequest(topics=[described_topic(topic=topic, partitions=partitions)])
    response = _call(host, port, request, timeout)
    sizes: dict[int, int] = {}
    for result in response.results:
        if result.error_code:
            continue  # an offline log dir
        for described in result.topics:
            if described.name != topic:
                continue
            for part in described.partitions:
                if not part.is_future_key:
                    sizes[part.partition_index] = max(sizes.get(part.partition_index, 0), part.partition_size)
    return sizes


def _call(host: str, port: int, request, timeout: float):
    header = messages.RequestHeader(request_api_key=DESCRIBE_LOG_DIRS, request_api_version=VERSION,
                                    correlation_id=1, client_id="kbroker-console")
    body = messages.encode(request, VERSION, headers.encode_request_header(header))
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(_SIZE.pack(len(body)) + bytes(body))
        (size,) = _SIZE.unpack(_read(connection, 4))
        frame = _read(connection, size)
    _, at = headers.decode_response_header(frame, DESCRIBE_LOG_DIRS, VERSION)
    response, _ = messages.decode("DescribeLogDirsResponse", VERSION, frame, at)
    return response


def _read(connection: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)
