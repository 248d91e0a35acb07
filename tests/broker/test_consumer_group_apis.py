"""ConsumerGroupHeartbeat, ConsumerGroupDescribe and the group APIs that meet KIP-848 groups
(OffsetCommit/OffsetFetch with member epochs, ListGroups, DescribeGroups, DeleteGroups), over a
real socket."""

from __future__ import annotations

import uuid

import pytest

from kbroker.broker import now_ms
from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, API_VERSIONS = 8, 9, 15, 16, 42, 18
HEARTBEAT, DESCRIBE = 68, 69
HB = messages.ConsumerGroupHeartbeatRequest
GROUP = "kip848"


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic("orders", 3)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _join(client: RawClient, member_id: str = "m1", group: str = GROUP, **fields):
    request = HB(group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
                 subscribed_topic_names=["orders"], topic_partitions=[], **fields)
    return client.call(HEARTBEAT, 1, request)


def _commit(client: RawClient, member_id: str, epoch: int, version: int = 9, group: str = GROUP):
    Request = messages.OffsetCommitRequest
    topic = Request.OffsetCommitRequestTopic(name="orders", partitions=[
        Request.OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                             committed_metadata="")])
    response = client.call(OFFSET_COMMIT, version, Request(group_id=group, generation_id_or_member_epoch=epoch,
                                                           member_id=member_id, group_instance_id=None,
                                                           topics=[topic]))
    return response.topics[0].partitions[0].error_code


def test_api_versions_advertises_both_kip848_apis(client):
    response = client.call(API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                         client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[HEARTBEAT] == (0, 1) and ranges[DESCRIBE] == (0, 1)


def test_join_answers_epoch_interval_and_every_partition_by_topic_id(client, kafka_broker):
    response = _join(client)
    orders = kafka_broker.broker.topics["orders"].topic_id
    assert (response.error_code, response.member_id, response.member_epoch) == (0, "m1", 2)  # Kafka 4's epochs
    assert response.heartbeat_interval_ms == 5000
    assert [(t.topic_id, t.partitions) for t in response.assignment.topic_partitions] == [(orders, [0, 1, 2])]


def test_v0_join_without_topic_names_is_an_invalid_request(client):
    request = HB(group_id=GROUP, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                 subscribed_topic_names=None, topic_partitions=[])
    response = client.call(HEARTBEAT, 0, request)
    assert response.error_code == ErrorCode.INVALID_REQUEST


def test_member_commits_with_its_epoch(client):
    joined = _join(client)
    assert _commit(client, "m1", joined.member_epoch) == ErrorCode.NONE


def test_commit_with_a_stale_member_epoch_is_refused(client):
    _join(client)
    assert _commit(client, "m1", 7) == ErrorCode.STALE_MEMBER_EPOCH


def test_offset_fetch_with_a_stale_member_epoch_is_refused(client):
    _join(client)
    Request = messages.OffsetFetchRequest
    group = Request.OffsetFetchRequestGroup(group_id=GROUP, member_id="m1", member_epoch=9, topics=None)
    response = client.call(OFFSET_FETCH, 9, Request(groups=[group], require_stable=False))
    assert response.groups[0].error_code == ErrorCode.STALE_MEMBER_EPOCH


def test_consumer_group_describe_shows_members_and_assignments(client, kafka_broker):
    _join(client)
    request = messages.ConsumerGroupDescribeRequest(group_ids=[GROUP, "nobody"], include_authorized_operations=True)
    described, missing = client.call(DESCRIBE, 1, request).groups
    assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", 2)
    assert described.assignor_name == "uniform"
    member = described.members[0]
    assert (member.member_id, member.member_epoch, member.member_type) == ("m1", 2, 1)
    assert [(t.topic_name, t.partitions) for t in member.assignment.topic_partitions] == [("orders", [0, 1, 2])]
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_list_groups_v5_reports_the_consumer_type_and_filters_on_it(client):
    _join(client)
    Request = messages.ListGroupsRequest
    everything = client.call(LIST_GROUPS, 5, Request(states_filter=[], types_filter=[])).groups
    classic_only = client.call(LIST_GROUPS, 5, Request(states_filter=[], types_filter=["classic"])).groups
    listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in everything}
    assert listed[GROUP] == ("consumer", "Stable", "consumer")
    assert GROUP not in {g.group_id for g in classic_only}


def test_describe_groups_v6_says_a_consumer_group_is_not_classic(client):
    _join(client)
    group = client.call(DESCRIBE_GROUPS, 6, messages.DescribeGroupsRequest(
        groups=[GROUP], include_authorized_operations=False)).groups[0]
    assert (group.error_code, group.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    assert group.error_message == f"Group {GROUP} is not a classic group."


def test_delete_groups_refuses_a_consumer_group_with_members(client):
    joined = _join(client)
    request = messages.DeleteGroupsRequest(groups_names=[GROUP])
    assert client.call(DELETE_GROUPS, 2, request).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    client.call(HEARTBEAT, 1, HB(group_id=GROUP, member_id="m1", member_epoch=-1))
    assert joined.member_epoch == 2
    assert client.call(DELETE_GROUPS, 2, request).results[0].error_code == ErrorCode.NONE


def test_empty_classic_group_id_is_taken_over_by_a_consumer_group(client):
    assert _commit(client, "", -1, version=8, group="shared") == ErrorCode.NONE  # a simple commit: classic, empty
    assert _join(client, group="shared").error_code == ErrorCode.NONE


def test_heartbeat_is_unsupported_when_the_consumer_protocol_is_disabled(tmp_path):
    with running_broker(tmp_path / "data", **{"group.coordinator.rebalance.protocols": "classic"}) as broker:
        raw = RawClient(broker.bootstrap_servers)
        try:
            response = _join(raw, member_id=str(uuid.uuid4()))
        finally:
            raw.close()
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_offset_expiry_forgets_an_empty_consumer_group_without_offsets(client, kafka_broker):
    _join(client)
    client.call(HEARTBEAT, 1, HB(group_id=GROUP, member_id="m1", member_epoch=-1))
    coordinator = kafka_broker.broker.coordinator

    async def expire() -> None:  # on the broker's own event loop, as its housekeeping runs
        coordinator.expire_offsets(now_ms())

    kafka_broker._call(expire())
    assert coordinator.consumer_groups.group(GROUP) is None


def test_classic_join_of_a_consumer_group_with_members_is_inconsistent_group_protocol(client):
    _join(client)
    Request = messages.JoinGroupRequest
    join = Request(group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                   group_instance_id=None, protocol_type="consumer",
                   protocols=[Request.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None)
    assert client.call(11, 9, join).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_describe_reports_the_member_client_host(client):
    _join(client)
    request = messages.ConsumerGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=False)
    assert client.call(DESCRIBE, 1, request).groups[0].members[0].client_host == "/127.0.0.1"
