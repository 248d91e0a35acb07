"""What every client verb shares: Kafka's own flag names, one way to print (a rich table or --json) and one way to
fail (a Kafka error's name and message on stderr, exit code 1)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

KAFKA_ERROR_EXIT = 1


def add_bootstrap_server(parser: argparse.ArgumentParser, what: str = "the broker(s) to connect to") -> None:
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT",
                        help=f"{what}, as Kafka's tools; default 127.0.0.1:9092")


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_server(parser)
    parser.add_argument("--command-config", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra client property (librdkafka names), repeatable")
    parser.add_argument("--json", action="store_true", help="print one JSON document (JSON lines for consume)")


def client_config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """librdkafka settings from the common flags."""
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server}
    config.update(parse_properties(args.command_config))
    config.update(extra)
    return config


def parse_properties(pairs: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE pairs, as --property/--config take them; a pair without '=' is a usage error."""
    properties = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise UsageError(f"expected KEY=VALUE, got {pair!r}")
        properties[key.strip()] = value
    return properties


class UsageError(Exception):
    """Bad flags or values: exit code 2, as argparse does."""


def print_json(document: Any) -> None:
    json.dump(document, sys.stdout, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    Console().print(table)


def error_name_and_message(error: BaseException) -> str:
    """A KafkaException's KafkaError as NAME: message; anything else as its text."""
    from confluent_kafka import KafkaError, KafkaException

    kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if isinstance(kafka_error, KafkaError):
        return f"{kafka_error.name()}: {kafka_error.str()}"
    return f"{type(error).__name__}: {error}"


def guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn Kafka errors into exit code 1 and usage errors into exit code 2, with the reason on stderr."""
    from confluent_kafka import KafkaException

    def run_guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except UsageError as error:
            print(f"kbroker {args.command}: {error}", file=sys.stderr)
            return 2
        except KafkaException as error:
            print(f"kbroker {args.command}: {error_name_and_message(error)}", file=sys.stderr)
            return KAFKA_ERROR_EXIT
        except KeyboardInterrupt:
            return 130

    return run_guarded


def wait_all(futures: dict[Any, Any], timeout: float = 30.0) -> dict[Any, Any]:
    """Each AdminClient future's result; the first failure raises (a KafkaException)."""
    return {key: future.result(timeout=timeout) for key, future in futures.items()}
