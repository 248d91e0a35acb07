"""Topic-level configs (Kafka's names) and how they override the broker's log defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.broker import TopicError
from kbroker.log.config import LogConfig

INVALID_CONFIG = 40


def _int(text: str) -> int:
    return int(text)


def _policy(text: str) -> str:
    parts = {p.strip() for p in text.split(",")}
    if not parts <= {"delete", "compact"}:
        raise ValueError("must be delete, compact or both")
    return ",".join(sorted(parts))


def _timestamp_type(text: str) -> str:
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return text


@dataclass(frozen=True)
class TopicConfig:
    name: str
    broker_synonym: str          # the broker property that supplies the default
    parse: Callable[[str], object]
    log_field: str | None        # the LogConfig field it sets, if the log uses it


TOPIC_CONFIGS: dict[str, TopicConfig] = {c.name: c for c in (
    TopicConfig("cleanup.policy", "log.cleanup.policy", _policy, "cleanup_policy"),
    TopicConfig("retention.ms", "log.retention.ms", _int, "retention_ms"),
    TopicConfig("retention.bytes", "log.retention.bytes", _int, "retention_bytes"),
    TopicConfig("segment.bytes", "log.segment.bytes", _int, "segment_bytes"),
    TopicConfig("segment.ms", "log.roll.ms", _int, "segment_ms"),
    TopicConfig("segment.index.bytes", "log.index.size.max.bytes", _int, "max_index_size"),
    TopicConfig("index.interval.bytes", "log.index.interval.bytes", _int, "index_interval_bytes"),
    TopicConfig("max.message.bytes", "message.max.bytes", _int, "max_message_bytes"),
    TopicConfig("message.timestamp.type", "log.message.timestamp.type", _timestamp_type,
                "message_timestamp_type"),
    TopicConfig("flush.messages", "log.flush.interval.messages", _int, "flush_interval_messages"),
    TopicConfig("flush.ms", "log.flush.interval.ms", _int, "flush_interval_ms"),
    TopicConfig("min.insync.replicas", "min.insync.replicas", _int, None),
    TopicConfig("compression.type", "compression.type", str, None),
    TopicConfig("delete.retention.ms", "log.cleaner.delete.retention.ms", _int, None),
    TopicConfig("unclean.leader.election.enable", "unclean.leader.election.enable", str, None),
)}


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        known = TOPIC_CONFIGS.get(name)
        if known is None:
            raise TopicError(INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            continue
        try:
            known.parse(value)
        except ValueError as error:
            raise TopicError(INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {error}") from None


def apply_topic_configs(defaults: LogConfig, configs: Mapping[str, str]) -> LogConfig:
    changes = {}
    for name, value in configs.items():
        known = TOPIC_CONFIGS.get(name)
        if known is not None and known.log_field is not None and value is not None:
            changes[known.log_field] = known.parse(value)
    return dataclasses.replace(defaults, **changes) if changes else defaults
