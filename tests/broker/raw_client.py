"""A minimal blocking Kafka client over a plain socket, built on `wire`, for broker tests."""

from __future__ import annotations

import socket
import struct
from collections import deque

from wire import headers, messages

PRODUCE = 0


class RawClient:
    def __init__(self, bootstrap: str, client_id: str = "raw-test", timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self.correlation_id = 0
        self.unanswered: deque[int] = deque()  # correlation ids of requests sent, in order

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def request_bytes(self, api_key: int, version: int, request) -> bytes:
        self.correlation_id += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self.correlation_id, client_id=self.client_id)
        out = headers.encode_request_header(header)
        return bytes(messages.encode(request, version, out))

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, request):
        self.send(api_key, version, request)
        return self.receive(api_key, version)

    def send(self, api_key: int, version: int, request) -> None:
        self.send_frame(self.request_bytes(api_key, version, request))
        if not (api_key == PRODUCE and request.acks == 0):  # Kafka never answers an acks=0 produce
            self.unanswered.append(self.correlation_id)

    def receive(self, api_key: int, version: int):
        """The answer to the oldest request sent and not yet answered (a broker answers in order)."""
        frame = self.read_frame()
        header, at = headers.decode_response_header(frame, api_key, version)
        assert header.correlation_id == self.unanswered.popleft()
        response, end = messages.decode(messages.api(api_key).response.name, version, frame, at)
        assert end == len(frame)
        return response

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True
