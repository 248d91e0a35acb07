"""The TCP side: Kafka's framing on an asyncio Protocol, one request at a time, answers in order.

Per connection, requests are handled in arrival order and responses leave in that order, as
Kafka keeps a channel muted while its request is in flight; clients still pipeline.

Why a Protocol and not streams: the per-request cost decides produce latency under load. A
BufferedProtocol gives the kernel our own buffers to read into: small requests land in one
receive buffer and are copied out once; a large request (a full produce batch) gets a buffer
of its exact size as soon as its length is known and the rest of it is read straight into
that, so its bytes are never copied in user space. The connection splits frames itself (no
awaits per frame), runs each handler eagerly
(most never wait, so they finish without a task being scheduled), and writes every response
produced by one read in a single send. Under load more requests arrive per read, so the
cost per request falls as the load rises. Only a handler that really waits (a long-poll
fetch, a join) continues in a task, and the connection holds its later requests until it ends.

One exception to holding: a produce waiting for its ISR (acks=all in a cluster) is parked and
the produces behind it are handled meanwhile (up to MAX_PARKED), their answers kept back until
the ones before them are sent. Each append happens before its handler first waits, so appends
keep arrival order and answers keep request order, as Kafka's; but one connection's acks=all
produces share one replication round trip instead of queueing behind each other (Kafka's
round trip is fast enough that its muting costs little; ours is not). Any other request waits
until the produces parked ahead of it are answered.

Record data in fetch responses goes from the segment file to the socket with `os.sendfile`
whenever the transport has nothing buffered (both asyncio's loop and uvloop); what the
socket does not take at once continues through `loop.sendfile`, or as a copy where the loop
has no sendfile. Up to _COPY_UP_TO bytes of record data (a follower's or a tailing consumer's
fetch, a batch or two) are read and sent with the rest of the answer in one send instead:
header, sendfile and tail would be three sends, each of which may wake the reader.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Coroutine
from time import perf_counter
from typing import Any

from kbroker.apis.dispatch import MalformedRequest, ResponseFrame, disabled_for, dispatch
from kbroker.apis.registry import client_host
from kbroker.faults import current_connection, linger_zero
from kbroker.log.file_slice import FileSlice
from kbroker.net.quotas import ConnectionQuotas, TooManyConnections

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
_RECEIVE_BUFFER = 32 * 1024   # where small requests land: every connection holds one, idle or not
_DIRECT_FROM = 16 * 1024   # a request this large is read into a buffer of its own (at most half the above)
_MAX_QUEUED_BYTES = 1 << 20   # stop reading once this much waits behind a request in flight
PRODUCE = 0
MAX_PARKED = 16               # acks=all produces of one connection waiting for their ISR at once
_SHUTDOWN_GRACE_S = 10
_COPY_UP_TO = 64 * 1024       # record data up to this size is copied into the response: one send, one wake-up


class Server:
    def __init__(self, broker, host: str, port: int, listener: str = "PLAINTEXT",
                 quotas: ConnectionQuotas | None = None) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.listener = listener
        self.quotas = quotas  # max.connections and friends, shared by every listener of the broker
        self.max_request_bytes = int(broker.config["socket.request.max.bytes"])
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[KafkaConnection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(self), self.host, self.port,
                                                reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting; answer every request already received, then close every connection."""
        if self._server is not None:
            self._server.close()
        # at once, before any await: what each connection has received by now is what it answers
        closing = [connection.shut_down() for connection in list(self.connections)]
        if closing:
            _, stuck = await asyncio.wait(closing, timeout=_SHUTDOWN_GRACE_S)
            for future in stuck:
                future.cancel()
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()  # from Python 3.12 this waits for the connections to go


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection: frames in, handlers run in order, responses out."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.broker = server.broker
        self._disabled_apis = disabled_for(self.broker)  # fixed for the broker's life: not looked up per request
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.client_host = ""
        self.listener = server.listener
        self.address = ""
        self.last_active = self.loop.time()  # the least recently active go first when max.connections falls
        self._admitted = True   # False while it waits for a slot under max.connections (or was refused)
        self._received = bytearray(_RECEIVE_BUFFER)   # never resized: views of it are handed out
        self._start = self._end = 0                      # unread bytes are _received[_start:_end]
        self._large: bytearray | None = None             # one large request, being read into place
        self._large_filled = 0
        # (frame, where the request starts): bytes copied out of _received, or a large request's own buffer
        self._frames: collections.deque[tuple[bytes | bytearray, int]] = collections.deque()
        self._queued_bytes = 0
        self._out: list[bytes | bytearray] = []
        self._waiting: asyncio.Task | None = None   # a handler or a send that did not finish at once
        self._parked: collections.deque[_Parked] = collections.deque()  # produces awaiting acks, in request order
        self._writing_paused = False
        self._reading_paused = False
        self._closed = False
        self._idle: asyncio.Future | None = None    # set by shut_down, resolved when nothing is in flight
        self._metrics = self.broker.metrics          # kbroker.metrics.BrokerMetrics, or None: nothing is timed
        self._arrivals: collections.deque[float] = collections.deque()  # with metrics: when each frame was whole
        self._unwritten: list = []  # with metrics: the RequestTiming of each answer in _out

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        self.client_host = f"/{self.peer[0]}" if isinstance(self.peer, tuple) else ""
        self.address = self.peer[0] if isinstance(self.peer, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)
        if self.server.quotas is not None:
            self._take_a_slot(self.server.quotas)

    def _take_a_slot(self, quotas: ConnectionQuotas) -> None:
        try:
            self._admitted = quotas.arrive(self)
        except TooManyConnections as error:
            self.refuse(str(error))
            return
        if not self._admitted:  # as Kafka's blocked acceptor: nothing is served until admit()
            self._hold()
            self.loop.call_soon(self._hold)  # uvloop starts reading only after connection_made

    def _hold(self) -> None:
        if not self._admitted and not self._closed and self.transport is not None:
            self.transport.pause_reading()

    def admit(self) -> None:
        """A slot freed up: read and answer this connection's requests."""
        self._admitted = True
        if self.transport is not None and not self._closed and self._idle is None:
            self.transport.resume_reading()
            self._run()  # what arrived before the pause took hold

    def refuse(self, reason: str) -> None:
        """Close a connection that never got a slot (over max.connections.per.ip)."""
        self._admitted = False
        self._close(reason)

    def drop(self, reason: str) -> None:
        """Close a served connection (max.connections fell below the connections open)."""
        self._close(reason)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._large_filled:]
        if self._end == len(self._received):  # move the start of a partial request to the front
            unread = self._end - self._start
            self._received[:unread] = self._received[self._start:self._end]
            self._start, self._end = 0, unread
        return memoryview(self._received)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        self.last_active = self.loop.time()
        try:
            if self._large is not None:
                self._large_filled += nbytes
                if self._large_filled == len(self._large):
                    self._queue_frame(self._large, 4)
                    self._large = None
            else:
                self._end += nbytes
                self._split_frames()
        except MalformedRequest as error:
            self._close(f"{error}")
            return
        if self._admitted:
            self._run()

    def eof_received(self) -> bool:
        # The client closed its side. Kafka closes the channel; answers still pending would
        # have nowhere useful to go, so do the same.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.connections.discard(self)
        if self.server.quotas is not None:
            self.server.quotas.leave(self)
        if self._waiting is not None:
            self._waiting.cancel()
        for parked in self._parked:
            if parked.task is not None:
                parked.task.cancel()
        self._parked.clear()
        self._frames.clear()
        self._resolve_idle()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._waiting is None:
            self._run()

    # --- framing --------------------------------------------------------------------------

    def _frame_size(self, data: bytes | bytearray, at: int = 0) -> int:
        (size,) = _SIZE.unpack_from(data, at)
        if size < 0 or size > self.server.max_request_bytes:
            # socket.request.max.bytes: Kafka drops a connection announcing a larger request
            raise MalformedRequest(f"request of {size} bytes exceeds socket.request.max.bytes")
        return size

    def _split_frames(self) -> None:
        """Queue every whole request in the receive buffer (one copy each); a large one that is
        still arriving moves to a buffer of its own, which the rest is read into."""
        received, start, end = self._received, self._start, self._end
        while end - start >= 4:
            need = self._frame_size(received, start) + 4
            if end - start >= need:
                self._queue_frame(received[start + 4:start + need], 0)
                start += need
            elif need >= _DIRECT_FROM:
                self._large = bytearray(need)
                self._large[:end - start] = received[start:end]
                self._large_filled = end - start
                start = end
            else:
                break
        self._start, self._end = (0, 0) if start == end else (start, end)

    def _queue_frame(self, frame: bytes | bytearray, start: int) -> None:
        self._frames.append((frame, start))
        self._queued_bytes += len(frame)
        if self._metrics is not None:
            self._arrivals.append(perf_counter())

    # --- running handlers -----------------------------------------------------------------

    def _run(self) -> None:
        """Handle queued frames in order until one has to wait; then send what is ready."""
        client_host.set(self.client_host)  # handlers run in this context (and tasks copy it)
        current_connection.set(self)  # for a fault that resets the connection (kbroker.faults)
        while self._frames and self._waiting is None and not self._writing_paused and not self._closed:
            frame, start = self._frames[0]
            if self._parked and (len(self._parked) >= MAX_PARKED or _api_key(frame, start) != PRODUCE):
                break  # answered in order: it waits for the produces parked ahead of it
            self._frames.popleft()
            self._queued_bytes -= len(frame)
            timing = None if self._metrics is None else \
                self._metrics.request_started(_api_key(frame, start), self._arrivals.popleft())
            coroutine = dispatch(self.broker, frame, start, self._disabled_apis)
            try:
                awaited = coroutine.send(None)
            except StopIteration as done:
                self._answer(done.value, timing)
                continue
            except MalformedRequest as error:
                self._close(f"{error}")
                return
            except Exception:
                log.exception("request from %s failed", self.peer)
                self._close("internal error")
                return
            if _api_key(frame, start) == PRODUCE:  # looked at only for a handler that waits
                parked = _Parked(timing=timing)
                self._parked.append(parked)
                parked.task = self.loop.create_task(self._finish_parked(parked, coroutine, awaited))
            else:
                self._waiting = self.loop.create_task(self._finish(coroutine, awaited, timing))
        self._flush()
        self._update_reading()
        if self._waiting is None and not self._frames and not self._parked:
            self._resolve_idle()

    def _answer(self, response: ResponseFrame | None, timing=None) -> None:
        """Send `response` after the answers of the produces still parked ahead of it."""
        if self._parked:
            self._parked.append(_Parked(done=True, response=response, timing=timing))
        else:
            self._queue_response(response, timing)

    async def _finish_parked(self, parked: _Parked, coroutine: Coroutine, awaited: Any) -> None:
        """Drive a parked produce to its answer, then send every answer at the head of the line."""
        ok, outcome = await self._outcome(coroutine, awaited)
        if not ok:
            self._close(outcome)
            return
        if self._closed:
            return
        parked.response, parked.done = outcome, True
        while self._parked and self._parked[0].done:
            ready = self._parked.popleft()
            self._queue_response(ready.response, ready.timing)  # a produce answer holds no file regions
        self._run()

    async def _finish(self, coroutine: Coroutine, awaited: Any, timing=None) -> None:
        """Drive a handler that was started eagerly and is now waiting on `awaited`."""
        ok, outcome = await self._outcome(coroutine, awaited)
        self._waiting = None
        if not ok:
            self._close(outcome)
            return
        if self._closed:
            return  # the client left while its request (e.g. a long poll) was pending
        self._queue_response(outcome, timing)
        self._run()

    async def _outcome(self, coroutine: Coroutine, awaited: Any) -> tuple[bool, Any]:
        """(True, the handler's answer), or (False, why the connection must close) when the handler failed."""
        try:
            return True, await _resume(coroutine, awaited)
        except MalformedRequest as error:
            return False, f"{error}"
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request from %s failed", self.peer)
            return False, "internal error"

    def _update_reading(self) -> None:
        """Kafka's muting: stop reading while a request waits and more is queued behind it."""
        if self._closed or self.transport is None or self._idle is not None or not self._admitted:
            return  # closed, shutting down (reading stays paused for good) or waiting for a slot
        busy = self._waiting is not None or self._writing_paused or bool(self._parked)
        should_pause = busy and self._queued_bytes + self._end - self._start + self._large_filled > _MAX_QUEUED_BYTES
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    # --- sending --------------------------------------------------------------------------

    def _queue_response(self, response: ResponseFrame | None, timing=None) -> None:
        if timing is not None:  # metrics on: timed until the answer is written (see _flush)
            timing.answered = perf_counter()
            self._unwritten.append(timing)
        if response is None or self._closed:
            return  # acks=0 produce: no response at all
        if not response.regions:
            self._out.append(response.data)
            return
        try:
            self._queue_with_regions(response)
        except (OSError, ValueError, EOFError) as error:  # a segment file closed or failing under the answer
            self._close(f"the records of an answer could not be read: {error!r}")

    def _queue_with_regions(self, response: ResponseFrame) -> None:
        if _region_bytes(response.regions) <= _COPY_UP_TO:
            self._out.append(_with_regions_copied(response))
            return
        data = memoryview(response.data)
        written = 0
        for index, (at, region) in enumerate(response.regions):
            self._out.append(data[written:at])
            rest_of_region = self._send_file_now(region)
            if rest_of_region is not None:
                later = response.regions[index + 1:]
                self._waiting = self.loop.create_task(self._send_rest(rest_of_region, data, at, later))
                return
            written = at
        self._out.append(data[written:])

    def _send_file_now(self, region: FileSlice) -> FileSlice | None:
        """sendfile straight to the socket while the transport holds nothing back; returns
        what the socket did not take (None when it took everything)."""
        self._flush()
        transport = self.transport
        if transport is None or transport.get_write_buffer_size():
            return region
        out_fd = transport.get_extra_info("socket").fileno()
        in_fd = region.fileno()
        position, remaining = region.position, region.length
        while remaining:
            try:
                sent = os.sendfile(out_fd, in_fd, position, remaining)
            except (BlockingIOError, InterruptedError):
                return FileSlice(region.file, position, remaining)
            if sent == 0:
                raise EOFError(f"segment file ends inside {region!r}")
            position += sent
            remaining -= sent
        return None

    async def _send_rest(self, region: FileSlice, data: memoryview, at: int, rest: list) -> None:
        """The slow path of a fetch response: the socket is full, so wait for it to drain."""
        try:
            await self._send_file_async(region)
            written = at
            for next_at, next_region in rest:
                self._write(data[written:next_at])
                await self._send_file_async(next_region)
                written = next_at
            self._write(data[written:])
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._waiting = None
            self._close(f"send failed: {error!r}")
            return
        self._waiting = None
        self._run()

    async def _send_file_async(self, region: FileSlice) -> None:
        try:
            await self.loop.sendfile(self.transport, region.file, region.position, region.length)
        except NotImplementedError:  # uvloop has no sendfile: copy what is left
            self._write(region.read_bytes())

    def _write(self, data) -> None:
        if not self._closed and self.transport is not None:
            self.transport.write(data)

    def _flush(self) -> None:
        # group commit: offset commits answered in this read reach __consumer_offsets before any answer leaves
        if not self.broker.flush_deferred_appends():
            self._out.clear()
            self._close("acknowledged offset commits could not be written")
            return
        if self._unwritten:
            written, self._unwritten = self._unwritten, []
            self._metrics.requests_written(written)  # just before the write: a cheaper, close enough clock
        if not self._out:
            return
        out, self._out = self._out, []
        self._write(out[0] if len(out) == 1 else b"".join(out))

    # --- closing --------------------------------------------------------------------------

    def _close(self, reason: str) -> None:
        """Close this one connection (a malformed frame or a failure), after what is ready."""
        if self._closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
        self._flush()
        self._closed = True
        self._frames.clear()
        if self.transport is not None:
            self.transport.close()
        self._resolve_idle()

    def shut_down(self) -> asyncio.Future:
        """Clean shutdown: stop reading, answer the request in flight and every request received
        whole behind it, in order, then close. A request only partly received is dropped."""
        self._idle = self.loop.create_future()
        if self.transport is not None and not self._closed and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        if self._waiting is None:
            self._run()  # resolves idle once nothing is queued (or, if the socket is full, when it drains)
        return self._idle

    def _resolve_idle(self) -> None:
        if self._idle is None or self._waiting is not None or self._parked:
            return
        self._flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if not self._idle.done():
            self._idle.set_result(None)

    def reset(self, partial: bytes) -> None:
        """An injected fault (kbroker.faults): what is ready, then `partial` bytes of an answer, then a TCP reset."""
        if self._closed or self.transport is None:
            return
        self._flush()
        self._write(partial)
        sock = self.transport.get_extra_info("socket")
        if sock is not None and self.transport.get_write_buffer_size() == 0:
            linger_zero(sock)
        self._closed = True
        self._frames.clear()
        self.transport.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


class _Parked:
    """A produce waiting for its ISR, or an answer ready behind one."""

    __slots__ = ("done", "response", "task", "timing")

    def __init__(self, done: bool = False, response: ResponseFrame | None = None, timing=None) -> None:
        self.task: asyncio.Task | None = None
        self.done, self.response, self.timing = done, response, timing


def _api_key(frame: bytes | bytearray, start: int) -> int:
    return int.from_bytes(frame[start:start + 2], "big", signed=True) if len(frame) >= start + 2 else -1


async def _resume(coroutine: Coroutine, awaited: Any) -> Any:
    """Finish a coroutine started with `send(None)`: wait for what it awaits, resume it, repeat.

    The coroutine re-reads the future's outcome itself when resumed, so a failed future needs
    no special handling here; cancelling this task cancels the future and is passed on.
    """
    while True:
        try:
            if awaited is None:
                await asyncio.sleep(0)        # a bare yield: give the loop one turn
            else:
                await asyncio.wait((awaited,))
        except asyncio.CancelledError:
            if awaited is not None:
                awaited.cancel()
            with contextlib.suppress(StopIteration, asyncio.CancelledError):
                coroutine.throw(asyncio.CancelledError())
            raise
        try:
            awaited = coroutine.send(None)
        except StopIteration as done:
            return done.value


def _region_bytes(regions: list) -> int:
    return sum(len(region) for _, region in regions)


def _with_regions_copied(response: ResponseFrame) -> bytes:
    """The whole frame as one buffer, record data read from the segment files (just appended,
    so from the page cache): one send wakes the reader once, where header, sendfile and tail
    could wake it three times and, on a busy machine, hand it this broker's CPU each time."""
    data = response.data
    parts = []
    written = 0
    for at, region in response.regions:
        parts.append(data[written:at])
        parts.append(region.read_bytes())
        written = at
    parts.append(data[written:])
    return b"".join(parts)
