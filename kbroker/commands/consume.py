"""`kbroker consume`: print records as kafka-console-consumer.sh does (print.key, key.separator, print.headers, ...),
from the beginning, an offset, a time, or a group's committed position; --json prints one JSON object per record."""

from __future__ import annotations

import argparse
import base64
import sys
import time
from datetime import datetime

from kbroker.commands import _common

FORMATS = ("console", "raw", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consume", help="print records of a topic")
    _common.add_connection_flags(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="consume as this group, from its committed offsets, and commit")
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    parser.add_argument("--partition", type=int, help="only this partition")
    parser.add_argument("--offset", default="latest",
                        help="earliest, latest (default) or a number; needs --partition for a number")
    parser.add_argument("--from-datetime", metavar="ISO-8601", help="start at the first record at or after this time")
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int, default=10000, help="stop when no record came for this long")
    parser.add_argument("--format", choices=FORMATS, default="console",
                        help="console (the properties below), raw (values only) or json (same as --json)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="print.key, key.separator, print.headers, print.timestamp, print.partition, "
                             "print.offset, print.value, line.separator")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.set_defaults(run=_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, KafkaException

    properties = _common.parse_properties(args.property)
    as_json = args.json or args.format == "json"
    start = _start_offset(args)
    consumer = Consumer(_common.client_config(
        args, **{"group.id": args.group or "kbroker-cli", "enable.auto.commit": bool(args.group),
                 "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                 "enable.partition.eof": False}, **_common.parse_properties(args.consumer_property)))
    try:
        _assign(consumer, args, start)
        printed = 0
        last_record = time.monotonic()
        while args.max_messages is None or printed < args.max_messages:
            message = consumer.poll(0.2)
            if message is None:
                if time.monotonic() - last_record > args.timeout_ms / 1000:
                    break
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            last_record = time.monotonic()
            _print(message, properties, as_json, args.format == "raw")
            printed += 1
    finally:
        consumer.close()  # with --group, commits what was printed (auto commit)
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _start_offset(args: argparse.Namespace) -> int | None:
    """librdkafka's logical offset or a number; None to follow the group's committed offsets."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if args.from_datetime:
        try:
            moment = datetime.fromisoformat(args.from_datetime)
        except ValueError as error:
            raise _common.UsageError(f"--from-datetime: {error}") from None
        return -int(moment.timestamp() * 1000)  # negative: a timestamp to resolve, see _assign
    if args.from_beginning:
        return OFFSET_BEGINNING
    if args.group and args.offset == "latest":
        return None
    if args.offset == "earliest":
        return OFFSET_BEGINNING
    if args.offset == "latest":
        return OFFSET_END
    if not args.offset.isdigit():
        raise _common.UsageError(f"--offset: earliest, latest or a number, not {args.offset!r}")
    if args.partition is None:
        raise _common.UsageError("--offset with a number needs --partition")
    return int(args.offset)


def _assign(consumer, args: argparse.Namespace, start: int | None) -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    if start is None:
        consumer.subscribe([args.topic])
        return
    topic = consumer.list_topics(args.topic, timeout=30).topics[args.topic]
    if topic.error is not None:
        raise KafkaException(topic.error)
    partitions = [args.partition] if args.partition is not None else sorted(topic.partitions)
    if args.partition is not None and args.partition not in topic.partitions:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    if args.from_datetime:
        wanted = [TopicPartition(args.topic, p, -start) for p in partitions]
        assignment = consumer.offsets_for_times(wanted, timeout=30)
    else:
        assignment = [TopicPartition(args.topic, p, start) for p in partitions]
    consumer.assign(assignment)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def record_as_json(message) -> dict:
    """A record as JSON: text as text; a value that is not UTF-8 as {"base64": ...}."""
    def encoded(data: bytes | None):
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode()}

    return {"topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
            "timestamp": message.timestamp()[1], "key": encoded(message.key()), "value": encoded(message.value()),
            "headers": [[name, encoded(value)] for name, value in message.headers() or []]}


def format_console(message, properties: dict[str, str]) -> str:
    """The console consumer's DefaultMessageFormatter layout."""
    separator = properties.get("key.separator", "\t")
    fields = []
    if properties.get("print.timestamp") == "true":
        fields.append(f"CreateTime:{message.timestamp()[1]}")
    if properties.get("print.partition") == "true":
        fields.append(f"Partition:{message.partition()}")
    if properties.get("print.offset") == "true":
        fields.append(f"Offset:{message.offset()}")
    if properties.get("print.headers") == "true":
        headers = message.headers() or []
        fields.append(",".join(f"{name}:{_text(value)}" for name, value in headers) if headers else "NO_HEADERS")
    if properties.get("print.key") == "true":
        fields.append(str(_text(message.key())))
    if properties.get("print.value", "true") == "true":
        fields.append(str(_text(message.value())))
    return separator.join(fields)


def _print(message, properties: dict[str, str], as_json: bool, raw: bool) -> None:
    if as_json:
        _common.print_json(record_as_json(message))
        return
    if raw:
        sys.stdout.buffer.write((message.value() or b"") + b"\n")
    else:
        sys.stdout.write(format_console(message, properties) + properties.get("line.separator", "\n"))
    sys.stdout.flush()
