"""The console's JSON endpoints against a live kbroker with data (tests/console/conftest.py), over real HTTP."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from kbroker.console.server import ConsoleServer
from tests.console.conftest import COMMITTED_OFFSET, EVENTS, GROUP, LATE_MS, ORDERS, ORDERS_PER_PARTITION, order


def get(live, path: str) -> dict:
    with urllib.request.urlopen(live.url + path, timeout=30) as response:
        return json.load(response)


def post(live, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(live.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_cluster_lists_the_broker_and_marks_the_controller(live_console):
    cluster = get(live_console, "api/cluster")
    assert [broker["id"] for broker in cluster["brokers"]] == [0]
    assert cluster["brokers"][0]["controller"] is True
    assert cluster["controller"]["id"] == 0
    assert cluster["cluster_id"]


def test_topics_lists_user_topics_with_partition_and_message_counts(live_console):
    topics = {topic["name"]: topic for topic in get(live_console, "api/topics")["topics"]}
    assert topics[ORDERS]["partitions"] == 3
    assert topics[ORDERS]["messages"] >= 3 * ORDERS_PER_PARTITION
    assert topics[EVENTS]["replication_factor"] == 1
    assert not any(name.startswith("__") for name in topics)


def test_topic_shows_leaders_isr_offsets_and_configs(live_console):
    topic = get(live_console, f"api/topics/{ORDERS}")
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    first = topic["partitions"][0]
    assert first["leader"] == 0 and first["replicas"] == [0] and first["isr"] == [0]
    assert first["earliest_offset"] == 0 and first["latest_offset"] >= ORDERS_PER_PARTITION
    assert first["size_bytes"] > 0 and topic["sizes_note"] is None
    configs = {config["name"]: config for config in topic["configs"]}
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"


def test_unknown_topic_is_404(live_console):
    with pytest.raises(urllib.error.HTTPError) as raised:
        get(live_console, "api/topics/no-such-topic")
    assert raised.value.code == 404


def test_messages_from_an_offset_carry_key_value_headers_and_timestamp(live_console):
    answer = get(live_console, f"api/topics/{ORDERS}/messages?partition=1&offset=2&limit=3")
    assert [m["offset"] for m in answer["messages"]] == [2, 3, 4]
    message = answer["messages"][0]
    assert message["key"] == {"text": "customer-2"}
    assert json.loads(message["value"]["text"]) == order(1, 2)
    assert message["headers"] == [{"key": "source", "value": {"text": "checkout"}}]
    assert message["timestamp_type"] == "CreateTime"


def test_messages_from_a_timestamp_start_at_the_first_record_at_or_after_it(live_console):
    answer = get(live_console, f"api/topics/{ORDERS}/messages?partition=0&timestamp={LATE_MS}&limit=2")
    assert answer["start_offset"] == ORDERS_PER_PARTITION // 2
    assert all(m["timestamp"] >= LATE_MS for m in answer["messages"])


def test_messages_searched_by_key_return_only_matching_keys(live_console):
    answer = get(live_console, f"api/topics/{ORDERS}/messages?partition=2&key=customer-7")
    assert [m["offset"] for m in answer["messages"]] == [7]


def test_groups_list_state_members_and_total_lag(live_console):
    groups = {group["group_id"]: group for group in get(live_console, "api/groups")["groups"]}
    billing = groups[GROUP]
    assert billing["state"] == "STABLE"
    assert billing["members"] == 1
    assert billing["lag"] >= 3 * (ORDERS_PER_PARTITION - COMMITTED_OFFSET)


def test_group_shows_member_assignments_and_lag_per_partition(live_console):
    group = get(live_console, f"api/groups/{GROUP}")
    (member,) = group["members"]
    assert member["client_id"] == "billing-worker"
    assert sorted(a["partition"] for a in member["assignment"]) == [0, 1, 2]
    rows = {row["partition"]: row for row in group["offsets"]}
    assert rows[0]["committed_offset"] == COMMITTED_OFFSET
    assert rows[0]["lag"] == rows[0]["log_end_offset"] - COMMITTED_OFFSET


def test_group_lag_history_grows_with_samples(live_console):
    first = len(get(live_console, f"api/groups/{GROUP}")["lag_history"])
    deadline = time.monotonic() + 10  # the fixture's console samples every 0.5 s
    while len(history := get(live_console, f"api/groups/{GROUP}")["lag_history"]) <= first:
        assert time.monotonic() < deadline, "no lag sample taken in 10 s"
        time.sleep(0.1)
    assert history[-1][1] >= 3 * (ORDERS_PER_PARTITION - COMMITTED_OFFSET)


def test_produce_a_test_message_is_acknowledged_and_readable(live_console):
    status, ack = post(live_console, f"api/topics/{EVENTS}/messages",
                       {"key": "probe", "value": '{"hello": "console"}', "partition": 0,
                        "headers": [{"key": "via", "value": "api-test"}]})
    assert status == 201
    read = get(live_console, f"api/topics/{EVENTS}/messages?partition=0&offset={ack['offset']}&limit=1")
    (message,) = read["messages"]
    assert message["key"] == {"text": "probe"}
    assert message["headers"] == [{"key": "via", "value": {"text": "api-test"}}]


def test_static_page_is_served_without_a_build_step(live_console):
    with urllib.request.urlopen(live_console.url, timeout=10) as response:
        page = response.read().decode()
    assert response.headers["Content-Type"].startswith("text/html")
    assert '<script src="/static/app.js"' in page and "<main" in page


def _raw(live, method: str, path: str, body: bytes = b"", **headers: str) -> int:
    """The status of a request with exactly these headers (Host included), as a hostile page would send it."""
    host, port = live.console.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.putrequest(method, "/" + path, skip_host=True)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            connection.putheader(name.replace("_", "-"), value)
        connection.endheaders(body)
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_produce_posted_as_a_form_is_refused_as_unsupported_media(live_console):
    host = f"127.0.0.1:{live_console.console.server_address[1]}"
    status = _raw(live_console, "POST", f"api/topics/{EVENTS}/messages", b"value=forged", Host=host,
                  Content_Type="application/x-www-form-urlencoded")
    assert status == 415


def test_a_produce_from_a_page_of_another_origin_is_refused(live_console):
    host = f"127.0.0.1:{live_console.console.server_address[1]}"
    status = _raw(live_console, "POST", f"api/topics/{EVENTS}/messages", b'{"value": "forged"}', Host=host,
                  Content_Type="application/json", Origin="http://evil.example")
    assert status == 403


def test_a_request_naming_another_host_is_refused_against_dns_rebinding(live_console):
    port = live_console.console.server_address[1]
    assert _raw(live_console, "GET", "api/topics", Host=f"evil.example:{port}") == 403
    assert _raw(live_console, "GET", "api/topics", Host=f"localhost:{port}") == 200


def test_closing_a_console_that_never_served_returns():
    console = ConsoleServer("127.0.0.1:9", port=0)
    closing = threading.Thread(target=console.close, daemon=True)
    closing.start()
    closing.join(10)
    assert not closing.is_alive()
