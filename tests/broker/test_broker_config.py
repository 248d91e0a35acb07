"""server.properties handling under Kafka's property names."""

from __future__ import annotations

import pytest

from kbroker.config import ConfigError, Listener, build, load, parse_properties


def test_defaults_are_kafkas():
    config = build({})
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1_048_588
    assert config["socket.request.max.bytes"] == 104_857_600
    assert config.retention_ms == 168 * 3_600_000
    assert config.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]


def test_properties_file_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# a comment\nbroker.id=4\nlog.dirs=/a,/b\nnum.partitions : 3\n")
    config = load(path, ["num.partitions=6"])
    assert config.broker_id == 4
    assert [str(d) for d in config.log_dirs] == ["/a", "/b"]
    assert config["num.partitions"] == 6


def test_retention_ms_wins_over_minutes_and_hours():
    assert build({"log.retention.hours": "1", "log.retention.minutes": "2"}).retention_ms == 120_000
    assert build({"log.retention.minutes": "2", "log.retention.ms": "5"}).retention_ms == 5


def test_advertised_listeners_default_to_listeners():
    config = build({"listeners": "PLAINTEXT://0.0.0.0:9093", "advertised.listeners": "PLAINTEXT://example:9093"})
    assert config.advertised_listeners == [Listener("PLAINTEXT", "example", 9093)]


def test_unknown_keys_only_warn(caplog):
    build({"zookeeper.set.acl": "false"})
    assert "zookeeper.set.acl" in caplog.text


def test_wrong_value_fails_naming_the_key():
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        build({"num.partitions": "many"})


def test_out_of_range_value_fails():
    with pytest.raises(ConfigError, match=r"must be >= 1"):
        build({"num.partitions": "0"})


def test_malformed_listener_fails():
    with pytest.raises(ConfigError, match="listener"):
        build({"listeners": "127.0.0.1:9092"})


def test_properties_continuation_lines_are_joined():
    assert parse_properties("a=1,\\\n  2\n") == {"a": "1,2"}


def test_a_consumer_heartbeat_below_its_minimum_is_refused_as_kafka_refuses_it():
    with pytest.raises(ConfigError, match=r"group\.consumer\.heartbeat\.interval\.ms must be greater than or equal to "
                                          r"group\.consumer\.min\.heartbeat\.interval\.ms"):
        build({"group.consumer.heartbeat.interval.ms": "500"})


def test_a_consumer_heartbeat_within_lowered_bounds_is_accepted():
    config = build({"group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"})
    assert config["group.consumer.heartbeat.interval.ms"] == 500


def test_a_consumer_session_timeout_above_its_maximum_is_refused():
    with pytest.raises(ConfigError, match=r"group\.consumer\.session\.timeout\.ms must be less than or equal to"):
        build({"group.consumer.session.timeout.ms": "90000"})
