"""One outgoing connection from this broker to another (a leader it fetches from, the controller it asks).

Kafka's NetworkClient, reduced to what a broker-to-broker channel needs: one request at a time on one
socket, answers decoded with the wire codecs, a timeout per request (replica.socket.timeout.ms /
request.timeout.ms). Any failure closes the socket; the next request opens a fresh one, so callers
only decide when to retry (their backoff), never how to repair a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

from wire import headers, messages
from wire.codegen import Message

_SIZE = struct.Struct(">i")


class BrokerConnection:
    """Requests to one broker address, one at a time; see the module docstring."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._connected_to: tuple[str, int] | None = None
        self._lock = asyncio.Lock()

    def retarget(self, host: str, port: int) -> None:
        """The broker moved (a new registration): the next request connects to its new address (a request in
        flight finishes on the old one; `request` reconnects when the address it is connected to is stale)."""
        self.host, self.port = host, port

    async def request(self, api_key: int, version: int, body: Message, timeout_s: float | None = None) -> Message:
        """Send `body` and return the decoded answer. Raises OSError / TimeoutError / DecodeError; the
        connection is closed then."""
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can turn a cancellation into the
                # inner result (a refused connect), and a sender being stopped would then retry forever
                async with asyncio.timeout(self.timeout_s if timeout_s is None else timeout_s):
                    return await self._exchange(api_key, version, body)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, api_key: int, version: int, body: Message) -> Message:
        if self._writer is not None and self._connected_to != (self.host, self.port):
            self.close()
        if self._writer is None:
            address = (self.host, self.port)
            self._reader, self._writer = await asyncio.open_connection(*address)
            self._connected_to = address
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self._correlation_id, client_id=self.client_id)
        out = bytearray(4)
        headers.encode_request_header(header, out)
        messages.encode(body, version, out)
        _SIZE.pack_into(out, 0, len(out) - 4)
        self._writer.write(out)
        await self._writer.drain()
        assert self._reader is not None
        size = _SIZE.unpack(await self._reader.readexactly(4))[0]
        raw = await self._reader.readexactly(size)
        response_header, at = headers.decode_response_header(raw, api_key, version)
        if response_header.correlation_id != self._correlation_id:
            raise ConnectionError(f"correlation id {response_header.correlation_id}, expected {self._correlation_id}")
        answer, _ = messages.decode(messages.api(api_key).response.name, version, raw, at)
        return answer

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
