"""Dynamic broker configs over a real socket: Kafka 4.4's checks and messages (each answer below was read off
Apache Kafka 4.4.0), how DescribeConfigs reports them, where they are kept, and that they take effect."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from kbroker.dynamic_config import CONFIGS_FILE, DEFAULT_ENTITY
from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, API_VERSIONS = 32, 33, 44, 18
BROKER = 4
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = 2, 3, 5
INT, PASSWORD, UNKNOWN = 3, 9, 0
DC = messages.DescribeConfigsRequest
AC = messages.AlterConfigsRequest
IAC = messages.IncrementalAlterConfigsRequest
WRAPPED = ("Invalid value org.apache.kafka.common.config.ConfigException: {} "
           "for configuration Invalid dynamic configuration")


@pytest.fixture
def client(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


@pytest.fixture
def node(kafka_broker) -> str:
    return str(kafka_broker.broker.node_id)


def _incremental(client: RawClient, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False):
    request = IAC(resources=[IAC.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
        IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])], validate_only=validate_only)
    response = client.call(INCREMENTAL_ALTER_CONFIGS, 1, request).responses[0]
    return response.error_code, response.error_message


def _alter(client: RawClient, name: str, configs: dict[str, str]):
    request = AC(resources=[AC.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=[
        AC.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=False)
    response = client.call(ALTER_CONFIGS, 2, request).responses[0]
    return response.error_code, response.error_message


def _describe(client: RawClient, name: str, *keys: str) -> dict:
    request = DC(resources=[DC.DescribeConfigsResource(resource_type=BROKER, resource_name=name,
                                                        configuration_keys=list(keys) or None)],
                 include_synonyms=True, include_documentation=False)
    return {c.name: c for c in client.call(DESCRIBE_CONFIGS, 4, request).results[0].configs}


def _synonyms(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


# --- Kafka's checks, in its order and words ---------------------------------------------------------


def test_read_only_configs_are_refused_as_a_list(client, node):
    assert _incremental(client, node, ("log.dirs", SET, "/x"), ("broker.id", SET, "5")) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: [log.dirs, broker.id]")


def test_a_unit_synonym_that_is_not_dynamic_is_refused(client, node):
    """Only log.retention.ms is dynamic; .hours and .minutes are read-only."""
    assert _incremental(client, node, ("log.retention.hours", SET, "5")) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: [log.retention.hours]")


def test_security_config_needs_a_listener_prefix(client, node):
    assert _incremental(client, node, ("ssl.keystore.type", SET, "JKS")) == (
        ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated only per-listener using the "
                                   "listener prefix: [ssl.keystore.type]")


@pytest.mark.parametrize("name", ["listeners", "listener.name.plaintext.ssl.keystore.type"])
def test_per_broker_config_is_refused_on_the_cluster_default(client, name):
    assert _incremental(client, "", (name, SET, "JKS")) == (
        ErrorCode.INVALID_REQUEST, f"Cannot update these configs at default cluster level, broker id must be "
                                   f"specified: [{name}]")


def test_listener_prefixed_connection_limit_is_cluster_wide(client):
    assert _incremental(client, "", ("listener.name.plaintext.max.connections", SET, "100")) == (0, None)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("message.max.bytes", "abc", "Invalid value abc for configuration message.max.bytes: Not a number of type INT"),
    ("message.max.bytes", "99999999999",
     "Invalid value 99999999999 for configuration message.max.bytes: Not a number of type INT"),
    ("message.max.bytes", "-5", "Invalid value -5 for configuration message.max.bytes: Value must be at least 0"),
    ("log.segment.bytes", "10", "Invalid value 10 for configuration log.segment.bytes: Value must be at least 1048576"),
    ("log.cleaner.min.cleanable.ratio", "2",
     "Invalid value 2.0 for configuration log.cleaner.min.cleanable.ratio: Value must be no more than 1"),
    ("unclean.leader.election.enable", "maybe", "Invalid value maybe for configuration unclean.leader.election."
                                                "enable: Expected value to be either true or false"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one "
                                   "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("log.cleanup.policy", "nope", "Invalid value nope for configuration log.cleanup.policy: String must be one of: "
                                   "compact, delete"),
])
def test_a_bad_value_gets_kafkas_message(client, name, value, message):
    assert _incremental(client, "", (name, SET, value), validate_only=True) == (ErrorCode.INVALID_REQUEST, message)


def test_a_thread_pool_may_not_more_than_double(client):
    assert _incremental(client, "", ("background.threads", SET, "100"), validate_only=True) == (
        ErrorCode.INVALID_REQUEST, WRAPPED.format("Dynamic thread count update validation failed for "
                                                  "background.threads=100, value should not be greater than double "
                                                  "the current value 10"))


def test_the_log_cleaner_may_double_its_threads_but_not_more(client):
    assert _incremental(client, "", ("log.cleaner.threads", SET, "2"), validate_only=True) == (0, None)
    assert _incremental(client, "", ("log.cleaner.threads", SET, "3"), validate_only=True) == (
        ErrorCode.INVALID_REQUEST, WRAPPED.format("Log cleaner threads cannot be increased to more than double the "
                                                  "current value 1"))


def test_zero_log_cleaner_threads_fails_as_kafkas_division(client):
    assert _incremental(client, "", ("log.cleaner.threads", SET, "0"), validate_only=True) == (
        ErrorCode.INVALID_REQUEST, "/ by zero")


def test_dedupe_buffer_must_give_each_cleaner_thread_1mb(client):
    assert _incremental(client, "", ("log.cleaner.dedupe.buffer.size", SET, "1000"), validate_only=True) == (
        ErrorCode.INVALID_REQUEST, "requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per "
                                   "cleaner thread.")


def test_append_to_a_config_that_is_no_list_is_invalid_config(client, node):
    assert _incremental(client, node, ("message.max.bytes", APPEND, "1")) == (
        ErrorCode.INVALID_CONFIG, "Config value append is not allowed for config key: message.max.bytes")


def test_append_to_an_unknown_config_is_invalid_config(client, node):
    assert _incremental(client, node, ("no.such.config", APPEND, "a")) == (
        ErrorCode.INVALID_CONFIG, "Unknown config name: no.such.config")


def test_delete_of_a_read_only_config_is_accepted(client, node):
    assert _incremental(client, node, ("log.dirs", DELETE, None)) == (0, None)


def test_another_broker_id_is_refused(client, kafka_broker):
    own = kafka_broker.broker.node_id
    assert _incremental(client, str(own + 7), ("message.max.bytes", SET, "2000000")) == (
        ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {own}, but received {own + 7}")


def test_validate_only_stores_nothing(client, node):
    assert _incremental(client, "", ("message.max.bytes", SET, "2000000"), validate_only=True) == (0, None)
    assert _describe(client, "") == {}
    assert _describe(client, node, "message.max.bytes")["message.max.bytes"].config_source == DEFAULT


# --- what is kept and how it is described ----------------------------------------------------------


def test_append_on_this_broker_starts_from_the_default_not_from_the_cluster_default(client, node):
    """Kafka's controller starts APPEND from the resource's own value, else the config's default."""
    assert _incremental(client, "", ("log.cleanup.policy", SET, "compact")) == (0, None)
    assert _incremental(client, node, ("log.cleanup.policy", APPEND, "delete")) == (0, None)
    entry = _describe(client, node, "log.cleanup.policy")["log.cleanup.policy"]
    assert _synonyms(entry) == [("log.cleanup.policy", "delete", DYNAMIC_BROKER),
                                ("log.cleanup.policy", "compact", DYNAMIC_DEFAULT),
                                ("log.cleanup.policy", "delete", DEFAULT)]


def test_legacy_alter_configs_replaces_the_whole_cluster_default(client):
    assert _incremental(client, "", ("log.retention.ms", SET, "5400000")) == (0, None)
    assert _alter(client, "", {"message.max.bytes": "3000000"}) == (0, None)
    assert {name: entry.value for name, entry in _describe(client, "").items()} == {"message.max.bytes": "3000000"}


def test_unknown_and_password_configs_are_described_without_their_value(client, node):
    assert _incremental(client, node, ("no.such.config", SET, "x"),
                        ("listener.name.plaintext.ssl.key.password", SET, "secret")) == (0, None)
    described = _describe(client, node, "no.such.config", "listener.name.plaintext.ssl.key.password")
    assert [(e.value, e.is_sensitive, e.read_only, e.config_type, _synonyms(e)) for e in described.values()] == [
        (None, True, True, UNKNOWN, [("no.such.config", None, DYNAMIC_BROKER)]),
        (None, True, True, PASSWORD, [("listener.name.plaintext.ssl.key.password", None, DYNAMIC_BROKER)])]


def test_listener_config_lists_its_base_config_at_each_level(client, node):
    assert _incremental(client, node, ("listener.name.plaintext.max.connections", SET, "100")) == (0, None)
    assert _incremental(client, "", ("listener.name.plaintext.max.connections", SET, "200"),
                        ("max.connections", SET, "1000")) == (0, None)
    name = "listener.name.plaintext.max.connections"
    entry = _describe(client, node, name)[name]
    assert (entry.value, entry.config_source, entry.read_only, entry.config_type) == ("100", DYNAMIC_BROKER, True, INT)
    assert _synonyms(entry) == [("listener.name.plaintext.max.connections", "100", DYNAMIC_BROKER),
                                ("listener.name.plaintext.max.connections", "200", DYNAMIC_DEFAULT),
                                ("max.connections", "1000", DYNAMIC_DEFAULT),
                                ("max.connections", "2147483647", DEFAULT)]


def test_a_dynamic_config_kbroker_does_not_act_on_is_stored_and_described(client, node):
    assert _incremental(client, node, ("num.io.threads", SET, "4")) == (0, None)
    entry = _describe(client, node, "num.io.threads")["num.io.threads"]
    assert (entry.value, entry.config_source, entry.read_only) == ("4", DYNAMIC_BROKER, False)
    assert _synonyms(entry) == [("num.io.threads", "4", DYNAMIC_BROKER), ("num.io.threads", "8", DEFAULT)]


def test_dynamic_configs_are_kept_in_an_owner_only_file_in_the_data_dir(client, kafka_broker, node):
    assert _incremental(client, "", ("message.max.bytes", SET, "2000000")) == (0, None)
    assert _incremental(client, node, ("log.retention.ms", SET, "3600000")) == (0, None)
    path = kafka_broker.data_dir / CONFIGS_FILE
    assert json.loads(path.read_text()) == {"version": 1, "configs": {
        DEFAULT_ENTITY: {"message.max.bytes": "2000000"}, node: {"log.retention.ms": "3600000"}}}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_kept_config_that_can_no_longer_apply_is_ignored_at_start(tmp_path: Path):
    """As Kafka when it reads its dynamic configs: each one that fails its checks is logged and left out."""
    tmp_path.joinpath(CONFIGS_FILE).write_text(json.dumps({"version": 1, "configs": {DEFAULT_ENTITY: {
        "log.dirs": "/elsewhere", "message.max.bytes": "abc", "num.io.threads": "4", "listeners": "x"}}}))
    with running_broker(tmp_path) as broker:
        assert dict(broker.broker.config.dynamic_default) == {"num.io.threads": "4"}


# --- taking effect -----------------------------------------------------------------------------------


def test_cluster_default_reaches_the_logs_of_existing_topics_but_not_their_overrides(client, kafka_broker):
    kafka_broker.broker.create_topic("plain", 1)
    kafka_broker.broker.create_topic("own", 1, {"retention.ms": "1000"})
    assert _incremental(client, "", ("log.retention.ms", SET, "5400000")) == (0, None)
    logs = kafka_broker.broker.logs
    assert (logs.get("plain", 0).config.retention_ms, logs.get("own", 0).config.retention_ms) == (5400000, 1000)


def test_a_log_cleaner_setting_restarts_the_cleaner_with_it(client, kafka_broker):
    assert _incremental(client, "", ("log.cleaner.backoff.ms", SET, "250")) == (0, None)
    cleaner = kafka_broker.broker.logs.cleaner
    assert (cleaner.config.backoff_ms, cleaner.running) == (250, True)


def _api_versions(sock: socket.socket) -> None:
    body = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test"  # ApiVersions v0, correlation id 7, client "test"
    sock.sendall(len(body).to_bytes(4, "big") + body)


def _answered(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return len(sock.recv(4)) > 0
    except TimeoutError:
        return False


def _connect(kafka_broker) -> socket.socket:
    host, port = kafka_broker.bootstrap_servers.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_connection_over_max_connections_is_served_once_another_closes(client, kafka_broker):
    assert _incremental(client, "", ("max.connections", SET, "1")) == (0, None)  # `client` holds the one slot
    with _connect(kafka_broker) as waiting:
        _api_versions(waiting)
        assert not _answered(waiting, 0.5)
        client.close()
        assert _answered(waiting, 10)


def test_listener_max_connections_limits_that_listener(client, kafka_broker):
    assert _incremental(client, "", ("listener.name.plaintext.max.connections", SET, "1")) == (0, None)
    with _connect(kafka_broker) as waiting:
        _api_versions(waiting)
        assert not _answered(waiting, 0.5)


def test_connection_over_max_connections_per_ip_is_closed(client, kafka_broker):
    assert _incremental(client, "", ("max.connections.per.ip", SET, "1")) == (0, None)
    with _connect(kafka_broker) as refused:
        _api_versions(refused)
        refused.settimeout(10)
        try:
            received = refused.recv(4)
        except ConnectionResetError:
            received = b""
        assert received == b""


def test_per_ip_override_raises_the_limit_for_that_address(client, kafka_broker):
    assert _incremental(client, "", ("max.connections.per.ip", SET, "1"),
                        ("max.connections.per.ip.overrides", SET, "127.0.0.1:5")) == (0, None)
    with _connect(kafka_broker) as allowed:
        _api_versions(allowed)
        assert _answered(allowed, 10)


def test_dynamic_configs_apply_again_after_a_restart(tmp_path: Path):
    with running_broker(tmp_path) as broker:
        client = RawClient(broker.bootstrap_servers)
        assert _incremental(client, "", ("message.max.bytes", SET, "2000000")) == (0, None)
        client.close()
    with running_broker(tmp_path) as broker:
        assert broker.broker.config["message.max.bytes"] == 2000000
        assert broker.broker.logs.default_config.max_message_bytes == 2000000


def test_lowering_max_connections_closes_the_least_recently_active(client, kafka_broker):
    """As Kafka's processors: over the new limit, the connection idle the longest is closed first."""
    idle = RawClient(kafka_broker.bootstrap_servers)
    try:
        idle.call(API_VERSIONS, 0, messages.ApiVersionsRequest())
        client.call(API_VERSIONS, 0, messages.ApiVersionsRequest())  # `client` is now the more recently active
        assert _incremental(client, "", ("max.connections", SET, "1")) == (0, None)
        assert idle.is_closed_by_peer()
        assert client.call(API_VERSIONS, 0, messages.ApiVersionsRequest()).error_code == 0
    finally:
        idle.close()
