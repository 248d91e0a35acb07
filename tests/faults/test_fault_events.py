"""Cluster events on a single node: coordinator trouble, rebalances, expired sessions, leadership, data loss."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_wire import FETCH, PRODUCE, TOPIC, partition_errors, produce_request

from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

JOIN_GROUP, SYNC_GROUP, HEARTBEAT = 11, 14, 12
GROUP = "payments"


@pytest.fixture
def group_broker(tmp_path) -> Iterator:
    """A broker whose groups form at once (no initial rebalance delay)."""
    with running_broker(tmp_path / "data", **{"group.initial.rebalance.delay.ms": "0"}) as broker:
        yield broker


def _stable_member(client: RawClient) -> tuple[str, int]:
    """Join GROUP and sync: (member id, generation)."""
    join = messages.JoinGroupRequest
    joined = client.call(JOIN_GROUP, 3, join(group_id=GROUP, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                              member_id="", protocol_type="consumer", protocols=[
                                                  join.JoinGroupRequestProtocol(name="range", metadata=b"")]))
    assert joined.error_code == ErrorCode.NONE
    sync = messages.SyncGroupRequest
    synced = client.call(SYNC_GROUP, 3, sync(group_id=GROUP, generation_id=joined.generation_id,
                                              member_id=joined.member_id, assignments=[]))
    assert synced.error_code == ErrorCode.NONE
    return joined.member_id, joined.generation_id


def _heartbeat(client: RawClient, member_id: str, generation: int) -> int:
    request = messages.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
    return client.call(HEARTBEAT, 3, request).error_code


def test_force_rebalance_makes_heartbeats_answer_rebalance_in_progress(group_broker) -> None:
    client = RawClient(group_broker.bootstrap_servers, client_id="fault-test")
    member_id, generation = _stable_member(client)
    assert group_broker.faults.force_rebalance(GROUP) is True
    assert _heartbeat(client, member_id, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    client.close()


def test_expired_session_makes_the_member_unknown(group_broker) -> None:
    client = RawClient(group_broker.bootstrap_servers, client_id="fault-test")
    member_id, generation = _stable_member(client)
    assert group_broker.faults.expire_session(GROUP, member_id) == [member_id]
    assert _heartbeat(client, member_id, generation) == ErrorCode.UNKNOWN_MEMBER_ID
    client.close()


def test_force_rebalance_of_an_unknown_group_is_false(group_broker) -> None:
    assert group_broker.faults.force_rebalance("nobody") is False


def test_truncate_log_loses_acknowledged_records(broker, client) -> None:
    for _ in range(3):
        client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert broker.faults.truncate_log(TOPIC, 0, 1) is True
    assert broker.broker.partition_log(TOPIC, 0).log_end_offset == 1


def test_leadership_moved_answers_not_leader_to_produce_and_fetch_of_that_partition(broker, client) -> None:
    faults = broker.faults.leadership_moved(TOPIC, 0)
    fetch = messages.FetchRequest
    try:
        produced = client.call(PRODUCE, 9, produce_request({TOPIC: [0, 1]}))
        fetched = client.call(FETCH, 12, fetch(max_wait_ms=0, min_bytes=1, topics=[fetch.FetchTopic(
            topic=TOPIC, partitions=[fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)])]))
    finally:
        for fault in faults:
            fault.remove()
    assert partition_errors(produced) == {(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER, (TOPIC, 1): ErrorCode.NONE}
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
