"""The classic group's timers: pending sync, the join phase with silent static members, and
ids handed out with MEMBER_ID_REQUIRED that are never used."""

from __future__ import annotations

import asyncio

from kbroker.coordinator.groups import GroupCoordinator, GroupState, JoinResult, monotonic_ms
from wire.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]
REBALANCE_MS = 300


async def _join(coordinator: GroupCoordinator, member_id: str = "", instance: str | None = None,
                rebalance_ms: int = REBALANCE_MS) -> JoinResult:
    return await coordinator.join("g", member_id, instance, "client", "", 10_000, rebalance_ms, "consumer",
                                  PROTOCOLS, True)


async def _join_dynamic(coordinator: GroupCoordinator) -> JoinResult:
    first = await _join(coordinator)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return await _join(coordinator, first.member_id)


async def _sync(coordinator: GroupCoordinator, joined: JoinResult, instance: str | None = None):
    assignments = {m[0]: b"x" for m in joined.members}
    return await coordinator.sync("g", joined.member_id, joined.generation_id, None, None, assignments, instance)


def test_follower_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        leader, follower = await asyncio.gather(_join_dynamic(coordinator), _join_dynamic(coordinator))
        if follower.leader == follower.member_id:
            leader, follower = follower, leader
        await _sync(coordinator, leader)  # Stable, but the follower never asks for its assignment
        group = coordinator.group("g")
        state_before = group.state
        await asyncio.sleep(REBALANCE_MS / 1000 + 0.2)
        members_after, state_after = list(group.members), group.state
        beat = coordinator.heartbeat("g", leader.member_id, leader.generation_id)
        rejoined = await _join(coordinator, leader.member_id)
        coordinator.close()
        return leader, state_before, members_after, state_after, beat, rejoined

    leader, state_before, members_after, state_after, beat, rejoined = asyncio.run(scenario())
    assert state_before == GroupState.STABLE
    assert members_after == [leader.member_id] and state_after == GroupState.PREPARING_REBALANCE
    assert beat == ErrorCode.REBALANCE_IN_PROGRESS
    assert rejoined.generation_id == leader.generation_id + 1 and [m[0] for m in rejoined.members] == [
        leader.member_id]


def test_leader_that_never_syncs_is_removed_and_the_group_empties() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _join_dynamic(coordinator)
        group = coordinator.group("g")
        state_before = group.state
        await asyncio.sleep(REBALANCE_MS / 1000 + 0.2)
        coordinator.close()
        return joined, state_before, group

    joined, state_before, group = asyncio.run(scenario())
    assert state_before == GroupState.COMPLETING_REBALANCE
    assert not group.members and group.state == GroupState.EMPTY
    assert group.generation_id == joined.generation_id + 1


def test_members_that_all_sync_in_time_stay_stable() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        joined = await asyncio.gather(_join_dynamic(coordinator), _join_dynamic(coordinator))
        await asyncio.gather(*(_sync(coordinator, j) for j in joined))
        for _ in range(4):  # keep heartbeating past the rebalance timeout
            await asyncio.sleep(REBALANCE_MS / 3000)
            for j in joined:
                coordinator.heartbeat("g", j.member_id, j.generation_id)
        group = coordinator.group("g")
        coordinator.close()
        return joined, group

    joined, group = asyncio.run(scenario())
    assert group.state == GroupState.STABLE and group.generation_id == joined[0].generation_id
    assert set(group.members) == {j.member_id for j in joined}
    assert not group.pending_sync and group.sync_timer is None


def test_static_member_that_does_not_rejoin_stays_through_the_join_phase_then_goes_without_sync() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        a, b = await asyncio.gather(_join(coordinator, instance="a"), _join(coordinator, instance="b"))
        await asyncio.gather(_sync(coordinator, a, "a"), _sync(coordinator, b, "b"))
        leader = a if a.leader == a.member_id else b
        leader_instance = "a" if leader is a else "b"
        rejoined = await _join(coordinator, leader.member_id, leader_instance)  # the other never rejoins
        group = coordinator.group("g")
        members_after_join = {m[0] for m in rejoined.members}
        await _sync(coordinator, rejoined, leader_instance)
        await asyncio.sleep(REBALANCE_MS / 1000 + 0.2)
        coordinator.close()
        return a, b, leader, rejoined, members_after_join, group

    a, b, leader, rejoined, members_after_join, group = asyncio.run(scenario())
    assert rejoined.generation_id == a.generation_id + 1
    assert members_after_join == {a.member_id, b.member_id}  # the silent static member was kept
    assert list(group.members) == [leader.member_id]  # ... until its SyncGroup was overdue
    assert group.state == GroupState.PREPARING_REBALANCE


def test_member_id_handed_out_but_never_used_lapses_after_the_session_timeout() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        handed_out = await _join(coordinator)
        group = coordinator.group("g")
        coordinator.expire_members(monotonic_ms() + 5_000)
        still_pending = handed_out.member_id in group.pending_members
        coordinator.expire_members(monotonic_ms() + 10_001)
        late = await _join(coordinator, handed_out.member_id)
        coordinator.close()
        return still_pending, late, group

    still_pending, late, group = asyncio.run(scenario())
    assert still_pending
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID and not group.pending_members


def test_join_phase_waits_for_a_member_that_was_handed_an_id() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        first = await _join_dynamic(coordinator)
        await _sync(coordinator, first)
        handed_out = await _join(coordinator)  # MEMBER_ID_REQUIRED while the group is Stable
        leader_rejoin = asyncio.create_task(_join(coordinator, first.member_id))
        await asyncio.sleep(0.05)
        waiting_for_pending = not leader_rejoin.done()
        second = await _join(coordinator, handed_out.member_id)
        leader = await leader_rejoin
        coordinator.close()
        return waiting_for_pending, second, leader

    waiting_for_pending, second, leader = asyncio.run(scenario())
    assert waiting_for_pending  # the join phase waits for the member that was handed an id
    assert second.error_code == leader.error_code == ErrorCode.NONE
    assert second.generation_id == leader.generation_id == 2
