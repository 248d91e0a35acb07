"""`kbroker serve`: the broker from the command line, configured with Kafka's property names; `kbroker cluster`:
several of them on this machine (kbroker/local_cluster.py). Every other verb (`kbroker topics`, `kbroker consume`,
...) lives in its own module of kbroker/commands/, which adds its parser through `register(subparsers)`."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import pkgutil
import sys
import traceback
from pathlib import Path

from kbroker import config as broker_config
from kbroker import logs


def _serve(args: argparse.Namespace) -> int:
    try:
        config = broker_config.load(args.config, args.override)
    except (broker_config.ConfigError, OSError) as error:
        print(f"kbroker: {error}", file=sys.stderr)
        return 2
    from kbroker.runner import BrokerHalted, StartupError, serve_forever

    _raise_open_file_limit()
    keep_freed_memory_mapped()
    uvloop = _uvloop() if args.event_loop != "asyncio" else None
    if args.event_loop == "uvloop" and uvloop is None:
        print("kbroker: --event-loop uvloop needs uvloop: pip install 'kbroker[fast]'", file=sys.stderr)
        return 2
    try:
        console = _start_console(config, args.console_port) if args.console_port is not None else None
    except OSError as error:
        print(f"kbroker: cannot serve the console on port {args.console_port}: {error}", file=sys.stderr)
        return 2
    try:
        if uvloop is not None:
            uvloop.run(serve_forever(config))
        else:
            asyncio.run(serve_forever(config))
    except StartupError as error:
        if not _is_expected_startup_failure(error.__cause__):
            traceback.print_exception(error.__cause__)  # a bug, not the environment: show where
        print(f"kbroker: fatal error during startup: {error}", file=sys.stderr)
        return 1
    except BrokerHalted:
        return 1  # as Kafka's Exit.halt(1); the log says which dirs failed
    finally:
        if console is not None:
            console.close()
    return 0


def _start_console(config: broker_config.BrokerConfig, port: int):
    """The web console (kbroker/console) in a background thread, a client of this broker's first listener
    through the Kafka protocol like any other: it never reaches into the broker."""
    from kbroker.console import start_console

    listener = config.listeners[0]
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    console = start_console(f"{host}:{listener.port}", "127.0.0.1", port)
    print(f"kbroker: console on {console.url}", file=sys.stderr, flush=True)
    return console


def _cluster(args: argparse.Namespace) -> int:
    from kbroker import local_cluster

    return local_cluster.run(args.brokers, args.data_dir, args.zookeeper, args.zookeeper_jars, args.base_port,
                             args.override, args.log_level)


def _is_expected_startup_failure(cause: BaseException | None) -> bool:
    """A port in use, a locked or inconsistent log dir: the message says it all."""
    from kbroker.log.checkpoints import CheckpointError
    from kbroker.log.errors import LogError

    return isinstance(cause, OSError | LogError | CheckpointError)


def _uvloop():
    """uvloop if installed: it answers small requests sooner (p99 end-to-end latency about half
    of asyncio's in bench/suites/latency.py)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_LARGEST_HEAP_BLOCK = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit
_FREE_HEAP_KEPT = 64 << 20


def keep_freed_memory_mapped() -> bool:
    """Serve large blocks (a produce request's buffer, a decompressed batch) from the heap and
    keep freed ones mapped for the next request. glibc otherwise maps each block of 1 MB fresh
    and unmaps it on free, and on a VM each of its 4 KiB pages costs a page fault of about 3 µs
    when first written: ~0.7 ms per 1 MB request, more than the request's own work. Only
    `kbroker serve` does this (it owns its process); False where the C library is not glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _LARGEST_HEAP_BLOCK) and mallopt(_M_TRIM_THRESHOLD, _FREE_HEAP_KEPT))


def _raise_open_file_limit() -> None:
    """Each partition keeps its active segment open; lift the soft limit to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _register_commands(commands: argparse._SubParsersAction) -> None:
    """Each module of kbroker/commands adds its own verb, so a verb is found by its file name."""
    import kbroker.commands

    for module in sorted(pkgutil.iter_modules(kbroker.commands.__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue  # a helper module (kbroker/commands/_common.py), not a verb
        importlib.import_module(f"kbroker.commands.{module.name}").register(commands)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker", description="A Kafka broker in Python.")
    parser.add_argument("--log-level", default="INFO", metavar="LEVEL[,LOGGER=LEVEL...]",
                        help="INFO by default; e.g. INFO,kbroker.request=DEBUG logs every request (docs/logging.md)")
    parser.add_argument("--log-format", choices=logs.FORMATS, default=os.environ.get("KBROKER_LOG_FORMAT", "text"),
                        help="text (Kafka's layout, default) or json (one object per line); env KBROKER_LOG_FORMAT")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker (single node on 127.0.0.1:9092 by default)")
    serve.add_argument("--config", type=Path, help="a Kafka server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set a property, as kafka-server-start.sh --override does")
    serve.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="auto",
                       help="auto (default): uvloop when installed (kbroker[fast]), else asyncio; both send "
                            "fetched records with sendfile, zero-copy")
    serve.add_argument("--console-port", type=int, metavar="PORT",
                       help="also serve the web console (docs/console.md) on 127.0.0.1:PORT; off by default")
    serve.set_defaults(run=_serve)
    cluster = commands.add_parser("cluster", help="run N brokers and a ZooKeeper-mode cluster on this machine")
    cluster.add_argument("--brokers", type=int, default=3, help="how many brokers (broker.id 1..N); default 3")
    cluster.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="a ZooKeeper already running")
    cluster.add_argument("--zookeeper-jars", type=Path, metavar="DIR",
                         help="start a ZooKeeper from these jars (a Kafka 3.x distribution's libs/)")
    cluster.add_argument("--data-dir", type=Path, default=Path("kbroker-cluster"),
                         help="each broker's data under DIR/broker-<id>; default ./kbroker-cluster")
    cluster.add_argument("--base-port", type=int, default=9092,
                         help="broker i listens on BASE+i-1; 0 picks free ports; default 9092")
    cluster.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                         help="a property for every broker")
    cluster.set_defaults(run=_cluster)
    _register_commands(commands)
    args = parser.parse_args(argv)
    try:
        logs.configure(args.log_level, args.log_format)
    except ValueError as error:
        parser.error(f"{error}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
