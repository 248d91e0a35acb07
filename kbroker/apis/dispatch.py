"""From one request frame to one response frame: header, version check, decode, handle, encode.

Malformed frames raise `MalformedRequest`, on which the network layer closes that one
connection, as Kafka does, and so does a served API at a version outside its range. An API we
do not serve gets UNSUPPORTED_VERSION; an ApiVersions request of an unknown version gets a v0 answer listing
our ranges (KIP-511).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

import kbroker.apis  # noqa: F401 - registers the handlers
from kbroker import logs
from kbroker.apis.api_versions import CLUSTER_MAX, disabled_apis, unsupported_version_response
from kbroker.apis.registry import HANDLERS, Handler, client_host
from wire import DecodeError, EncodeError, headers, messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
API_VERSIONS = 18
_DISABLED = {mode: disabled_apis(mode) for mode in (False, True)}  # by cluster mode
_CAPPED = frozenset(CLUSTER_MAX)  # APIs a cluster member serves to a lower version than a single node
_SIZE = struct.Struct(">i")
_PLACEHOLDER = bytes(4)  # the size prefix, filled in once the response is encoded


class MalformedRequest(Exception):
    """The frame cannot be understood: close the connection it came on."""


@dataclass
class ResponseFrame:
    """A size-prefixed response: `data`, with file ranges to splice in at `regions` offsets."""

    data: bytearray
    regions: list


@dataclass(frozen=True, slots=True)
class _Route:
    """Everything one (API, version) needs per request, looked up once."""

    handler: Handler
    decode_request: Callable
    encode_response: Callable
    response_header: Callable[[int], bytes]   # correlation id -> response header bytes


_ROUTES: dict[tuple[int, int], _Route] = {}
_HEADER_V0 = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">ib")  # correlation id, then an empty tagged-field section


def _route(handler: Handler, api_key: int, version: int) -> _Route:
    route = _ROUTES.get((api_key, version))
    if route is None:
        spec = messages.api(api_key)
        flexible = headers.response_header_version(api_key, version) >= 1
        response_header = (lambda cid: _HEADER_V1.pack(cid, 0)) if flexible else _HEADER_V0.pack
        route = _ROUTES[(api_key, version)] = _Route(
            handler, messages.codec(spec.request.name, version).decode,
            messages.codec(spec.response.name, version).encode, response_header)
    return route


def _frame(correlation_id: int, api_key: int, version: int, response) -> ResponseFrame:
    out = bytearray(4)
    headers.encode_response_header(correlation_id, api_key, version, out)
    regions: list = []
    messages.encode(response, version, out, regions)
    return _sized(out, regions)


def _sized(out: bytearray, regions: list) -> ResponseFrame:
    size = len(out) - 4
    for _, region in regions:
        size += len(region)
    _SIZE.pack_into(out, 0, size)
    return ResponseFrame(out, regions)


def _error_response(api_key: int, error: int):
    """A response carrying `error` at its top level where the API has one (else empty)."""
    response = getattr(messages, messages.api(api_key).response.name)()
    if "error_code" in response._fields:
        response.error_code = error
    return response


def disabled_for(broker) -> frozenset[int]:
    """The APIs this broker refuses. Its cluster mode (zookeeper.connect) never changes while it runs, so a
    connection looks this up once and passes it to every `dispatch`."""
    return _DISABLED[broker.config.cluster_mode]


async def dispatch(broker, frame: bytes, start: int = 0,
                   disabled: frozenset[int] | None = None) -> ResponseFrame | None:
    """Handle the request whose header begins at `frame[start]` (the network layer passes
    what it received, size prefix included, rather than copy the request out of it). `disabled` is
    `disabled_for(broker)`, looked up here when the caller did not keep it."""
    try:
        header, body_at = headers.decode_request_header(frame, start)
    except DecodeError as error:
        raise MalformedRequest(f"unreadable request header: {error}") from None
    api_key, version = header.request_api_key, header.request_api_version
    handler = HANDLERS.get(api_key)
    if disabled is None:
        disabled = disabled_for(broker)
    if handler is None or not handler.supports(version) or api_key in disabled or \
            (api_key in _CAPPED and broker.config.cluster_mode and version > CLUSTER_MAX[api_key]):
        return _unsupported(header, api_key, version, broker.config.cluster_mode)
    route = _route(handler, api_key, version)
    try:
        request, _ = route.decode_request(frame, body_at)
    except DecodeError as error:
        raise MalformedRequest(f"malformed {handler.name} v{version}: {error}") from None
    faults = broker.faults  # kbroker.faults: None unless a test asked for a fault or a recording
    if faults is not None:
        return await faults.intercept(header, request, lambda chosen: _handle(broker, header, chosen, handler),
                                      lambda response: _encode(header, route, response, handler.name))
    response = await _handle(broker, header, request, handler)
    return None if response is None else _encode(header, route, response, handler.name)


async def _handle(broker, header, request, handler: Handler):
    """The handler's answer, or UNKNOWN_SERVER_ERROR in the handler's own shape if it raised; logged by the
    request log (kbroker.request at DEBUG) when it is on."""
    started = perf_counter() if logs.request_logging_enabled() else 0.0
    try:
        response = await handler.handle(broker, header, request)
    except Exception:
        log.exception("%s v%d failed", handler.name, header.request_api_version)
        response = handler.failed(request, ErrorCode.UNKNOWN_SERVER_ERROR) if handler.failed is not None \
            else _error_response(handler.api_key, ErrorCode.UNKNOWN_SERVER_ERROR)
    if started:
        logs.log_request(handler.name, header.request_api_version, header.client_id, header.correlation_id,
                         client_host.get(), started)
    return response


def _encode(header, route: _Route, response, name: str) -> ResponseFrame:
    """`response` as a frame; UNKNOWN_SERVER_ERROR if it cannot be encoded."""
    api_key, version = header.request_api_key, header.request_api_version
    out = bytearray(_PLACEHOLDER)
    out += route.response_header(header.correlation_id)
    regions: list = []
    try:
        route.encode_response(response, out, regions)
    except EncodeError:
        log.exception("cannot encode %s v%d response", name, version)
        return _frame(header.correlation_id, api_key, version, _error_response(api_key, ErrorCode.UNKNOWN_SERVER_ERROR))
    return _sized(out, regions)


def _unsupported(header, api_key: int, version: int, cluster_mode: bool) -> ResponseFrame:
    if api_key == API_VERSIONS:
        return _frame(header.correlation_id, API_VERSIONS, 0, unsupported_version_response(cluster_mode))
    if api_key not in messages.apis():
        raise MalformedRequest(f"unknown API key {api_key}")
    if api_key in HANDLERS:  # a served API at a version outside its range, or not enabled: Kafka closes the connection
        raise MalformedRequest(f"{messages.api(api_key).name} v{version} is not served")
    return _frame(header.correlation_id, api_key, _closest_version(api_key, version),
                  _error_response(api_key, ErrorCode.UNSUPPORTED_VERSION))


def _closest_version(api_key: int, version: int) -> int:
    versions = messages.api(api_key).versions
    return min(max(version, versions.low), versions.high)
