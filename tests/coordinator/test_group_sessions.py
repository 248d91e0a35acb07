"""The classic group's session timers: a silent member goes at its own deadline, and only what Kafka 4's
coordinator counts as a sign of life starts a new session.

`expire_members(now)` expires what is due by a clock moved ahead of the timers, so most tests need no waiting;
the first one waits a real session out to show the timer itself fires on time.
"""

from __future__ import annotations

import asyncio

from kbroker.coordinator.groups import GroupCoordinator, GroupState, JoinResult, monotonic_ms
from wire.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]
SESSION_MS = 6000  # group.min.session.timeout.ms
LONGEST_SESSION_MS = 1_800_000  # group.max.session.timeout.ms
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


async def _join(coordinator: GroupCoordinator, member_id: str = "", *, session_ms: int = SESSION_MS,
                rebalance_ms: int = 600_000, protocols=PROTOCOLS) -> JoinResult:
    return await coordinator.join("g", member_id, None, "client", "", session_ms, rebalance_ms, "consumer",
                                  protocols, require_known_member_id=True)


async def _member(coordinator: GroupCoordinator, **kwargs) -> JoinResult:
    first = await _join(coordinator, **kwargs)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return await _join(coordinator, first.member_id, **kwargs)


async def _sync(coordinator: GroupCoordinator, joined: JoinResult, assignments: dict[str, bytes] | None = None):
    return await coordinator.sync("g", joined.member_id, joined.generation_id, None, None, assignments or {})


async def _stable_pair(coordinator: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    """(leader, follower) of a Stable generation, both synced."""
    leader, follower = await asyncio.gather(_member(coordinator), _member(coordinator))
    if follower.leader == follower.member_id:
        leader, follower = follower, leader
    await asyncio.gather(_sync(coordinator, leader), _sync(coordinator, follower))
    return leader, follower


def test_silent_member_is_removed_at_its_own_session_deadline() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _member(coordinator)
        await _sync(coordinator, joined)
        assert coordinator.heartbeat("g", joined.member_id, joined.generation_id) == ErrorCode.NONE
        group = coordinator.group("g")
        await asyncio.sleep(SESSION_MS / 1000 - 1)
        a_second_before = list(group.members)
        await asyncio.sleep(1.005)  # its timer, due before this sleep ends, has run by now
        just_after = list(group.members)
        coordinator.close()
        return joined, a_second_before, just_after, group.state

    joined, a_second_before, just_after, state = asyncio.run(scenario())
    assert a_second_before == [joined.member_id]
    assert just_after == [] and state == GroupState.EMPTY


def test_join_answered_at_once_does_not_start_a_new_session() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        leader, follower = await _stable_pair(coordinator)
        sessions_started_by = monotonic_ms()
        await asyncio.sleep(0.05)
        rejoined = await _join(coordinator, follower.member_id)  # same protocols, Stable: the same generation
        coordinator.heartbeat("g", leader.member_id, leader.generation_id)
        group = coordinator.group("g")
        coordinator.expire_members(sessions_started_by + SESSION_MS)
        members = set(group.members)
        coordinator.close()
        return leader, follower, rejoined, members

    leader, follower, rejoined, members = asyncio.run(scenario())
    assert rejoined.generation_id == follower.generation_id
    assert members == {leader.member_id}


def test_answered_sync_starts_a_new_session() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        leader, follower = await asyncio.gather(_member(coordinator), _member(coordinator))
        if follower.leader == follower.member_id:
            leader, follower = follower, leader
        parked = asyncio.ensure_future(_sync(coordinator, follower))
        await asyncio.sleep(0.05)  # the follower waits in SyncGroup for the leader's assignment
        await _sync(coordinator, leader)
        answered_at = monotonic_ms()
        await parked
        coordinator.expire_members(answered_at + SESSION_MS - 1)
        members = set(coordinator.group("g").members)
        coordinator.close()
        return leader, follower, members

    leader, follower, members = asyncio.run(scenario())
    assert members == {leader.member_id, follower.member_id}


def test_sync_to_a_stable_group_does_not_start_a_new_session() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        leader, follower = await _stable_pair(coordinator)
        sessions_started_by = monotonic_ms()
        await asyncio.sleep(0.05)
        synced_again = await _sync(coordinator, follower)
        coordinator.heartbeat("g", leader.member_id, leader.generation_id)
        group = coordinator.group("g")
        coordinator.expire_members(sessions_started_by + SESSION_MS)
        members = set(group.members)
        coordinator.close()
        return leader, synced_again, members

    leader, synced_again, members = asyncio.run(scenario())
    assert synced_again.error_code == ErrorCode.NONE
    assert members == {leader.member_id}


def test_member_commit_to_a_stable_group_starts_a_new_session() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        joined = await _member(coordinator)
        await _sync(coordinator, joined)
        await asyncio.sleep(0.05)
        committed = coordinator.commit_offsets_error("g", joined.member_id, None, joined.generation_id)
        committed_at = monotonic_ms()
        coordinator.expire_members(committed_at + SESSION_MS - 1)
        members = list(coordinator.group("g").members)
        coordinator.close()
        return joined, committed, members

    joined, committed, members = asyncio.run(scenario())
    assert committed == ErrorCode.NONE and members == [joined.member_id]


def test_new_member_parked_in_its_first_join_lapses_after_the_new_member_join_timeout() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        old = await _member(coordinator, session_ms=LONGEST_SESSION_MS)
        await _sync(coordinator, old)
        handed_out = await _join(coordinator)
        parked = asyncio.ensure_future(_join(coordinator, handed_out.member_id))  # old never rejoins
        await asyncio.sleep(0.05)
        coordinator.expire_members(monotonic_ms() + NEW_MEMBER_JOIN_TIMEOUT_MS)
        answer = await parked
        members = list(coordinator.group("g").members)
        coordinator.close()
        return old, answer, members

    old, answer, members = asyncio.run(scenario())
    assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert members == [old.member_id]
