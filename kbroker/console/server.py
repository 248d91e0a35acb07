"""The console's HTTP side: JSON endpoints under /api/ and the static page, on the standard library's server."""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kbroker.console.kafka_view import ConsoleError, KafkaView, LagSampler

log = logging.getLogger("kbroker.console")

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
MAX_BODY = 1 << 20


def _static(name: str) -> bytes | None:
    item = resources.files("kbroker.console").joinpath("static", name)
    return item.read_bytes() if item.is_file() else None


def _int_param(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values or values[0] == "":
        return None
    try:
        return int(values[0])
    except ValueError as error:
        raise ConsoleError(f"{name} must be an integer") from error


class ConsoleHandler(BaseHTTPRequestHandler):
    server: ConsoleServer
    server_version = "kbroker-console"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._answer(lambda: self._get(urlsplit(self.path)))

    def do_POST(self) -> None:
        self._answer(lambda: self._post(urlsplit(self.path)))

    def _check_host(self) -> None:
        """A page of another site that rebinds its DNS name to 127.0.0.1 sends its own name as Host: refused."""
        allowed = self.server.allowed_hosts
        if allowed is not None and (self.headers.get("Host") or "").lower() not in allowed:
            raise ConsoleError("unexpected Host header", HTTPStatus.FORBIDDEN)

    def _check_same_origin_json(self) -> None:
        """A cross-site form can post only form encodings, and a browser names the page's origin: a produce
        must be JSON from a page of this console."""
        if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
            raise ConsoleError("a produce must be sent as application/json", HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
        origin = self.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != (self.headers.get("Host") or "").lower():
            raise ConsoleError("cross-origin request refused", HTTPStatus.FORBIDDEN)

    def _answer(self, handle) -> None:
        try:
            self._check_host()
            handle()
        except ConsoleError as error:
            self._json({"error": str(error)}, error.status)
        except Exception as error:
            log.exception("console request %s failed", self.path)
            self._json({"error": f"{type(error).__name__}: {error}"}, HTTPStatus.INTERNAL_SERVER_ERROR)

    def _get(self, url) -> None:
        parts = [unquote(part) for part in url.path.strip("/").split("/") if part]
        view = self.server.view
        if not parts:
            return self._file("index.html")
        if parts[0] == "static" and len(parts) == 2:
            return self._file(parts[1])
        if parts[0] != "api":
            raise ConsoleError("not found", 404)
        query = parse_qs(url.query)
        route = parts[1:]
        if route == ["cluster"]:
            return self._json(view.cluster())
        if route == ["topics"]:
            return self._json({"topics": view.topics()})
        if len(route) == 2 and route[0] == "topics":
            return self._json(view.topic(route[1]))
        if len(route) == 3 and route[0] == "topics" and route[2] == "messages":
            return self._json(view.messages(
                route[1], _int_param(query, "partition") or 0, offset=_int_param(query, "offset"),
                timestamp_ms=_int_param(query, "timestamp"), limit=_int_param(query, "limit") or 50,
                key_contains=(query.get("key") or [None])[0]))
        if route == ["groups"]:
            return self._json({"groups": view.groups()})
        if len(route) == 2 and route[0] == "groups":
            group = view.group(route[1])
            group["lag_history"] = self.server.sampler.history(route[1])
            return self._json(group)
        raise ConsoleError("not found", 404)

    def _post(self, url) -> None:
        parts = [unquote(part) for part in url.path.strip("/").split("/") if part]
        if not (len(parts) == 4 and parts[:2] == ["api", "topics"] and parts[3] == "messages"):
            raise ConsoleError("not found", 404)
        self._check_same_origin_json()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ConsoleError("body too large", 413)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as error:
            raise ConsoleError(f"body is not JSON: {error}") from error
        headers = [(str(h["key"]), str(h.get("value", ""))) for h in body.get("headers") or [] if h.get("key")]
        partition = body.get("partition")
        acknowledged = self.server.view.produce(parts[2], body.get("value"), key=body.get("key") or None,
                                                partition=None if partition in (None, "") else int(partition),
                                                headers=headers)
        self._json(acknowledged, HTTPStatus.CREATED)

    def _file(self, name: str) -> None:
        suffix = name[name.rfind("."):]
        content = _static(name) if suffix in STATIC_TYPES else None
        if content is None:
            raise ConsoleError("not found", 404)
        self._send(content, STATIC_TYPES[suffix])

    def _json(self, payload: Any, status: int = HTTPStatus.OK) -> None:
        self._send(json.dumps(payload).encode("utf-8"), "application/json", status)

    def _send(self, body: bytes, content_type: str, status: int = HTTPStatus.OK) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


class ConsoleServer(ThreadingHTTPServer):
    """The console's HTTP server and its Kafka clients; `serve_in_background()` runs it in a daemon thread."""

    daemon_threads = True

    def __init__(self, bootstrap_servers: str, host: str = "127.0.0.1", port: int = 8080,
                 lag_interval_s: float = 5.0) -> None:
        super().__init__((host, port), ConsoleHandler)
        self.view = KafkaView(bootstrap_servers)
        self.sampler = LagSampler(self.view, lag_interval_s)
        self._thread: threading.Thread | None = None
        self.allowed_hosts = _host_headers(host, self.server_address[1])

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def serve_in_background(self) -> ConsoleServer:
        self.sampler.start()
        self._thread = threading.Thread(target=self.serve_forever, name="kbroker-console", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, which never ran otherwise
            self.shutdown()
            self._thread.join(10)
        self.server_close()
        self.sampler.stop()
        self.view.close()


def _host_headers(host: str, port: int) -> frozenset[str] | None:
    """The Host headers a browser sends to this console: its own address and loopback names; None (any) when
    it listens on every interface, whose names it cannot know."""
    if host in ("", "0.0.0.0", "::"):
        return None
    names = {host, "localhost", "127.0.0.1", "[::1]", f"[{host}]" if ":" in host else host}
    return frozenset(f"{name}:{port}".lower() for name in names)


def start_console(bootstrap_servers: str, host: str = "127.0.0.1", port: int = 8080,
                  lag_interval_s: float = 5.0) -> ConsoleServer:
    """A console serving in a background thread; call `.close()` to stop it."""
    return ConsoleServer(bootstrap_servers, host, port, lag_interval_s).serve_in_background()
