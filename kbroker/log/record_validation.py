"""Kafka's per-record produce rules (its LogValidator's validateRecord), with Kafka's messages.

A produced batch is refused as a whole when any of its records breaks a rule, and every such
record is named, by its index in the batch, in the produce response (KIP-467):

- a compacted topic needs a key on every record (INVALID_RECORD);
- on a CreateTime topic, a record's timestamp (unless -1) must lie within
  [now - before.max.ms, now + after.max.ms] (INVALID_TIMESTAMP);
- a LogAppendTime topic refuses batches the producer marked LogAppendTime (INVALID_TIMESTAMP).

A record gets one error at most, its key's first. Reading every record again costs a Python loop,
so `RecordRules.check` first decides from the batch header and its largest timestamp (which the
produce path reads anyway) whether any record can break a rule at all: with Kafka 4's default
bounds only compacted topics, batches that reach more than an hour ahead and LogAppendTime-marked
batches are read record by record (and every batch of a topic that bounds past timestamps). The
shortcut uses exact arithmetic where Kafka's wraps: a record stamped so far back that `now - timestamp`
overflows a Java long (Kafka then refuses it as lying in the future) passes unless its batch is read.
"""

from __future__ import annotations

from collections.abc import Iterator

from kbroker.log.config import LONG_MAX, LogConfig
from kbroker.log.errors import RecordError, RecordValidationError
from kbroker.log.record_keys import record_keys
from wire.records import LOG_APPEND_TIME, LOG_OVERHEAD, BatchHeader, Record, decode_batch

__all__ = ["RecordRules"]

NO_TIMESTAMP = -1
_ATTR_LOG_APPEND_TIME = 0x08  # the batch attributes' timestamp type bit
_LONG = 2**64


def java_long(value: int) -> int:
    """`value` as Java's long arithmetic leaves it (two's complement, 64 bits): Kafka's bounds and
    messages overflow where a bound is Long.MAX_VALUE, and its messages show the wrapped number."""
    return (value + 2**63) % _LONG - 2**63


class RecordRules:
    """What Kafka checks record by record on one partition, from its config."""

    __slots__ = ("_future_bound", "_reads_every_batch", "after_max_ms", "before_max_ms", "create_time",
                 "keys_required", "partition")

    def __init__(self, partition: str, keys_required: bool, create_time: bool, before_max_ms: int,
                 after_max_ms: int) -> None:
        self.partition = partition  # "<topic>-<partition>", as Kafka names it in its messages
        self.keys_required = keys_required
        self.create_time = create_time
        self.before_max_ms = before_max_ms
        self.after_max_ms = after_max_ms
        # the batch-level shortcut: every batch is read when a key or a past bound could fail;
        # otherwise only those reaching past `now + _future_bound` (None: no bound, LogAppendTime)
        self._reads_every_batch = keys_required or (create_time and before_max_ms != LONG_MAX)
        self._future_bound = after_max_ms if create_time else None

    @classmethod
    def of(cls, partition: str, config: LogConfig) -> RecordRules:
        return cls(partition, config.compact, not config.log_append_time,
                   config.timestamp_before_max_ms, config.timestamp_after_max_ms)

    def check(self, view: memoryview, position: int, header: BatchHeader, batch_max_timestamp: int, now: int) -> None:
        """Raise RecordValidationError naming every record of the batch at `position` that breaks a rule.
        `batch_max_timestamp`, its largest record timestamp as read from its records, spares reading
        them again when no record can be out of bounds."""
        marked_append_time = bool(header.attributes & _ATTR_LOG_APPEND_TIME)
        bound = self._future_bound
        if not (self._reads_every_batch or marked_append_time
                or (bound is not None and batch_max_timestamp - now > bound)):
            return  # the hot path: nothing in this batch can break a rule
        batch = view[position : position + header.batch_length + LOG_OVERHEAD]
        if marked_append_time or (self.create_time and not self._within_bounds(batch_max_timestamp, now)):
            problems = self._record_problems(batch, header, now)
        else:
            problems = self._missing_keys(batch, header)
        errors: list[RecordError] = []
        invalid_timestamp = False
        for index, message, is_timestamp in problems:
            errors.append(RecordError(index, message))
            invalid_timestamp |= is_timestamp
        if errors:
            raise RecordValidationError(errors, invalid_timestamp)

    def _within_bounds(self, batch_max_timestamp: int, now: int) -> bool:
        """Whether no record of the batch can be out of bounds, knowing only its largest timestamp."""
        return self.before_max_ms == LONG_MAX and not self._too_late(batch_max_timestamp, now)

    def _missing_keys(self, batch: memoryview, header: BatchHeader) -> Iterator[tuple[int, str, bool]]:
        """The lighter walk, when only keys can be at fault: (index, message, False) per keyless record."""
        for index, record in enumerate(record_keys(batch, header)):
            if record.key is None:
                yield index, self._missing_key(), False

    def _record_problems(self, batch: memoryview, header: BatchHeader, now: int) -> Iterator[tuple[int, str, bool]]:
        """(index, message, whether it is a timestamp's fault) per offending record, the key checked first."""
        _, records = decode_batch(batch)
        for index, record in enumerate(records):
            if self.keys_required and record.key is None:
                yield index, self._missing_key(), False
                continue
            problem = self._timestamp_problem(header, record, now)
            if problem is not None:
                yield index, problem, True

    def _missing_key(self) -> str:
        return f"Compacted topic cannot accept message without key in topic partition {self.partition}"

    def _too_early(self, timestamp: int, now: int) -> bool:
        return java_long(now - timestamp) > self.before_max_ms

    def _too_late(self, timestamp: int, now: int) -> bool:
        return java_long(-java_long(now - timestamp)) > self.after_max_ms

    def _timestamp_problem(self, header: BatchHeader, record: Record, now: int) -> str | None:
        if self.create_time and record.timestamp != NO_TIMESTAMP:
            if self._too_early(record.timestamp, now) or self._too_late(record.timestamp, now):
                return (f"Timestamp {record.timestamp} of message with offset {record.offset} is out of range. "
                        f"The timestamp should be within [{java_long(now - self.before_max_ms)}, "
                        f"{java_long(now + self.after_max_ms)}]")
        elif header.timestamp_type == LOG_APPEND_TIME:
            return (f"Invalid timestamp type in message {_java_record(record)}. "
                    "Producer should not set timestamp type to LogAppendTime.")
        return None


def _java_record(record: Record) -> str:
    """A record as Kafka's DefaultRecord.toString prints it."""
    key = len(record.key) if record.key is not None else 0
    value = len(record.value) if record.value is not None else 0
    return f"DefaultRecord(offset={record.offset}, timestamp={record.timestamp}, key={key} bytes, value={value} bytes)"
