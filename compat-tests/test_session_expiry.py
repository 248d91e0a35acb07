"""A silent group member is removed at its own session deadline, not some time later.

Kafka keeps a timer per member (classic groups and KIP-848 groups alike), so a member that stops
heartbeating is gone as soon as its session timeout has passed since the last request that counted as a
sign of life; a DescribeGroups (or a DeleteGroups) sent just after that sees it gone.

Several members, in groups of their own, go silent MEMBER_SPACING_MS apart; each group is described MARGIN_MS
after its member's deadline (measured from when the last heartbeat's answer arrived, the latest the broker can
have set that deadline). Kafka meets the margin with room to spare: expiry plus a DescribeGroups took under
70 ms on Kafka 3.9 and under 115 ms on Kafka 4.4 on this project's loaded two-core test machine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

import differential as wd
from group_clients import skip_without_consumer_protocol
from settle import create_topic

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Consumer group: session expiry on time")]

SESSION_MS = 1000
MARGIN_MS = 150
MEMBERS = 5
MEMBER_SPACING_MS = 50
SETTINGS = ("group.initial.rebalance.delay.ms=0", f"group.min.session.timeout.ms={SESSION_MS}",
            f"group.consumer.min.session.timeout.ms={SESSION_MS}", f"group.consumer.session.timeout.ms={SESSION_MS}",
            "group.consumer.min.heartbeat.interval.ms=500", "group.consumer.heartbeat.interval.ms=500")
JOIN_GROUP, HEARTBEAT, SYNC_GROUP, DESCRIBE_GROUPS = 11, 12, 14, 15
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69


@pytest.fixture(scope="module")
def bootstrap_servers(own_broker) -> str:
    return own_broker("session-expiry", *SETTINGS).bootstrap


@pytest.fixture
def connection(bootstrap_servers: str):
    conn = wd.Connection(bootstrap_servers)
    yield conn
    conn.close()


def _until_coordinator_ready(call: Callable[[], object], keep_alive: Callable[[], None]):
    """`call()` again while the coordinator is still loading (Kafka's first group creates __consumer_offsets),
    keeping the members already joined alive while it waits."""
    deadline = time.monotonic() + 30
    while (answer := call()).error_code in wd.COORDINATOR_NOT_READY:
        assert time.monotonic() < deadline, answer
        keep_alive()
        time.sleep(0.1)
    return answer


def _timed(call: Callable[[], object]) -> tuple[object, float]:
    """The answer, and when it arrived (monotonic ms)."""
    answer = call()
    return answer, time.monotonic() * 1000


AddMember = Callable[[str, Callable[[], None]], Callable[[], float]]


def _members(connection, add_member: AddMember, groups: list[str]) -> list[Callable[[], float]]:
    """One member per group. Every group's coordinator is found before the first member joins, and the earlier
    members are kept alive while a new one waits for its coordinator and after it joins, so a slow setup (a
    loaded machine) cannot let a member's session lapse before the measurement starts."""
    for group in groups:
        wd.wait_for_coordinator(wd.Ctx(connection, 0, group), group)
    heartbeats: list[Callable[[], float]] = []

    def keep_alive() -> None:
        for heartbeat in heartbeats:
            heartbeat()

    for group in groups:
        heartbeats.append(add_member(group, keep_alive))
        for heartbeat in heartbeats[:-1]:
            heartbeat()
    return heartbeats


def _wait_until(when_ms: float) -> None:
    time.sleep(max(when_ms - time.monotonic() * 1000, 0) / 1000)


def _expiry_lateness(heartbeats: list[Callable[[], float]], members_of: Callable[[int], list]) -> list[str]:
    """Make each member's last heartbeat MEMBER_SPACING_MS apart, then describe each group MARGIN_MS after that
    member's deadline (`members_of(index)`); the groups that still had members then."""
    deadlines = []
    for heartbeat in heartbeats:
        deadlines.append(heartbeat() + SESSION_MS)
        time.sleep(MEMBER_SPACING_MS / 1000)
    lingering = []
    for index, deadline in enumerate(deadlines):
        _wait_until(deadline + MARGIN_MS)
        if members := members_of(index):
            lingering.append(f"member {index}: {len(members)} member(s) {MARGIN_MS} ms after its deadline")
    return lingering


def _classic_member(connection, group: str, keep_alive: Callable[[], None]) -> Callable[[], float]:
    """A classic group's only member, joined and synced; returns its heartbeat (when its answer arrived)."""
    data = {"group_id": group, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": 10_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": wd.CONSUMER_METADATA}]}
    wd.wait_for_coordinator(wd.Ctx(connection, 0, group), group)
    def join(member_id: str):
        return connection.call(JOIN_GROUP, 5, wd.build("JoinGroupRequest", 5, {**data, "member_id": member_id}))
    joined = join(_until_coordinator_ready(lambda: join(""), keep_alive).member_id)
    assert joined.error_code == 0, joined
    sync = {"group_id": group, "generation_id": joined.generation_id, "member_id": joined.member_id,
            "assignments": [{"member_id": joined.member_id, "assignment": wd.RANGE_ASSIGNMENT}]}
    assert connection.call(SYNC_GROUP, 3, wd.build("SyncGroupRequest", 3, sync)).error_code == 0
    request = wd.build("HeartbeatRequest", 3, {"group_id": group, "generation_id": joined.generation_id,
                                               "member_id": joined.member_id})

    def heartbeat() -> float:
        answer, arrived = _timed(lambda: connection.call(HEARTBEAT, 3, request))
        assert answer.error_code == 0, answer
        return arrived
    return heartbeat


def test_silent_classic_member_is_gone_just_after_its_session_deadline(connection) -> None:
    groups = [f"expiry-{uuid.uuid4().hex[:10]}" for _ in range(MEMBERS)]
    heartbeats = _members(connection, lambda group, keep_alive: _classic_member(connection, group, keep_alive),
                          groups)

    def describe(group: str):
        request = wd.build("DescribeGroupsRequest", 5, {"groups": [group], "include_authorized_operations": False})
        (described,) = connection.call(DESCRIBE_GROUPS, 5, request).groups
        return described

    assert _expiry_lateness(heartbeats, lambda index: describe(groups[index]).members) == []
    assert {describe(group).group_state for group in groups} == {"Empty"}


def _consumer_protocol_member(connection, group: str, topic: str,
                              keep_alive: Callable[[], None]) -> Callable[[], float]:
    """A KIP-848 group's only member (ConsumerGroupHeartbeat v0); returns its heartbeat (when its answer arrived)."""
    wd.wait_for_coordinator(wd.Ctx(connection, 0, group), group)
    join = wd.build("ConsumerGroupHeartbeatRequest", 0, {
        "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 10_000, "subscribed_topic_names": [topic], "server_assignor": None,
        "topic_partitions": []})
    joined = _until_coordinator_ready(lambda: connection.call(CONSUMER_GROUP_HEARTBEAT, 0, join), keep_alive)
    assert joined.error_code == 0, joined
    epoch = joined.member_epoch

    def heartbeat() -> float:
        """A heartbeat at the member's current epoch, which moves on as the group's does (as a client's would)."""
        nonlocal epoch
        request = wd.build("ConsumerGroupHeartbeatRequest", 0, {"group_id": group, "member_id": joined.member_id,
                                                                "member_epoch": epoch})
        answer, arrived = _timed(lambda: connection.call(CONSUMER_GROUP_HEARTBEAT, 0, request))
        assert answer.error_code == 0, answer
        epoch = answer.member_epoch
        return arrived
    return heartbeat


def test_silent_consumer_protocol_member_is_gone_just_after_its_session_deadline(bootstrap_servers: str,
                                                                                  connection) -> None:
    skip_without_consumer_protocol(bootstrap_servers)
    topic = create_topic(bootstrap_servers, f"expiry-{uuid.uuid4().hex[:10]}", 1)
    groups = [f"expiry-{uuid.uuid4().hex[:10]}" for _ in range(MEMBERS)]
    heartbeats = _members(connection, lambda group, keep_alive: _consumer_protocol_member(
        connection, group, topic, keep_alive), groups)

    def members_of(index: int) -> list:
        # one group per request: Kafka 3.9 answers a request for groups of several coordinator shards with
        # each group once per shard, GROUP_ID_NOT_FOUND from the shards that do not own it
        request = wd.build("ConsumerGroupDescribeRequest", 0, {"group_ids": [groups[index]],
                                                               "include_authorized_operations": False})
        (described,) = connection.call(CONSUMER_GROUP_DESCRIBE, 0, request).groups
        assert described.error_code == 0, described  # the group is there, Empty once its member is gone
        return described.members

    assert _expiry_lateness(heartbeats, members_of) == []
