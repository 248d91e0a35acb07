"""One Kafka request and its answer over a fresh blocking socket, with the `wire` codecs: for the tools that need a
single round trip and no client library (`kbroker healthcheck`, the console's DescribeLogDirs)."""

from __future__ import annotations

import socket
import struct

from wire import headers, messages

_SIZE = struct.Struct(">i")


def call(host: str, port: int, api_key: int, version: int, request, client_id: str, timeout: float):
    """The decoded answer to `request`; OSError when the broker gives no whole answer in `timeout` seconds."""
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                    client_id=client_id)
    body = bytes(messages.encode(request, version, headers.encode_request_header(header)))
    with socket.create_connection((host.strip("[]"), port), timeout=timeout) as connection:
        connection.sendall(_SIZE.pack(len(body)) + body)
        (size,) = _SIZE.unpack(_read_exactly(connection, 4))
        frame = _read_exactly(connection, size)
    answered, at = headers.decode_response_header(frame, api_key, version)
    if answered.correlation_id != 1:
        raise OSError(f"answer to correlation id {answered.correlation_id}, expected 1")
    response, _ = messages.decode(messages.api(api_key).response.name, version, frame, at)
    return response


def _read_exactly(connection: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection before its answer was complete")
        data += chunk
    return bytes(data)
