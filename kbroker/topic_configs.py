"""Topic-level configs (Kafka's names) and how they override the broker's log defaults."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.broker import TopicError
from kbroker.log.config import LogConfig
from kbroker.metadata_versions import metadata_version_problem

INVALID_CONFIG = 40
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


def _integer(minimum: int, bounds: tuple[int, int], kind: str, maximum: int | None = None) -> Callable[[str], int]:
    """A parser with Kafka's ConfigDef checks: a number of the type, then `atLeast(minimum)` (or
    `between(minimum, maximum)`)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"Not a number of type {kind}") from None
        if not bounds[0] <= value <= bounds[1]:
            raise ValueError(f"Not a number of type {kind}")
        if value < minimum:
            raise ValueError(f"Value must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"Value must be no more than {maximum}")
        return value

    return parse


def _int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    return _integer(minimum, _INT_RANGE, "INT", maximum)


def _long(minimum: int) -> Callable[[str], int]:
    return _integer(minimum, _LONG_RANGE, "LONG")


def _gzip_level(text: str) -> int:
    """Kafka's GzipCompression level check: 1 to 9, or -1 for the codec's default."""
    value = _integer(-(2**31), _INT_RANGE, "INT")(text)
    if value != -1 and not 1 <= value <= 9:
        raise ValueError("Value must be between 1 and 9 or equal to -1")
    return value


class InvalidListValue(ValueError):
    """A LIST config refused: Kafka shows the value as the list it parsed, `[a, b]`."""

    def __init__(self, items: list[str], reason: str) -> None:
        super().__init__(reason)
        self.shown = "[" + ", ".join(items) + "]"


def _list_items(text: str) -> list[str]:
    """ConfigDef's LIST parsing: comma-separated, each item trimmed; an empty value is an empty list."""
    trimmed = text.strip()
    return [item.strip() for item in trimmed.split(",")] if trimmed else []


def _throttled_replicas(name: str) -> Callable[[str], list[str]]:
    """Kafka's ThrottledReplicaListValidator: the literal '*' or partitionId:brokerId pairs."""

    def parse(text: str) -> list[str]:
        items = _list_items(text)
        if items == ["*"] or all(re.fullmatch(r"[0-9]+:[0-9]+", item) for item in items):
            return items
        raise InvalidListValue(items, f"{name} must be the literal '*' or a list of replicas in the following "
                                      "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")

    return parse


def _ratio(text: str) -> float:
    """A DOUBLE with Kafka's `between(0, 1)` check."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None
    if value < 0:
        raise ValueError("Value must be at least 0")
    if value > 1:
        raise ValueError("Value must be no more than 1")
    return value


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"String must be one of: {', '.join(choices)}")
        return text

    return parse


def _bool(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return text.strip().lower() == "true"


def _message_format_version(text: str) -> str:
    """Kafka 3.9's check of the deprecated message.format.version: a version name it knows."""
    problem = metadata_version_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _policy(text: str) -> str:
    parts = {p.strip() for p in text.split(",")}
    if not parts <= {"delete", "compact"}:
        raise ValueError("must be delete, compact or both")
    return ",".join(sorted(parts))


@dataclass(frozen=True)
class TopicConfig:
    name: str
    broker_synonym: str | None   # the broker property that supplies the default (None: `default` does)
    parse: Callable[[str], object]
    log_field: str | None        # the LogConfig field it sets, if the log uses it
    config_type: str = "STRING"  # Kafka's ConfigDef type, reported by DescribeConfigs v3+
    doc: str = ""                # DescribeConfigs documentation (v3+)
    default: str | None = None   # the value when no broker property supplies one


TOPIC_CONFIGS: dict[str, TopicConfig] = {c.name: c for c in (
    TopicConfig("cleanup.policy", "log.cleanup.policy", _policy, "cleanup_policy", "LIST",
                "delete: old segments are removed by time or size; compact: only the latest record per key "
                "is kept; or both."),
    TopicConfig("segment.bytes", "log.segment.bytes", _int(14), "segment_bytes", "INT",
                "The size of one segment file; retention and compaction work a whole segment at a time."),
    TopicConfig("retention.ms", "log.retention.ms", _long(-1), "retention_ms", "LONG",
                "How long a segment is kept before it is deleted (policy delete); -1: no time limit."),
    TopicConfig("retention.bytes", "log.retention.bytes", _long(-1), "retention_bytes", "LONG",
                "The size a partition may grow to before old segments are deleted; -1: no size limit."),
    TopicConfig("segment.ms", "log.roll.ms", _long(1), "segment_ms", "LONG",
                "The age after which the active segment is rolled even if it is not full."),
    TopicConfig("segment.index.bytes", "log.index.size.max.bytes", _int(4), "max_index_size", "INT",
                "The size of a segment's offset index (and the cap of its time index)."),
    TopicConfig("index.interval.bytes", "log.index.interval.bytes", _int(0), "index_interval_bytes", "INT",
                "How many bytes of records lie between two offset index entries."),
    TopicConfig("max.message.bytes", "message.max.bytes", _int(0), "max_message_bytes", "INT",
                "The largest record batch the topic accepts, after compression."),
    TopicConfig("message.timestamp.type", "log.message.timestamp.type", _one_of("CreateTime", "LogAppendTime"),
                "message_timestamp_type", "STRING",
                "CreateTime: records keep the producer's timestamp; LogAppendTime: the broker stamps them."),
    TopicConfig("flush.messages", "log.flush.interval.messages", _long(1), "flush_interval_messages", "LONG",
                "Force an fsync after this many records; by default flushing is left to the OS."),
    TopicConfig("flush.ms", "log.flush.interval.ms", _long(0), "flush_interval_ms", "LONG",
                "Force an fsync when the oldest unflushed record is this old; by default left to the OS."),
    TopicConfig("min.insync.replicas", "min.insync.replicas", _int(1), None, "INT",
                "The fewest in-sync replicas an acks=all produce needs."),
    TopicConfig("compression.type", "compression.type",
                _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), None, "STRING",
                "The topic's compression codec; producer: keep what the producer sent."),
    TopicConfig("delete.retention.ms", "log.cleaner.delete.retention.ms", _long(0), "delete_retention_ms", "LONG",
                "How long compaction keeps delete markers (tombstones) after the cleaning that first keeps them."),
    TopicConfig("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", _ratio, "min_cleanable_dirty_ratio",
                "DOUBLE", "The share of the log that must be uncompacted before the cleaner compacts it."),
    TopicConfig("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", _long(0), "min_compaction_lag_ms",
                "LONG", "The least time a record stays uncompacted."),
    TopicConfig("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", _long(1), "max_compaction_lag_ms",
                "LONG", "The longest time a record may stay uncompacted, whatever the dirty ratio."),
    TopicConfig("file.delete.delay.ms", "log.segment.delete.delay.ms", _long(0), "file_delete_delay_ms", "LONG",
                "How long a deleted or replaced segment's files stay on disk (for reads under way)."),
    TopicConfig("unclean.leader.election.enable", "unclean.leader.election.enable", _bool, None, "BOOLEAN",
                "Whether a replica outside the ISR may become leader, at the risk of losing data."),
    TopicConfig("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", _long(0),
                "message_timestamp_before_max_ms", "LONG",
                "How far before the broker's clock a CreateTime record's timestamp may lie; an older record "
                "is refused with INVALID_TIMESTAMP."),
    TopicConfig("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", _long(0),
                "message_timestamp_after_max_ms", "LONG",
                "How far after the broker's clock a CreateTime record's timestamp may lie; a later record "
                "is refused with INVALID_TIMESTAMP."),
    # deprecated in Kafka 3 and removed in 4: accepted as Kafka 3.9 accepts them (see docs/compatibility.md)
    TopicConfig("message.timestamp.difference.max.ms", "log.message.timestamp.difference.max.ms", _long(0),
                "message_timestamp_difference_max_ms", "LONG",
                "[DEPRECATED] Both timestamp bounds at once, for each of message.timestamp.before.max.ms and "
                "message.timestamp.after.max.ms left at its largest value."),
    TopicConfig("message.format.version", "log.message.format.version", _message_format_version, None, "STRING",
                "[DEPRECATED] Accepted and reported only: records are always stored in format v2."),
    TopicConfig("message.downconversion.enable", "log.message.downconversion.enable", _bool, None, "BOOLEAN",
                "[DEPRECATED] Accepted and reported only: records are never converted to an older format."),
    # the replicas the replication quotas throttle (kbroker.replication_quotas; a single node replicates nothing)
    TopicConfig("leader.replication.throttled.replicas", None, _throttled_replicas(
        "leader.replication.throttled.replicas"), None, "LIST",
                "Replicas (partition:broker, or *) whose leader sends them at most leader.replication.throttled.rate.",
                default=""),
    TopicConfig("follower.replication.throttled.replicas", None, _throttled_replicas(
        "follower.replication.throttled.replicas"), None, "LIST",
                "Replicas (partition:broker, or *) that fetch at most follower.replication.throttled.rate.",
                default=""),
    # Kafka 4.4's other topic configs: checked as Kafka checks them, kept and reported, without effect here
    TopicConfig("compression.gzip.level", "compression.gzip.level", _gzip_level, None, "INT",
                "The gzip level when compression.type is gzip (kbroker keeps batches as produced)."),
    TopicConfig("compression.lz4.level", "compression.lz4.level", _int(1, 17), None, "INT",
                "The lz4 level when compression.type is lz4 (kbroker keeps batches as produced)."),
    TopicConfig("compression.zstd.level", "compression.zstd.level", _int(-131072, 22), None, "INT",
                "The zstd level when compression.type is zstd (kbroker keeps batches as produced)."),
    TopicConfig("preallocate", "log.preallocate", _bool, None, "BOOLEAN",
                "Whether a new segment file is preallocated on disk (kbroker does not)."),
    TopicConfig("segment.jitter.ms", "log.roll.jitter.ms", _long(0), None, "LONG",
                "A random amount subtracted from segment.ms, so segments do not roll all at once (not applied).",
                default="0"),
    TopicConfig("remote.storage.enable", None, _bool, None, "BOOLEAN",
                "Tiered storage for the topic; refused while the broker has none (kbroker never has).",
                default="false"),
    TopicConfig("local.retention.ms", "log.local.retention.ms", _long(-2), None, "LONG",
                "With tiered storage, how long segments stay on local disk; -2: retention.ms."),
    TopicConfig("local.retention.bytes", "log.local.retention.bytes", _long(-2), None, "LONG",
                "With tiered storage, how much of a partition stays on local disk; -2: retention.bytes."),
    TopicConfig("remote.copy.lag.ms", "log.remote.copy.lag.ms", _long(-1), None, "LONG",
                "With tiered storage, how long a rolled segment may wait before it is copied."),
    TopicConfig("remote.copy.lag.bytes", "log.remote.copy.lag.bytes", _long(-1), None, "LONG",
                "With tiered storage, how many rolled bytes may wait before they are copied."),
    TopicConfig("remote.log.copy.disable", None, _bool, None, "BOOLEAN",
                "With tiered storage, stop copying segments to remote storage.", default="false"),
    TopicConfig("remote.log.delete.on.disable", None, _bool, None, "BOOLEAN",
                "With tiered storage, delete the remote copy when tiered storage is turned off.", default="false"),
    TopicConfig("max.decompressed.message.bytes", "max.decompressed.message.bytes", _int(1, 2147483639), None,
                "INT", "The largest a batch may grow to when decompressed (not checked here)."),
    TopicConfig("errors.deadletterqueue.group.enable", None, _bool, None, "BOOLEAN",
                "Whether groups may send records they cannot process to a dead-letter queue (not served here).",
                default="false"),
)}
TIERED_STORAGE_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                           "with remote log storage.")


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        known = TOPIC_CONFIGS.get(name)
        if known is None:
            raise TopicError(INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            continue
        try:
            parsed = known.parse(value)
        except InvalidListValue as error:
            raise TopicError(INVALID_CONFIG, f"Invalid value {error.shown} for configuration {name}: {error}") from None
        except ValueError as error:
            raise TopicError(INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {error}") from None
        if name == "remote.storage.enable" and parsed:
            raise TopicError(INVALID_CONFIG, TIERED_STORAGE_DISABLED)
    try:  # the log's own limits, so a value accepted here can never fail when the log applies it
        apply_topic_configs(LogConfig(), configs)
    except ValueError as error:
        raise TopicError(INVALID_CONFIG, str(error)) from None


def apply_topic_configs(defaults: LogConfig, configs: Mapping[str, str]) -> LogConfig:
    changes = {}
    for name, value in configs.items():
        known = TOPIC_CONFIGS.get(name)
        if known is not None and known.log_field is not None and value is not None:
            changes[known.log_field] = known.parse(value)
    return dataclasses.replace(defaults, **changes) if changes else defaults
