"""KIP-848 members expire on the event loop's clock, each at its own deadline: the session timeout, or the
rebalance timeout of a member slow to revoke (test_consumer_group_protocol.py moves a clock by hand instead)."""

from __future__ import annotations

import asyncio
import uuid

from kbroker.broker import Topic
from kbroker.coordinator.consumer_groups import ConsumerGroupCoordinator, HeartbeatRequest

GROUP = "g"
SESSION_MS = 300
LONG_SESSION_MS = 60_000
REBALANCE_MS = 300


def _coordinator(topics: dict[str, Topic], session_ms: int) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(lambda: topics, heartbeat_interval_ms=100, session_timeout_ms=session_ms,
                                    assignors=("range",))


def _join(coordinator: ConsumerGroupCoordinator, member_id: str):
    return coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, 0, rebalance_timeout_ms=REBALANCE_MS, owned=[],
                                                  subscribed_topic_names=["orders"]))


def test_silent_member_is_fenced_at_its_session_deadline() -> None:
    async def scenario():
        coordinator = _coordinator({"orders": Topic("orders", uuid.uuid4(), 2)}, SESSION_MS)
        coordinator.start()
        _join(coordinator, "a")
        group = coordinator.group(GROUP)
        await asyncio.sleep(SESSION_MS / 2000)
        halfway = list(group.members)
        await asyncio.sleep(SESSION_MS / 2000 + 0.005)  # its timer, due before this sleep ends, has run by now
        just_after = list(group.members)
        coordinator.close()
        return halfway, just_after

    halfway, just_after = asyncio.run(scenario())
    assert halfway == ["a"] and just_after == []


def test_member_slow_to_revoke_is_fenced_at_its_rebalance_timeout() -> None:
    async def scenario():
        orders = Topic("orders", uuid.uuid4(), 2)
        coordinator = _coordinator({"orders": orders}, LONG_SESSION_MS)
        coordinator.start()
        first = _join(coordinator, "a")
        _join(coordinator, "b")  # "a" must give up a partition for "b"
        coordinator.heartbeat(HeartbeatRequest(GROUP, "a", first.member_epoch, owned=[(orders.topic_id, [0, 1])]))
        group = coordinator.group(GROUP)
        await asyncio.sleep(REBALANCE_MS / 1000 + 0.005)
        members = sorted(group.members)
        coordinator.close()
        return members

    assert asyncio.run(scenario()) == ["b"]
