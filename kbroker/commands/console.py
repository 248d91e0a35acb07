"""`kbroker console --bootstrap-server HOST:PORT --port 8080`: the web console against any Kafka-protocol broker
(kbroker or Apache Kafka). docs/console.md."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from kbroker.commands._common import add_bootstrap_server


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("console", help="serve a web console (topics, messages, groups) for any broker")
    add_bootstrap_server(parser, "the broker(s) to show")
    parser.add_argument("--host", default="127.0.0.1", help="address the console listens on; default 127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port; default 8080")
    parser.add_argument("--lag-interval", type=float, default=5.0, metavar="SECONDS",
                        help="how often the console samples consumer-group lag for its chart; default 5")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kbroker.console import start_console

    try:
        console = start_console(args.bootstrap_server, args.host, args.port, args.lag_interval)
    except OSError as error:
        print(f"kbroker console: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    print(f"kbroker console for {args.bootstrap_server} on {console.url}", flush=True)
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    stopped.wait()
    console.close()
    return 0
