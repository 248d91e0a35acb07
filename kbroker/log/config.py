"""Per-topic log settings, named after Kafka's topic configs and with Kafka's defaults.

`LogConfig.with_overrides` takes topic-level properties exactly as clients send them in
CreateTopics/AlterConfigs ("segment.bytes", "retention.ms", ...); broker-level names
("log.segment.bytes", ...) belong to kbroker/config.py, which builds the default LogConfig.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LONG_MAX", "TOPIC_CONFIG_NAMES", "LogConfig"]

LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# Kafka topic config name -> LogConfig field.
TOPIC_CONFIG_NAMES: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "max_index_size",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "message.timestamp.type": "message_timestamp_type",
    "max.message.bytes": "max_message_bytes",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
}
_STRING_FIELDS = {"message_timestamp_type", "cleanup_policy"}
_FLOAT_FIELDS = {"min_cleanable_dirty_ratio"}


@dataclass(frozen=True)
class LogConfig:
    """How one partition's log rolls, indexes, flushes and expires; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    max_index_size: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int | None = None
    message_timestamp_type: str = CREATE_TIME
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: str = "delete"
    producer_id_expiration_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    # compaction (kbroker.log.cleaner)
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # how far a CreateTime record's timestamp may lie before / after the broker's clock (Kafka's
    # LogValidator); LONG_MAX: no bound. The broker passes Kafka 4's defaults (after: one hour);
    # difference.max.ms is Kafka 3's deprecated single bound, used where the other two are LONG_MAX.
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(
                f"message.timestamp.type must be CreateTime or LogAppendTime, "
                f"not {self.message_timestamp_type!r}"
            )
        if not set(self.cleanup_policies) <= {"delete", "compact"} or not self.cleanup_policies:
            raise ValueError(f"cleanup.policy must be delete and/or compact, not {self.cleanup_policy!r}")
        if not 1 <= self.segment_bytes <= _INT_MAX:
            raise ValueError(f"segment.bytes must be in [1, {_INT_MAX}], not {self.segment_bytes}")
        if self.max_index_size < 12 or self.index_interval_bytes < 0 or self.segment_ms < 1:
            raise ValueError("segment.index.bytes >= 12, index.interval.bytes >= 0, segment.ms >= 1")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError(f"min.cleanable.dirty.ratio must be in [0, 1], not {self.min_cleanable_dirty_ratio}")
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0 or self.max_compaction_lag_ms < 1:
            raise ValueError("delete.retention.ms >= 0, min.compaction.lag.ms >= 0, max.compaction.lag.ms >= 1")
        if min(self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms,
               self.message_timestamp_difference_max_ms) < 0:
            raise ValueError("message.timestamp.before.max.ms, .after.max.ms and .difference.max.ms must be >= 0")

    @functools.cached_property  # read on every append; the config is frozen
    def cleanup_policies(self) -> tuple[str, ...]:
        """`cleanup.policy` is a list: "delete", "compact" or "compact,delete"."""
        return tuple(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @functools.cached_property
    def deletes_by_retention(self) -> bool:
        return "delete" in self.cleanup_policies

    @functools.cached_property
    def compact(self) -> bool:
        """Whether the log cleaner keeps only the latest record per key (kbroker.log.cleaner)."""
        return "compact" in self.cleanup_policies

    @functools.cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @functools.cached_property
    def timestamp_before_max_ms(self) -> int:
        """The bound in force on past timestamps: before.max.ms, or difference.max.ms while it is unset."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @functools.cached_property
    def timestamp_after_max_ms(self) -> int:
        """The bound in force on future timestamps: after.max.ms, or difference.max.ms while it is unset."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @functools.cached_property
    def flush_ms(self) -> int | None:
        """flush.ms, with Kafka's "never" (Long.MAX_VALUE) folded into None."""
        if self.flush_interval_ms is None or self.flush_interval_ms >= LONG_MAX:
            return None
        return self.flush_interval_ms

    def with_overrides(self, props: Mapping[str, str]) -> LogConfig:
        """A copy with Kafka topic properties applied; unknown names are ignored, bad values raise."""
        changes: dict[str, object] = {}
        for name, raw in props.items():
            field = TOPIC_CONFIG_NAMES.get(name)
            if field is None or raw is None:
                continue
            if field in _STRING_FIELDS:
                changes[field] = raw
            else:
                changes[field] = float(raw) if field in _FLOAT_FIELDS else int(raw)
        return dataclasses.replace(self, **changes) if changes else self
