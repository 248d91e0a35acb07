"""The broker's small HTTP endpoints (/metrics with prometheus.port, the fault controls with kbroker.faults.port):
one request per connection, answered on the broker's event loop, so neither needs a framework or a thread."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 10
MAX_HEAD_BYTES = 16 << 10
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str  # upper case
    path: str    # without the query string
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    content_type: str
    body: bytes


class BadRequest(Exception):
    """Not an HTTP request we read: answered 400, or 413 for a body over MAX_BODY_BYTES."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def plain(status: int, text: str) -> HttpAnswer:
    return HttpAnswer(status, "text/plain; charset=utf-8", text.encode())


Answer = Callable[[HttpRequest], HttpAnswer | Awaitable[HttpAnswer]]


async def serve_http(answer: Answer, host: str, port: int) -> asyncio.Server:
    """Listen on host:port; `answer` is called on the event loop for each request, and awaited if it returns an
    awaitable (an answer that waits on the broker, which the loop must keep serving meanwhile). An exception from
    it is logged and answered 500: the endpoint stays up whatever one request does."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read(reader), READ_TIMEOUT_S)
        except BadRequest as error:
            request, response = None, plain(error.status, f"{error}\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        else:
            response = await _answer_safely(answer, request)
        body = b"" if request is not None and request.method == "HEAD" else response.body
        writer.write(_head(response) + body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, host, port, reuse_address=True, limit=MAX_HEAD_BYTES)


async def _read(reader: asyncio.StreamReader) -> HttpRequest:
    head = await reader.readuntil(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = request_line.split()
    if len(parts) < 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest("not an HTTP request")
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value)
            except ValueError:
                raise BadRequest("bad Content-Length") from None
    if length > MAX_BODY_BYTES:
        raise BadRequest(f"a body over {MAX_BODY_BYTES} bytes", 413)
    body = await reader.readexactly(length) if length > 0 else b""
    return HttpRequest(parts[0].upper(), parts[1].split("?", 1)[0], body)


async def _answer_safely(answer: Answer, request: HttpRequest) -> HttpAnswer:
    try:
        answered = answer(request)
        return await answered if inspect.isawaitable(answered) else answered
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return plain(500, "internal error: see the broker's log\n")


def _head(response: HttpAnswer) -> bytes:
    """The status line and headers; Content-Length is the body's even for HEAD, which sends no body."""
    reason = HTTPStatus(response.status).phrase
    return (f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\nConnection: close\r\n\r\n").encode()
