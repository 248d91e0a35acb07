"""The classic group state machine, driven directly (no sockets)."""

from __future__ import annotations

import asyncio

from kbroker.coordinator.groups import GroupCoordinator, GroupState
from wire.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]


async def _join(coordinator: GroupCoordinator, member_id: str = "", *, version4: bool = True,
                session_ms: int = 10_000, rebalance_ms: int = 2_000, protocols=PROTOCOLS):
    return await coordinator.join("g", member_id, None, "client", "", session_ms, rebalance_ms,
                                  "consumer", protocols, require_known_member_id=version4)


async def _join_with_id(coordinator: GroupCoordinator, **kwargs):
    first = await _join(coordinator, **kwargs)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return await _join(coordinator, first.member_id, **kwargs)


def test_first_join_v4_requires_a_member_id() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        result = await _join(coordinator)
        coordinator.close()
        return result, coordinator.group("g")

    result, group = asyncio.run(scenario())
    assert result.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert result.member_id.startswith("client-")
    assert group.state == GroupState.EMPTY and not group.members


def test_single_member_becomes_leader_then_stable_after_sync() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator)
        state_after_join = coordinator.group("g").state
        synced = await coordinator.sync("g", joined.member_id, joined.generation_id, None, None,
                                        {joined.member_id: b"assignment"})
        coordinator.close()
        return joined, state_after_join, synced, coordinator.group("g").state

    joined, after_join, synced, after_sync = asyncio.run(scenario())
    assert joined.error_code == ErrorCode.NONE and joined.generation_id == 1
    assert joined.leader == joined.member_id
    assert joined.members == [(joined.member_id, None, b"meta")]
    assert after_join == GroupState.COMPLETING_REBALANCE
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"assignment"
    assert after_sync == GroupState.STABLE


def test_second_member_triggers_rebalance_and_leader_gets_all_metadata() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        leader = await _join_with_id(coordinator)
        await coordinator.sync("g", leader.member_id, 1, None, None, {leader.member_id: b"a"})
        follower_task = asyncio.create_task(_join_with_id(coordinator))
        await asyncio.sleep(0.05)
        beat = coordinator.heartbeat("g", leader.member_id, 1)
        leader_rejoin = await _join(coordinator, leader.member_id)
        follower = await follower_task
        coordinator.close()
        return beat, leader_rejoin, follower

    beat, leader_rejoin, follower = asyncio.run(scenario())
    assert beat == ErrorCode.REBALANCE_IN_PROGRESS
    assert leader_rejoin.generation_id == follower.generation_id == 2
    assert leader_rejoin.leader == follower.leader == leader_rejoin.member_id
    assert {m[0] for m in leader_rejoin.members} == {leader_rejoin.member_id, follower.member_id}
    assert follower.members == []


def test_heartbeat_errors_for_unknown_member_and_old_generation() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator)
        await coordinator.sync("g", joined.member_id, 1, None, None, {})
        results = (coordinator.heartbeat("g", "nobody", 1), coordinator.heartbeat("g", joined.member_id, 0),
                   coordinator.heartbeat("g", joined.member_id, 1), coordinator.heartbeat("other", "x", 1))
        coordinator.close()
        return results

    unknown, old, ok, no_group = asyncio.run(scenario())
    assert unknown == ErrorCode.UNKNOWN_MEMBER_ID
    assert old == ErrorCode.ILLEGAL_GENERATION
    assert ok == ErrorCode.NONE
    assert no_group == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator)
        await coordinator.sync("g", joined.member_id, 1, None, None, {})
        left = coordinator.leave("g", joined.member_id)
        await asyncio.sleep(0)
        group = coordinator.group("g")
        coordinator.close()
        return left, group

    left, group = asyncio.run(scenario())
    assert left == ErrorCode.NONE
    assert group.state == GroupState.EMPTY and not group.members and group.generation_id == 2


def test_silent_member_expires_after_its_session_timeout() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator, session_ms=6000)
        await coordinator.sync("g", joined.member_id, 1, None, None, {})
        member = coordinator.group("g").members[joined.member_id]
        coordinator.expire_members(member.session_deadline_ms - 1000)
        still_there = joined.member_id in coordinator.group("g").members
        coordinator.expire_members(member.session_deadline_ms + 1)
        await asyncio.sleep(0)
        group = coordinator.group("g")
        coordinator.close()
        return still_there, group

    still_there, group = asyncio.run(scenario())
    assert still_there
    assert not group.members and group.state == GroupState.EMPTY


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        first = await _join_with_id(coordinator, rebalance_ms=300)
        await coordinator.sync("g", first.member_id, 1, None, None, {})
        second = await _join_with_id(coordinator, rebalance_ms=300)  # first never rejoins
        group = coordinator.group("g")
        coordinator.close()
        return first, second, group

    _first, second, group = asyncio.run(scenario())
    assert second.generation_id == 2 and second.leader == second.member_id
    assert list(group.members) == [second.member_id]


def test_initial_rebalance_delay_collects_members_into_one_generation() -> None:
    async def scenario():
        coordinator = GroupCoordinator(200)
        results = await asyncio.gather(_join_with_id(coordinator), _join_with_id(coordinator))
        coordinator.close()
        return results

    a, b = asyncio.run(scenario())
    assert a.generation_id == b.generation_id == 1
    assert a.leader == b.leader


def test_sync_with_wrong_generation_is_illegal() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator)
        result = await coordinator.sync("g", joined.member_id, 7, None, None, {})
        coordinator.close()
        return result

    assert asyncio.run(scenario()).error_code == ErrorCode.ILLEGAL_GENERATION


def test_incompatible_protocols_are_refused() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_with_id(coordinator)
        other = await _join(coordinator, protocols=[("roundrobin", b"")])
        coordinator.close()
        return joined, other

    _, other = asyncio.run(scenario())
    assert other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_restarted_static_member_replaces_its_old_member_id() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        join = coordinator.join
        first = await join("g", "", "instance-1", "client", "", 10_000, 2_000, "consumer", PROTOCOLS, True)
        await coordinator.sync("g", first.member_id, first.generation_id, None, None, {})
        second = await join("g", "", "instance-1", "client", "", 10_000, 2_000, "consumer", PROTOCOLS, True)
        group = coordinator.group("g")
        coordinator.close()
        return first, second, group

    first, second, group = asyncio.run(scenario())
    assert first.error_code == second.error_code == ErrorCode.NONE  # no MEMBER_ID_REQUIRED round
    assert second.member_id != first.member_id
    # a Stable group whose protocol stays the same keeps its generation (KIP-345)
    assert list(group.members) == [second.member_id] and second.generation_id == first.generation_id
