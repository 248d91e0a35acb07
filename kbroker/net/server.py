"""The TCP side: one asyncio task per connection, Kafka's framing, responses in order.

A connection handles one request at a time, in arrival order, exactly as Kafka mutes a
channel while its request is in flight; clients still pipeline (their requests wait in the
socket buffer), and responses leave in the order the requests came. Record data in fetch
responses goes from the segment file to the socket with `sendfile`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

from kbroker.apis.dispatch import MalformedRequest, ResponseFrame, dispatch

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


class Server:
    def __init__(self, broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.max_request_bytes = int(broker.config["socket.request.max.bytes"])
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port,
                                                  reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        # Close the sockets rather than cancel the tasks: each connection then ends its read
        # loop normally, after answering the request it is handling (clean shutdown).
        for writer in list(self._connections.values()):
            writer.close()
        pending = list(self._connections)
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=10)
            for task in stuck:
                task.cancel()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                frame = await self._read_frame(reader, peer)
                if frame is None:
                    return
                response = await dispatch(self.broker, frame)
                if writer.transport.is_closing():
                    return  # the client left while its request (e.g. a long poll) was pending
                if response is not None:
                    await _send(writer, response)
        except MalformedRequest as error:
            log.warning("closing connection from %s: %s", peer, error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            writer.close()
            if task is not None:
                self._connections.pop(task, None)

    async def _read_frame(self, reader: asyncio.StreamReader, peer) -> bytes | None:
        try:
            prefix = await reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None  # clean close between requests
        (size,) = _SIZE.unpack(prefix)
        if size < 0 or size > self.max_request_bytes:
            # socket.request.max.bytes: Kafka drops a connection announcing a larger request
            raise MalformedRequest(f"request of {size} bytes exceeds socket.request.max.bytes")
        return await reader.readexactly(size)


async def _send(writer: asyncio.StreamWriter, response: ResponseFrame) -> None:
    data = memoryview(response.data)
    if not response.regions:
        writer.write(data)
        await writer.drain()
        return
    loop = asyncio.get_running_loop()
    written = 0
    for at, region in response.regions:
        writer.write(data[written:at])
        await writer.drain()
        await _send_file_range(loop, writer, region)
        written = at
    writer.write(data[written:])
    await writer.drain()


async def _send_file_range(loop, writer: asyncio.StreamWriter, region) -> None:
    """Zero copy where the loop can: asyncio's `loop.sendfile` uses os.sendfile on a plain TCP
    transport. uvloop has no sendfile, so there the bytes are read and written (a copy)."""
    try:
        await loop.sendfile(writer.transport, region.file, region.position, region.length)
    except NotImplementedError:
        writer.write(region.read_bytes())
        await writer.drain()
