"""Offsets of groups without members expire after the retention period; active groups keep theirs."""

from __future__ import annotations

import asyncio

from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator import Coordinator
from kbroker.coordinator.groups import Group, GroupState
from kbroker.coordinator.offsets import CommittedOffset

DAY_MS = 24 * 3600 * 1000


def _coordinator(tmp_path) -> tuple[Broker, Coordinator]:
    broker = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))
    return broker, Coordinator(broker, offsets_retention_ms=7 * DAY_MS)


def test_standalone_offsets_expire_a_retention_period_after_commit(tmp_path) -> None:
    broker, coordinator = _coordinator(tmp_path)
    coordinator.offsets.commit("g", {("t", 0): CommittedOffset(5, -1, "", 1000)}, 1000)
    assert coordinator.expire_offsets(1000 + 7 * DAY_MS - 1) == 0
    assert coordinator.expire_offsets(1000 + 7 * DAY_MS) == 1
    assert coordinator.offsets.fetch("g", "t", 0) is None
    broker.close()


def test_offsets_of_a_group_with_members_never_expire(tmp_path) -> None:
    broker, coordinator = _coordinator(tmp_path)
    coordinator.offsets.commit("g", {("t", 0): CommittedOffset(5, -1, "", 1000)}, 1000)
    group = coordinator.groups.groups["g"] = Group("g")
    group.state = GroupState.STABLE
    assert coordinator.expire_offsets(1000 + 30 * DAY_MS) == 0
    assert coordinator.offsets.fetch("g", "t", 0) is not None
    broker.close()


def test_empty_group_keeps_offsets_a_retention_period_after_becoming_empty(tmp_path) -> None:
    broker, coordinator = _coordinator(tmp_path)
    coordinator.offsets.commit("g", {("t", 0): CommittedOffset(5, -1, "", 1000)}, 1000)
    group = coordinator.groups.groups["g"] = Group("g")
    group.empty_since_ms = 20 * DAY_MS
    assert coordinator.expire_offsets(26 * DAY_MS) == 0
    assert coordinator.expire_offsets(27 * DAY_MS) == 1
    assert coordinator.groups.group("g") is None  # an Empty group without offsets is gone
    broker.close()


def test_start_and_close_inside_a_loop(tmp_path) -> None:
    broker, coordinator = _coordinator(tmp_path)

    async def scenario() -> None:
        coordinator.start()
        await asyncio.sleep(0)
        coordinator.close()

    asyncio.run(scenario())
    broker.close()
