"""The broker's log output: Kafka-like text lines or one JSON object per line, per-logger levels, and the
request log (Kafka's kafka.request.logger), silent unless asked for. docs/logging.md lists the events."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import IO

TEXT_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"  # Kafka's log4j "[%d] %p %m (%c)%n"
FORMATS = ("text", "json")
REQUEST_LOGGER = "kbroker.request"
request_log = logging.getLogger(REQUEST_LOGGER)
request_log.setLevel(logging.WARNING)  # as Kafka's log4j.properties ships kafka.request.logger: off until asked

# what every LogRecord carries; anything else on a record came from `extra=` and goes into the JSON object
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO-8601 UTC, ms), level, logger, message, the `extra=` fields, and the
    exception's traceback as `exception` when there is one: a log shipper needs no pattern to parse it."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES and not name.startswith("_"):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=_jsonable)


def _iso_utc(created: float) -> str:
    seconds = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((created - seconds) * 1000):03d}Z"


def _jsonable(value: object) -> object:
    """Sets and tuples (an ISR, replicas) as lists; anything else by its str."""
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    return str(value)


def parse_levels(spec: str) -> tuple[int, dict[str, int]]:
    """"INFO,kbroker.request=DEBUG" -> (root level, {logger: level}). A bare level is the root's (INFO when
    none is given); `logger=LEVEL` items set one logger, as a log4j.properties line would."""
    root = logging.INFO
    per_logger: dict[str, int] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, equals, level = item.rpartition("=")
        if equals and not name.strip():
            raise ValueError(f"no logger name in {item!r}")
        number = _level(level.strip())
        if name:
            per_logger[name.strip()] = number
        else:
            root = number
    return root, per_logger


def _level(name: str) -> int:
    number = logging.getLevelName(name.upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {name!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return number


def configure(levels: str = "INFO", log_format: str = "text", stream: IO[str] | None = None) -> None:
    """Send every log line to `stream` (stderr) in `log_format`, at the levels of `levels` (see parse_levels).
    Raises ValueError on a level or format it does not know."""
    if log_format not in FORMATS:
        raise ValueError(f"unknown log format {log_format!r}: use {' or '.join(FORMATS)}")
    root_level, per_logger = parse_levels(levels)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(root_level)
    request_log.setLevel(logging.WARNING)
    for name, level in per_logger.items():
        logging.getLogger(name).setLevel(level)


def log_request(api: str, version: int, client_id: str | None, correlation_id: int, client_host: str,
                started: float) -> None:
    """One DEBUG line per request on kbroker.request (the caller checked it is enabled, once per request)."""
    elapsed_ms = (time.perf_counter() - started) * 1000
    request_log.debug(
        "Completed request: %s v%d, clientId=%s, correlationId=%d from connection %s; totalTime=%.3f ms",
        api, version, client_id, correlation_id, client_host or "?", elapsed_ms,
        extra={"api": api, "api_version": version, "client_id": client_id, "correlation_id": correlation_id,
               "client_host": client_host, "time_ms": round(elapsed_ms, 3)})


def request_logging_enabled() -> bool:
    """Whether kbroker.request logs at DEBUG: the logging module caches the answer until a level changes."""
    return request_log.isEnabledFor(logging.DEBUG)


def partition_fields(directory: Path) -> dict[str, object]:
    """The `extra=` fields of a partition's log lines, read from its directory name (<topic>-<partition>)."""
    topic, _, index = directory.name.rpartition("-")
    return {"topic": topic, "partition": int(index) if index.isdigit() else index, "dir": str(directory.parent)}
