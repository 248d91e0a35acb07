"""Who may commit offsets for a classic group, through the OffsetCommit handler: members with
their current generation, or anyone (generation -1, no member id) while the group has no members.
A refused commit must not be stored."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.apis import offsets as api
from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator.groups import JoinResult
from wire import messages
from wire.errors import ErrorCode

OC = messages.OffsetCommitRequest
PROTOCOLS = [("range", b"meta")]


@pytest.fixture
def broker(tmp_path):
    b = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                      "group.initial.rebalance.delay.ms": "0"}))
    b.create_topic("t", 1)
    yield b
    b.close()


async def _commit(broker: Broker, generation: int, member_id: str, offset: int, version: int = 8) -> int:
    header = messages.RequestHeader(request_api_key=8, request_api_version=version, correlation_id=1, client_id="c")
    request = OC(group_id="g", generation_id_or_member_epoch=generation, member_id=member_id, topics=[
        OC.OffsetCommitRequestTopic(name="t", partitions=[
            OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])])
    response = await api.offset_commit(broker, header, request)
    return response.topics[0].partitions[0].error_code


async def _member(broker: Broker, sync: bool = True) -> JoinResult:
    groups = broker.coordinator.groups
    joined = await groups.join("g", "", None, "c", "", 10_000, 5_000, "consumer", PROTOCOLS, False)
    if sync:
        await groups.sync("g", joined.member_id, joined.generation_id, None, None, {})
    return joined


def _stored(broker: Broker) -> int | None:
    committed = broker.coordinator.offsets.fetch("g", "t", 0)
    return None if committed is None else committed.offset


def _run(broker: Broker, scenario):
    async def wrapped():
        try:
            return await scenario()
        finally:
            broker.coordinator.close()
    return asyncio.run(wrapped())


def test_member_commit_with_its_current_generation_is_stored(broker: Broker) -> None:
    async def scenario():
        member = await _member(broker)
        return await _commit(broker, member.generation_id, member.member_id, 10)

    assert _run(broker, scenario) == ErrorCode.NONE
    assert _stored(broker) == 10


def test_commit_with_a_stale_generation_is_illegal_generation(broker: Broker) -> None:
    async def scenario():
        member = await _member(broker)
        return await _commit(broker, member.generation_id - 1, member.member_id, 10)

    assert _run(broker, scenario) == ErrorCode.ILLEGAL_GENERATION
    assert _stored(broker) is None


def test_commit_from_an_unknown_member_is_unknown_member_id(broker: Broker) -> None:
    async def scenario():
        member = await _member(broker)
        return await _commit(broker, member.generation_id, "not-a-member", 10)

    assert _run(broker, scenario) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _stored(broker) is None


def test_simple_commit_to_a_group_with_members_is_unknown_member_id(broker: Broker) -> None:
    async def scenario():
        await _member(broker)
        return await _commit(broker, -1, "", 10)

    assert _run(broker, scenario) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _stored(broker) is None


def test_simple_commit_to_a_group_whose_members_all_left_is_stored(broker: Broker) -> None:
    async def scenario():
        member = await _member(broker)
        broker.coordinator.groups.leave("g", member.member_id)
        return await _commit(broker, -1, "", 7)

    assert _run(broker, scenario) == ErrorCode.NONE
    assert _stored(broker) == 7


def test_simple_commit_to_an_unknown_group_is_stored(broker: Broker) -> None:
    assert _run(broker, lambda: _commit(broker, -1, "", 3)) == ErrorCode.NONE
    assert _stored(broker) == 3


def test_member_commit_before_its_sync_is_rebalance_in_progress(broker: Broker) -> None:
    async def scenario():
        member = await _member(broker, sync=False)  # CompletingRebalance
        return await _commit(broker, member.generation_id, member.member_id, 10)

    assert _run(broker, scenario) == ErrorCode.REBALANCE_IN_PROGRESS
    assert _stored(broker) is None
