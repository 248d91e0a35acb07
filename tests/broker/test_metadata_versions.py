"""The deprecated message.format.version: Kafka 3.9's version names, at topic and broker level."""

from __future__ import annotations

import pytest

from kbroker import config as broker_config
from kbroker.broker import TopicError
from kbroker.metadata_versions import metadata_version_problem
from kbroker.topic_configs import validate_topic_configs


@pytest.mark.parametrize("name", ["0.8.0", "0.10.0", "0.10.0-IV1", "0.10.0.1", "1.0", "1.0.1", "2.8", "2.8-IV1",
                                  "2.8.1", "3.0-IV1.x", "3.7-IV4", "3.9", "3.9-IV0", "4.0-IV0", "4.0-IV1", " 2.8"])
def test_kafka_3_9_version_names_are_taken(name: str) -> None:
    assert metadata_version_problem(name) is None


@pytest.mark.parametrize("name", ["4.0", "4.0-IV2", "3.10", "3.9-IV1", "0.10", "0.9.0-IV0", "2.8-iv1", "1", "", "2.8."])
def test_other_names_get_kafka_3_9s_complaint(name: str) -> None:
    assert metadata_version_problem(name) == f"Version {name.strip()} is not a valid version"


def test_a_topic_takes_the_deprecated_configs_kafka_3_9_takes() -> None:
    validate_topic_configs({"message.format.version": "2.8", "message.downconversion.enable": "false",
                            "message.timestamp.difference.max.ms": "60000"})


def test_a_topic_refuses_an_unknown_message_format_version_with_kafkas_message() -> None:
    with pytest.raises(TopicError) as refused:
        validate_topic_configs({"message.format.version": "9.9"})
    assert str(refused.value) == ("Invalid value 9.9 for configuration message.format.version: "
                                  "Version 9.9 is not a valid version")


def test_the_broker_defaults_are_kafka_3_9s_for_the_deprecated_and_kafka_4s_for_the_timestamp_bounds() -> None:
    config = broker_config.build({})
    assert (config["log.message.format.version"], config["log.message.downconversion.enable"]) == ("3.0-IV1", True)
    assert config["log.message.timestamp.difference.max.ms"] == 2**63 - 1
    assert config["log.message.timestamp.before.max.ms"] == 2**63 - 1
    assert config["log.message.timestamp.after.max.ms"] == 3_600_000


def test_the_broker_refuses_an_unknown_log_message_format_version() -> None:
    with pytest.raises(broker_config.ConfigError) as refused:
        broker_config.build({"log.message.format.version": "4.0"})
    assert "log.message.format.version" in str(refused.value)
