"""FindCoordinator, OffsetCommit and OffsetFetch handlers at every version, each response encoded."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kbroker.apis import offsets as api
from kbroker.broker import Broker
from wire import messages
from wire.errors import ErrorCode

OC, OF, FC = messages.OffsetCommitRequest, messages.OffsetFetchRequest, messages.FindCoordinatorRequest


def _call(broker: Broker, handler, api_key: int, version: int, request):
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                    client_id="test")
    response = asyncio.run(handler(broker, header, request))
    messages.encode(response, version)  # the response must be valid at this version
    return response


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_names_this_broker(broker: Broker, version: int) -> None:
    response = _call(broker, api.find_coordinator, 10, version, FC(key="g", key_type=0))
    assert response.error_code == 0 and response.node_id == broker.node_id


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched_keys(broker: Broker, version: int) -> None:
    response = _call(broker, api.find_coordinator, 10, version, FC(key_type=0, coordinator_keys=["a", "b"]))
    assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [("a", 0, 0), ("b", 0, 0)]


def test_find_coordinator_names_this_node_for_a_transactional_id(broker: Broker) -> None:
    response = _call(broker, api.find_coordinator, 10, 4, FC(key_type=1, coordinator_keys=["tx"]))
    assert (response.coordinators[0].error_code, response.coordinators[0].node_id) == (ErrorCode.NONE,
                                                                                        broker.node_id)


def _commit_request(version: int, topic_id: uuid.UUID, offset: int):
    partition = OC.OffsetCommitRequestPartition(partition_index=1, committed_offset=offset,
                                                committed_metadata="meta")
    topic = OC.OffsetCommitRequestTopic(partitions=[partition],
                                        **({"topic_id": topic_id} if version >= 10 else {"name": "t"}))
    return OC(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[topic])


def _fetch_request(version: int, topic_id: uuid.UUID):
    if version >= 8:
        topic = OF.OffsetFetchRequestTopics(partition_indexes=[0, 1],
                                            **({"topic_id": topic_id} if version >= 10 else {"name": "t"}))
        return OF(groups=[OF.OffsetFetchRequestGroup(group_id="g", topics=[topic])])
    return OF(group_id="g", topics=[OF.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])])


def _fetched(version: int, response) -> list[tuple[int, int, str]]:
    topics = response.groups[0].topics if version >= 8 else response.topics
    return [(p.partition_index, p.committed_offset, p.metadata) for p in topics[0].partitions]


@pytest.mark.parametrize("version", range(2, 11))
def test_simple_commit_is_fetched_back(broker: Broker, version: int) -> None:
    topic_id = broker.topics["t"].topic_id
    committed = _call(broker, api.offset_commit, 8, version, _commit_request(version, topic_id, 42 + version))
    assert committed.topics[0].partitions[0].error_code == 0
    fetch_version = min(version, 10) if version >= 2 else 1
    fetched = _call(broker, api.offset_fetch, 9, fetch_version, _fetch_request(fetch_version, topic_id))
    assert _fetched(fetch_version, fetched) == [(0, -1, ""), (1, 42 + version, "meta")]


@pytest.mark.parametrize("version", [1, 7, 8, 10])
def test_fetch_all_topics_when_topics_is_null(broker: Broker, version: int) -> None:
    topic_id = broker.topics["t"].topic_id
    _call(broker, api.offset_commit, 8, 9, _commit_request(9, topic_id, 5))
    if version >= 8:
        request = OF(groups=[OF.OffsetFetchRequestGroup(group_id="g", topics=None)])
    else:
        request = OF(group_id="g", topics=None if version >= 2 else [])
    fetched = _call(broker, api.offset_fetch, 9, version, request)
    if version >= 2:
        assert _fetched(version, fetched) == [(1, 5, "meta")]


def test_commit_to_unknown_topic_is_refused(broker: Broker) -> None:
    request = OC(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[OC.OffsetCommitRequestTopic(
        name="nope", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
    response = _call(broker, api.offset_commit, 8, 9, request)
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_commit_by_unknown_topic_id_is_unknown_topic_id(broker: Broker) -> None:
    response = _call(broker, api.offset_commit, 8, 10, _commit_request(10, uuid.uuid4(), 1))
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_commit_with_a_generation_to_an_unknown_group_is_illegal(broker: Broker) -> None:
    request = _commit_request(9, broker.topics["t"].topic_id, 1)
    request.generation_id_or_member_epoch = 3
    response = _call(broker, api.offset_commit, 8, 9, request)
    assert response.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
