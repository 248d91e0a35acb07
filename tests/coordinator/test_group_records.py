"""Group metadata records: Kafka's byte layout, and groups restored after a restart."""

from __future__ import annotations

import asyncio
import struct

from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator import Coordinator
from kbroker.coordinator.coordinator import encode_group, restore_group
from kbroker.coordinator.groups import Group, GroupState, Member
from kbroker.coordinator.offsets import decode_group_key, encode_group_key


def test_group_key_is_version_2_then_group() -> None:
    assert encode_group_key("g") == b"\x00\x02\x00\x01g"
    assert decode_group_key(b"\x00\x02\x00\x01g") == "g"


def test_empty_group_value_is_version_3_without_members() -> None:
    group = Group("g")
    group.protocol_type, group.generation_id, group.empty_since_ms = "consumer", 4, 77
    expected = struct.pack(">hh8sihhqi", 3, 8, b"consumer", 4, -1, -1, 77, 0)
    assert encode_group(group) == expected


def _stable_group() -> Group:
    group = Group("g")
    group.state, group.generation_id, group.protocol_type = GroupState.STABLE, 5, "consumer"
    group.protocol_name, group.leader_id = "range", "m1"
    group.members["m1"] = Member("m1", None, "client", "/h", 10_000, 30_000, "consumer",
                                 [("range", b"sub")], b"assign")
    return group


def test_stable_group_round_trips_through_its_record() -> None:
    restored = restore_group("g", encode_group(_stable_group()))
    assert restored.state == GroupState.STABLE and restored.generation_id == 5
    assert restored.protocol_name == "range" and restored.leader_id == "m1"
    member = restored.members["m1"]
    assert (member.client_id, member.session_timeout_ms, member.rebalance_timeout_ms) == ("client", 10_000, 30_000)
    assert member.protocols == [("range", b"sub")] and member.assignment == b"assign"


def test_restarted_broker_restores_a_stable_group(tmp_path) -> None:
    config = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
              "group.initial.rebalance.delay.ms": "0"}
    broker = Broker(build(config))
    coordinator = Coordinator(broker)

    async def form_group() -> int:
        groups = coordinator.groups
        first = await groups.join("g", "", None, "c", "", 10_000, 2_000, "consumer", [("range", b"s")], True)
        joined = await groups.join("g", first.member_id, None, "c", "", 10_000, 2_000, "consumer",
                                   [("range", b"s")], True)
        await groups.sync("g", joined.member_id, joined.generation_id, None, None, {joined.member_id: b"a"})
        coordinator.close()
        return joined.generation_id

    generation = asyncio.run(form_group())
    broker.close()
    reopened = Broker(build(config))
    group = Coordinator(reopened).groups.group("g")
    assert group.state == GroupState.STABLE and group.generation_id == generation
    [member] = group.members.values()
    assert member.assignment == b"a"
    reopened.close()


def test_deleted_group_is_not_restored(tmp_path) -> None:
    config = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    broker = Broker(build(config))
    coordinator = Coordinator(broker)
    group = coordinator.groups.groups["g"] = Group("g")
    group.protocol_type = "consumer"
    coordinator._persist(group)
    coordinator.forget_group("g")
    broker.close()
    reopened = Broker(build(config))
    assert Coordinator(reopened).groups.group("g") is None
    reopened.close()
