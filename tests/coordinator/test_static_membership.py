"""Static membership (KIP-345): a group.instance.id keeps its place in the group across restarts.

Driven through the state machine directly, plus one pass through the request handlers to
check that every API hands the instance id on.
"""

from __future__ import annotations

import asyncio

from kbroker.apis import groups as group_api
from kbroker.apis import offsets as offset_api
from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator.groups import GroupCoordinator, GroupState, JoinResult, validate_offset_commit
from wire import messages
from wire.errors import ErrorCode

RANGE = [("range", b"meta")]
RANGE_OR_ROUNDROBIN = [("range", b"meta"), ("roundrobin", b"meta")]


async def _join(coordinator: GroupCoordinator, instance: str, member_id: str = "", protocols=RANGE,
                rebalance_ms: int = 2_000, skip_assignment: bool = False) -> JoinResult:
    return await coordinator.join("g", member_id, instance, "client", "", 10_000, rebalance_ms, "consumer",
                                  protocols, True, supports_skip_assignment=skip_assignment)


async def _stable_group(coordinator: GroupCoordinator, *instances: str, protocols=RANGE) -> dict[str, JoinResult]:
    """Join every instance into one generation and sync it, each assigned b"for-<instance>"."""
    joined = dict(zip(instances, await asyncio.gather(*(_join(coordinator, i, protocols=protocols)
                                                          for i in instances)), strict=True))
    assignments = {j.member_id: f"for-{i}".encode() for i, j in joined.items()}
    await asyncio.gather(*(coordinator.sync("g", j.member_id, j.generation_id, None, None,
                                            assignments if j.leader == j.member_id else {}, i)
                           for i, j in joined.items()))
    assert coordinator.group("g").state == GroupState.STABLE
    return joined


def test_known_instance_rejoining_a_stable_group_takes_over_without_a_rebalance() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        rejoined = await _join(coordinator, "b")
        group = coordinator.group("g")
        state = group.state
        synced = await coordinator.sync("g", rejoined.member_id, rejoined.generation_id, None, None, {}, "b")
        coordinator.close()
        return before, rejoined, state, synced, group

    before, rejoined, state, synced, group = asyncio.run(scenario())
    assert rejoined.error_code == ErrorCode.NONE and rejoined.member_id != before["b"].member_id
    assert rejoined.member_id.startswith("b-")  # Kafka names static members after their instance id
    assert rejoined.generation_id == before["b"].generation_id and state == GroupState.STABLE
    assert rejoined.leader == before["a"].member_id and rejoined.members == []
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"for-b"  # the old member's assignment
    assert set(group.members) == {before["a"].member_id, rejoined.member_id}


def test_replaced_member_id_is_fenced_on_heartbeat_sync_commit_leave_and_join() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        old = (await _stable_group(coordinator, "a", "b"))["b"]
        new = await _join(coordinator, "b")
        group = coordinator.group("g")
        results = {
            "heartbeat": coordinator.heartbeat("g", old.member_id, old.generation_id, "b"),
            "sync": (await coordinator.sync("g", old.member_id, old.generation_id, None, None, {}, "b")).error_code,
            "commit": validate_offset_commit(group, old.member_id, "b", old.generation_id),
            "join": (await _join(coordinator, "b", old.member_id)).error_code,
            "leave": coordinator.leave("g", old.member_id, "b"),
            "new heartbeat": coordinator.heartbeat("g", new.member_id, new.generation_id, "b"),
        }
        coordinator.close()
        return results, group

    results, group = asyncio.run(scenario())
    assert results == {"heartbeat": ErrorCode.FENCED_INSTANCE_ID, "sync": ErrorCode.FENCED_INSTANCE_ID,
                       "commit": ErrorCode.FENCED_INSTANCE_ID, "join": ErrorCode.FENCED_INSTANCE_ID,
                       "leave": ErrorCode.FENCED_INSTANCE_ID, "new heartbeat": ErrorCode.NONE}
    assert group.state == GroupState.STABLE and len(group.members) == 2


def test_returning_leader_on_old_join_versions_is_told_the_previous_leader_id() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        leader = next(i for i, j in before.items() if j.leader == j.member_id)
        rejoined = await _join(coordinator, leader)
        group = coordinator.group("g")
        coordinator.close()
        return before[leader], rejoined, group

    old, rejoined, group = asyncio.run(scenario())
    assert rejoined.leader == old.member_id != rejoined.member_id  # so it does not compute an assignment
    assert rejoined.members == [] and not rejoined.skip_assignment
    assert group.leader_id == rejoined.member_id and group.state == GroupState.STABLE


def test_returning_leader_on_join_v9_leads_but_skips_the_assignment() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        leader = next(i for i, j in before.items() if j.leader == j.member_id)
        rejoined = await _join(coordinator, leader, skip_assignment=True)
        coordinator.close()
        return before, rejoined

    before, rejoined = asyncio.run(scenario())
    assert rejoined.skip_assignment and rejoined.leader == rejoined.member_id
    assert rejoined.generation_id == before["a"].generation_id
    assert len(rejoined.members) == 2 and rejoined.member_id in {m[0] for m in rejoined.members}


def test_rejoin_that_changes_the_selected_protocol_rebalances() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        before = await _stable_group(coordinator, "a", protocols=RANGE_OR_ROUNDROBIN)
        rejoined = await _join(coordinator, "a", protocols=list(reversed(RANGE_OR_ROUNDROBIN)))
        group = coordinator.group("g")
        coordinator.close()
        return before["a"], rejoined, group

    old, rejoined, group = asyncio.run(scenario())
    assert old.protocol_name == "range"
    assert rejoined.generation_id == old.generation_id + 1 and rejoined.protocol_name == "roundrobin"
    assert group.state == GroupState.COMPLETING_REBALANCE and list(group.members) == [rejoined.member_id]


def test_rejoin_while_completing_rebalance_starts_a_new_rebalance() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        first = await _join(coordinator, "a")  # CompletingRebalance: no SyncGroup yet
        second = await _join(coordinator, "a")
        group = coordinator.group("g")
        stale_sync = await coordinator.sync("g", first.member_id, first.generation_id, None, None, {}, "a")
        coordinator.close()
        return first, second, group, stale_sync

    first, second, group, stale_sync = asyncio.run(scenario())
    assert second.generation_id == first.generation_id + 1
    assert list(group.members) == [second.member_id]
    assert stale_sync.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_parked_join_of_the_replaced_member_is_answered_fenced() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        old_join = asyncio.create_task(_join(coordinator, "a", before["a"].member_id, rebalance_ms=5_000))
        await asyncio.sleep(0.01)  # a rejoins with its id and waits for b
        state = coordinator.group("g").state
        new_join = asyncio.create_task(_join(coordinator, "a", rebalance_ms=5_000))
        fenced = await old_join
        b_join = await _join(coordinator, "b", before["b"].member_id, rebalance_ms=5_000)
        new = await new_join
        coordinator.close()
        return before, state, fenced, b_join, new

    before, state, fenced, b_join, new = asyncio.run(scenario())
    assert state == GroupState.PREPARING_REBALANCE
    assert fenced.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert new.error_code == b_join.error_code == ErrorCode.NONE
    assert new.generation_id == b_join.generation_id == before["a"].generation_id + 1
    assert new.member_id != before["a"].member_id


def test_member_id_unknown_to_a_known_instance_is_fenced_and_an_unknown_instance_is_unknown() -> None:
    async def scenario():
        coordinator = GroupCoordinator(0)
        await _stable_group(coordinator, "a")
        results = (await _join(coordinator, "a", "a-someone-else"), await _join(coordinator, "z", "z-never-joined"))
        coordinator.close()
        return results

    known_instance, unknown_instance = asyncio.run(scenario())
    assert known_instance.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert unknown_instance.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_leaves_by_instance_id_alone() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        left = coordinator.leave("g", "", "b")
        unknown = coordinator.leave("g", "", "nobody")
        group = coordinator.group("g")
        coordinator.close()
        return before, left, unknown, group

    before, left, unknown, group = asyncio.run(scenario())
    assert left == ErrorCode.NONE and unknown == ErrorCode.UNKNOWN_MEMBER_ID
    assert list(group.members) == [before["a"].member_id]
    assert group.state == GroupState.PREPARING_REBALANCE


def test_static_member_is_removed_when_its_session_expires() -> None:
    async def scenario():
        coordinator = GroupCoordinator(50)
        before = await _stable_group(coordinator, "a", "b")
        group = coordinator.group("g")
        b = group.members[before["b"].member_id]
        coordinator.heartbeat("g", before["a"].member_id, before["a"].generation_id, "a")
        group.members[before["a"].member_id].session_deadline_ms = b.session_deadline_ms + 10_000
        coordinator.expire_members(b.session_deadline_ms + 1)
        coordinator.close()
        return before, group

    before, group = asyncio.run(scenario())
    assert list(group.members) == [before["a"].member_id]
    assert group.static_member_id("b") is None
    assert group.state == GroupState.PREPARING_REBALANCE


# ---- through the request handlers -------------------------------------------------------------

def _header(api_key: int, version: int):
    return messages.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                  client_id="static-client")


def test_handlers_fence_the_replaced_member_on_heartbeat_sync_commit_and_leave(tmp_path) -> None:
    broker = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                           "group.initial.rebalance.delay.ms": "0"}))
    broker.create_topic("t", 1)
    JoinGroup, SyncGroup = messages.JoinGroupRequest, messages.SyncGroupRequest

    def join(member_id: str):
        request = JoinGroup(group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=2_000, member_id=member_id,
                            group_instance_id="i-1", protocol_type="consumer",
                            protocols=[JoinGroup.JoinGroupRequestProtocol(name="range", metadata=b"m")])
        return group_api.join_group(broker, _header(11, 5), request)

    async def scenario():
        first = await join("")
        sync = SyncGroup(group_id="g", generation_id=first.generation_id, member_id=first.member_id,
                         group_instance_id="i-1", assignments=[])
        await group_api.sync_group(broker, _header(14, 3), sync)
        second = await join("")
        heartbeat = await group_api.heartbeat(broker, _header(12, 3), messages.HeartbeatRequest(
            group_id="g", generation_id=first.generation_id, member_id=first.member_id, group_instance_id="i-1"))
        synced = await group_api.sync_group(broker, _header(14, 3), sync)
        OC = messages.OffsetCommitRequest
        commit = await offset_api.offset_commit(broker, _header(8, 7), OC(
            group_id="g", generation_id_or_member_epoch=first.generation_id, member_id=first.member_id,
            group_instance_id="i-1", topics=[OC.OffsetCommitRequestTopic(name="t", partitions=[
                OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]))
        LG = messages.LeaveGroupRequest
        leave = await group_api.leave_group(broker, _header(13, 3), LG(group_id="g", members=[
            LG.MemberIdentity(member_id=first.member_id, group_instance_id="i-1")]))
        broker.coordinator.close()
        return first, second, heartbeat, synced, commit, leave

    try:
        first, second, heartbeat, synced, commit, leave = asyncio.run(scenario())
    finally:
        broker.close()
    assert second.error_code == ErrorCode.NONE and second.generation_id == first.generation_id
    assert heartbeat.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert synced.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert commit.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    assert leave.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID
