"""Request and response headers, and Kafka's rules for which header version goes with
which API version.

The rules: a request uses header v2 when its API version is flexible, else v1 (v0, without
client id, only for ControlledShutdown v0). A response uses header v1 when flexible, else v0,
except that ApiVersionsResponse always uses v0 so that a client that does not yet know the
broker's versions can read it (KIP-511).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from wire import messages
from wire.exceptions import DecodeError

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
_KEY_AND_VERSION = struct.Struct(">hh")


def is_flexible(api_key: int, api_version: int) -> bool:
    """Unknown APIs are treated as not flexible; versions past the newest keep the newest's
    flexibility, which is how Kafka parses a too-new ApiVersions request."""
    known = messages.apis().get(api_key)
    return known is not None and known.is_flexible(api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def peek_api(buf, pos: int = 0) -> tuple[int, int]:
    """The (api_key, api_version) of a request frame without decoding its header."""
    if len(buf) - pos < 4:
        raise DecodeError("request is shorter than its api key and version")
    return _KEY_AND_VERSION.unpack_from(buf, pos)


def decode_request_header(buf, pos: int = 0):
    """Decode the header of a request frame body; returns `(header, body_position)`."""
    key_and_version = peek_api(buf, pos)
    decode = _HEADER_DECODERS.get(key_and_version)
    if decode is None:  # every request goes through here: look the decoder up once per known version
        api_key, api_version = key_and_version
        decode = messages.codec("RequestHeader", request_header_version(api_key, api_version)).decode
        known = messages.apis().get(api_key)
        if known is not None and known.versions.low <= api_version <= known.versions.high:
            _HEADER_DECODERS[key_and_version] = decode
    return decode(buf, pos)


_HEADER_DECODERS: dict[tuple[int, int], Callable] = {}


def encode_request_header(header, out: bytearray | None = None) -> bytearray:
    version = request_header_version(header.request_api_key, header.request_api_version)
    return messages.encode(header, version, out)


def encode_response_header(correlation_id: int, api_key: int, api_version: int,
                           out: bytearray | None = None) -> bytearray:
    header = messages.ResponseHeader(correlation_id=correlation_id)
    return messages.encode(header, response_header_version(api_key, api_version), out)


def decode_response_header(buf, api_key: int, api_version: int, pos: int = 0):
    return messages.decode("ResponseHeader", response_header_version(api_key, api_version), buf, pos)
