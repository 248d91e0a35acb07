"""`kbroker healthcheck`: is the broker answering? One ApiVersions round trip over a plain socket, encoded with the
project's own `wire` codecs, so a container or Kubernetes probe needs no client library and no topic."""

from __future__ import annotations

import argparse
import sys

from kbroker.commands._common import add_bootstrap_server
from kbroker.net.one_request import call
from wire import messages

API_VERSIONS = 18
_VERSION = 3  # flexible since 3; every Kafka since 2.4 and kbroker answer it
_HEALTHY, _UNHEALTHY = 0, 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("healthcheck", help="exit 0 when the broker answers ApiVersions without error")
    add_bootstrap_server(parser, "the broker to ask")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds for the whole round trip")
    parser.set_defaults(run=run)


def api_versions_error(bootstrap: str, timeout: float) -> int:
    """The error code of the broker's ApiVersions answer; raises OSError when it gives none in time."""
    host, _, port = bootstrap.rpartition(":")
    request = messages.ApiVersionsRequest(client_software_name="kbroker-healthcheck",
                                          client_software_version="1")
    response = call(host, int(port), API_VERSIONS, _VERSION, request, "kbroker-healthcheck", timeout)
    return int(response.error_code)


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
