"""The same controls for tests in any language: the HTTP endpoint (kbroker.faults.port) and `kbroker faults`."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from fault_wire import PRODUCE, TOPIC, partition_errors, produce_request

from kbroker.commands.faults import call
from kbroker.config import ConfigError, build
from kbroker.testing import free_port, running_broker
from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

SOURCE = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(tmp_path):
    """A broker with the endpoint on; yields (broker, "127.0.0.1:port" of the endpoint)."""
    port = free_port()
    with running_broker(tmp_path / "data", **{"kbroker.faults.port": str(port)}) as broker:
        broker.broker.create_topic(TOPIC, 1)
        yield broker, f"127.0.0.1:{port}"


def _produce_error(broker) -> int:
    client = RawClient(broker.bootstrap_servers, client_id="fault-test")
    try:
        return partition_errors(client.call(PRODUCE, 9, produce_request({TOPIC: [0]})))[(TOPIC, 0)]
    finally:
        client.close()


def _cli(endpoint: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "faults", "--endpoint", endpoint, *args],
                          cwd=SOURCE, capture_output=True, text=True, timeout=60)


def test_post_faults_injects_and_get_lists_with_fired_counts(served) -> None:
    broker, endpoint = served
    status, added = call(endpoint, "POST", "/faults", {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
                                                        "count": 1})
    assert status == 201
    assert _produce_error(broker) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert call(endpoint, "GET", "/faults") == (200, [{**added[0], "fired": 1}])


def test_delete_one_fault_by_id(served) -> None:
    broker, endpoint = served
    _, added = call(endpoint, "POST", "/faults", {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"})
    assert call(endpoint, "DELETE", f"/faults/{added[0]['id']}") == (200, {"removed": True})
    assert _produce_error(broker) == ErrorCode.NONE
    assert call(endpoint, "DELETE", f"/faults/{added[0]['id']}")[0] == 404


def test_delete_faults_clears_all(served) -> None:
    broker, endpoint = served
    call(endpoint, "POST", "/faults", [{"api": "Produce", "error": 6}, {"api": "Fetch", "delay_ms": 10}])
    call(endpoint, "DELETE", "/faults")
    assert call(endpoint, "GET", "/faults") == (200, [])
    assert broker.broker.faults is None


def test_an_unknown_error_name_is_a_400_naming_it(served) -> None:
    _, endpoint = served
    status, answer = call(endpoint, "POST", "/faults", {"api": "Produce", "error": "NO_SUCH_ERROR"})
    assert status == 400
    assert "NO_SUCH_ERROR" in answer["error"]


@pytest.mark.parametrize("api", [999, "NoSuchApi"])
def test_an_api_kafka_does_not_have_is_a_400_naming_it(served, api) -> None:
    _, endpoint = served
    status, answer = call(endpoint, "POST", "/faults", {"api": api, "error": "NOT_LEADER_OR_FOLLOWER"})
    assert status == 400
    assert str(api) in answer["error"]
    assert call(endpoint, "GET", "/faults") == (200, [])


def test_recording_over_http_returns_what_was_sent(served) -> None:
    broker, endpoint = served
    call(endpoint, "POST", "/recording", {})
    _produce_error(broker)
    status, entries = call(endpoint, "GET", "/recording")
    call(endpoint, "DELETE", "/recording")
    assert status == 200
    assert [entry["api"] for entry in entries if entry["api"] == "Produce"] == ["Produce"]


def test_cli_add_list_clear(served) -> None:
    broker, endpoint = served
    added = _cli(endpoint, "add", "--api", "Produce", "--error", "NOT_LEADER_OR_FOLLOWER", "--count", "1")
    assert added.returncode == 0, added.stderr
    assert _produce_error(broker) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    listed = _cli(endpoint, "list")
    assert '"fired": 1' in listed.stdout
    assert _cli(endpoint, "clear").returncode == 0
    assert broker.broker.faults is None


def test_cli_without_an_endpoint_says_so_and_exits_2() -> None:
    result = _cli(f"127.0.0.1:{free_port()}", "list")
    assert result.returncode == 2
    assert "kbroker.faults.port" in result.stderr


def test_cli_event_with_arguments_that_are_not_json_says_so_and_exits_2() -> None:
    result = _cli(f"127.0.0.1:{free_port()}", "event", "force-rebalance", "{group: g}")
    assert result.returncode == 2
    assert "not JSON" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_endpoint_is_off_unless_configured(kafka_broker) -> None:
    assert kafka_broker.running._faults_admin is None


def test_the_port_property_is_accepted_without_an_unknown_key_warning(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        build({"kbroker.faults.port": "9192"})
    assert "kbroker.faults.port" not in caplog.text


@pytest.mark.parametrize("port", ["65536", "-1", "http"])
def test_a_port_outside_0_to_65535_is_refused_at_start(port: str) -> None:
    with pytest.raises(ConfigError, match=r"kbroker\.faults\.port"):
        build({"kbroker.faults.port": port})


def test_events_over_http_force_a_rebalance_of_an_unknown_group_as_false(served) -> None:
    _, endpoint = served
    assert call(endpoint, "POST", "/events/force-rebalance", {"group": "nobody"}) == (200, {"result": False})


def test_cli_event_truncates_a_log(served) -> None:
    broker, endpoint = served
    for _ in range(3):
        _produce_error(broker)
    result = _cli(endpoint, "event", "truncate-log", '{"topic": "orders", "partition": 0, "offset": 1}')
    assert result.returncode == 0, result.stderr
    assert broker.broker.partition_log(TOPIC, 0).log_end_offset == 1


def test_describe_configs_does_not_report_the_endpoint_property(served) -> None:
    broker, _ = served
    describe = messages.DescribeConfigsRequest
    client = RawClient(broker.bootstrap_servers, client_id="fault-test")
    try:
        response = client.call(32, 4, describe(resources=[describe.DescribeConfigsResource(
            resource_type=4, resource_name=str(broker.broker.node_id), configuration_keys=None)]))
    finally:
        client.close()
    names = {config.name for config in response.results[0].configs}
    assert "log.dirs" in names
    assert "kbroker.faults.port" not in names
