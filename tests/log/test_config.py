"""LogConfig: Kafka's topic config names and defaults."""

from __future__ import annotations

import pytest

from kbroker.log import LogConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1_073_741_824
    assert config.segment_ms == config.retention_ms == 604_800_000
    assert (config.index_interval_bytes, config.max_index_size) == (4096, 10_485_760)
    assert (config.retention_bytes, config.max_message_bytes) == (-1, 1_048_588)
    assert config.flush_interval_messages == 2**63 - 1 and config.flush_ms is None
    assert (config.message_timestamp_type, config.cleanup_policy) == ("CreateTime", "delete")


def test_topic_properties_override_by_kafka_name() -> None:
    config = LogConfig().with_overrides(
        {"segment.bytes": "1000", "cleanup.policy": "compact,delete", "flush.ms": str(2**63 - 1), "x.y": "z"}
    )
    assert config.segment_bytes == 1000
    assert config.cleanup_policies == ("compact", "delete") and config.deletes_by_retention
    assert config.flush_ms is None


@pytest.mark.parametrize(
    "props", [{"message.timestamp.type": "Wallclock"}, {"cleanup.policy": "shred"}, {"segment.bytes": "0"}]
)
def test_invalid_topic_properties_raise(props: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        LogConfig().with_overrides(props)
