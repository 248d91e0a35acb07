"""`kbroker produce`: one record per input line, as kafka-console-producer.sh (parse.key, key.separator,
parse.headers), with a progress bar and the rate on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kbroker.commands import _common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="send lines from stdin or a file as records")
    _common.add_connection_flags(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--file", type=Path, help="read records from this file instead of stdin")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="parse.key, key.separator (\\t), parse.headers, headers.delimiter (\\t), "
                             "headers.separator (,), headers.key.separator (:)")
    parser.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.set_defaults(run=_common.guarded(run))


def parse_line(line: str, properties: dict[str, str]) -> tuple[str | None, str, list[tuple[str, str]]]:
    """(key, value, headers) of one input line, with the console producer's properties and defaults."""
    headers: list[tuple[str, str]] = []
    if properties.get("parse.headers") == "true":
        raw_headers, _, line = line.partition(properties.get("headers.delimiter", "\t"))
        for pair in filter(None, raw_headers.split(properties.get("headers.separator", ","))):
            name, _, value = pair.partition(properties.get("headers.key.separator", ":"))
            headers.append((name, value))
    key = None
    if properties.get("parse.key") == "true":
        key, separator, line = line.partition(properties.get("key.separator", "\t"))
        if not separator:
            raise _common.UsageError(f"no key separator in line {key!r}")
    return key, line, headers


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException, Producer

    properties = _common.parse_properties(args.property)
    producer = Producer(_common.client_config(args, **_common.parse_properties(args.producer_property)))
    failures: list = []

    def on_delivery(error, _message) -> None:
        if error is not None:
            failures.append(error)

    lines = _input_lines(args)
    started = time.monotonic()
    sent = 0
    with _progress(args) as advance:
        for line in lines:
            key, value, headers = parse_line(line, properties)
            extra = {} if args.partition is None else {"partition": args.partition}
            _send(producer, args.topic, key, value, headers, on_delivery, extra)
            sent += 1
            advance()
        undelivered = producer.flush(60)
    if failures:
        raise KafkaException(failures[0])
    if undelivered:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"{undelivered} records not delivered in 60s"))
    elapsed = max(time.monotonic() - started, 1e-9)
    summary = {"topic": args.topic, "records": sent, "seconds": round(elapsed, 3),
               "records_per_second": round(sent / elapsed, 1)}
    if args.json:
        _common.print_json(summary)
    else:
        print(f"Sent {sent} records to {args.topic} in {elapsed:.2f}s ({sent / elapsed:.0f} records/s)",
              file=sys.stderr)
    return 0


def _send(producer, topic, key, value, headers, on_delivery, extra) -> None:
    while True:
        try:
            producer.produce(topic, value=value.encode(), key=None if key is None else key.encode(),
                             headers=headers or None, on_delivery=on_delivery, **extra)
            producer.poll(0)
            return
        except BufferError:  # librdkafka's queue is full: let deliveries drain
            producer.poll(0.1)


def _input_lines(args: argparse.Namespace):
    if args.file is None:
        yield from (line.rstrip("\n").rstrip("\r") for line in sys.stdin)
        return
    with args.file.open(encoding="utf-8") as source:
        yield from (line.rstrip("\n").rstrip("\r") for line in source)


class _progress:
    """A rich progress bar with the rate on stderr when a person is watching; nothing otherwise."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.enabled = not args.json and sys.stderr.isatty()

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(), TextColumn("producing"), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]}"),
                            TimeElapsedColumn(), console=Console(stderr=True))
        self.bar.__enter__()
        self.task = self.bar.add_task("produce", total=None, rate="")
        self.started = time.monotonic()
        self.count = 0

        def advance() -> None:
            self.count += 1
            rate = self.count / max(time.monotonic() - self.started, 1e-9)
            self.bar.update(self.task, advance=1, rate=f"{rate:.0f} rec/s")

        return advance

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
