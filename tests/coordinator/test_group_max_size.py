"""group.max.size: joins beyond the limit get GROUP_MAX_SIZE_REACHED, counted the way Kafka counts."""

from __future__ import annotations

import asyncio

from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator.groups import DEFAULT_GROUP_MAX_SIZE, GroupCoordinator, GroupState, JoinResult
from wire.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]


async def _join(coordinator: GroupCoordinator, member_id: str = "") -> JoinResult:
    return await coordinator.join("g", member_id, None, "client", "", 10_000, 1_000, "consumer", PROTOCOLS, True)


async def _join_dynamic(coordinator: GroupCoordinator) -> JoinResult:
    first = await _join(coordinator)
    return first if first.error_code != ErrorCode.MEMBER_ID_REQUIRED else await _join(coordinator, first.member_id)


async def _stable(coordinator: GroupCoordinator, size: int) -> list[JoinResult]:
    joined = await asyncio.gather(*(_join_dynamic(coordinator) for _ in range(size)))
    await asyncio.gather(*(coordinator.sync("g", j.member_id, j.generation_id, None, None, {}) for j in joined))
    return list(joined)


def test_join_beyond_group_max_size_is_refused() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50, max_size=2)
        await _stable(coordinator, 2)
        refused = await _join(coordinator)
        group = coordinator.group("g")
        coordinator.close()
        return refused, group

    refused, group = asyncio.run(scenario())
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and refused.member_id == ""
    assert len(group.members) == 2 and group.state == GroupState.STABLE and not group.pending_members


def test_members_of_a_full_group_may_rejoin() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0, max_size=1)
        [member] = await _stable(coordinator, 1)
        rejoined = await _join(coordinator, member.member_id)
        coordinator.close()
        return member, rejoined

    member, rejoined = asyncio.run(scenario())
    assert rejoined.error_code == ErrorCode.NONE and rejoined.generation_id == member.generation_id + 1


def test_while_rebalancing_the_last_members_to_rejoin_are_the_ones_refused() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0, max_size=2)
        [old] = await _stable(coordinator, 1)
        newcomers = [asyncio.create_task(_join_dynamic(coordinator)) for _ in range(2)]
        await asyncio.sleep(0.05)  # both newcomers are parked; the old member has not rejoined
        late = await _join(coordinator, old.member_id)
        joined = await asyncio.gather(*newcomers)
        group = coordinator.group("g")
        coordinator.close()
        return old, late, joined, group

    old, late, joined, group = asyncio.run(scenario())
    assert late.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert [j.error_code for j in joined] == [ErrorCode.NONE, ErrorCode.NONE]
    assert set(group.members) == {j.member_id for j in joined} and old.member_id not in group.members


def test_group_max_size_is_a_broker_property_defaulting_to_int_max(tmp_path) -> None:
    base = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    assert build(base)["group.max.size"] == DEFAULT_GROUP_MAX_SIZE == 2_147_483_647
    broker = Broker(build({**base, "group.max.size": "3"}))
    try:
        assert broker.coordinator.groups.max_size == 3
    finally:
        broker.close()
