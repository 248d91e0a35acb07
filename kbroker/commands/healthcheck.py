"""`kbroker healthcheck`: is the broker answering? One ApiVersions round trip over a plain socket, encoded with the
project's own `wire` codecs, so a container or Kubernetes probe needs no client library and no topic."""

from __future__ import annotations

import argparse
import socket
import struct
import sys

from wire import headers, messages

API_VERSIONS = 18
_VERSION = 3  # flexible since 3; every Kafka since 2.4 and kbroker answer it
_HEALTHY, _UNHEALTHY = 0, 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("healthcheck", help="exit 0 when the broker answers ApiVersions without error")
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds for the whole round trip")
    parser.set_defaults(run=run)


def api_versions_error(bootstrap: str, timeout: float) -> int:
    """The error code of the broker's ApiVersions answer; raises OSError when it gives none in time."""
    host, _, port = bootstrap.rpartition(":")
    header = messages.RequestHeader(request_api_key=API_VERSIONS, request_api_version=_VERSION, correlation_id=1,
                                    client_id="kbroker-healthcheck")
    request = messages.ApiVersionsRequest(client_software_name="kbroker-healthcheck",
                                          client_software_version="1")
    body = bytes(messages.encode(request, _VERSION, headers.encode_request_header(header)))
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        frame = _read_exactly(sock, struct.unpack(">i", _read_exactly(sock, 4))[0])
    response_header, at = headers.decode_response_header(frame, API_VERSIONS, _VERSION)
    if response_header.correlation_id != 1:
        raise OSError(f"answer to correlation id {response_header.correlation_id}, expected 1")
    response, _ = messages.decode(messages.api(API_VERSIONS).response.name, _VERSION, frame, at)
    return int(response.error_code)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise OSError("connection closed before the answer was complete")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def run(args: argparse.Namespace) -> int:
    try:
        error_code = api_versions_error(args.bootstrap_server, args.timeout)
    except (OSError, ValueError) as error:
        print(f"kbroker healthcheck: {args.bootstrap_server}: {error}", file=sys.stderr)
        return _UNHEALTHY
    if error_code != 0:
        print(f"kbroker healthcheck: ApiVersions error code {error_code}", file=sys.stderr)
        return _UNHEALTHY
    return _HEALTHY
