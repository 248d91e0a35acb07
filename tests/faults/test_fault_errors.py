"""Injected errors: shaped as Kafka shapes them, and only where, and as often as, the test asked."""

from __future__ import annotations

from fault_wire import (
    FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    OFFSET_COMMIT,
    PRODUCE,
    TOPIC,
    partition_errors,
    produce_request,
)

from wire import messages
from wire.errors import ErrorCode

from raw_client import RawClient

NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


def _end(broker, partition: int = 0) -> int:
    return broker.broker.partition_log(TOPIC, partition).log_end_offset


def test_no_fault_object_exists_until_one_is_asked_for(broker) -> None:
    assert broker.broker.faults is None


def test_produce_error_is_answered_per_partition_and_nothing_is_appended(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER"):
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0, 1]}))
    assert partition_errors(response) == {(TOPIC, 0): NOT_LEADER, (TOPIC, 1): NOT_LEADER}
    assert response.responses[0].partition_responses[0].base_offset == -1
    assert (_end(broker, 0), _end(broker, 1)) == (0, 0)


def test_count_fires_on_the_next_n_requests_then_stops(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2) as fault:
        answers = [partition_errors(client.call(PRODUCE, 9, produce_request({TOPIC: [0]})))[(TOPIC, 0)]
                   for _ in range(3)]
    assert answers == [NOT_LEADER, NOT_LEADER, ErrorCode.NONE]
    assert fault.fired == 2


def test_leaving_the_block_removes_the_fault(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER"):
        pass
    response = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert partition_errors(response) == {(TOPIC, 0): ErrorCode.NONE}
    assert broker.broker.faults is None


def test_api_and_error_are_taken_by_key_and_code_too(broker, client) -> None:
    with broker.faults.inject(api=0, error=6, count=1) as fault:
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert partition_errors(response) == {(TOPIC, 0): NOT_LEADER}
    assert fault.fired == 1


def test_partition_filter_fails_only_that_partition_and_appends_the_others(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", topic=TOPIC, partition=1):
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0, 1]}))
    assert partition_errors(response) == {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): NOT_LEADER}
    assert (_end(broker, 0), _end(broker, 1)) == (1, 0)


def test_topic_filter_ignores_requests_for_other_topics(broker, client) -> None:
    broker.broker.create_topic("audit", 1)
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", topic="audit") as fault:
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert partition_errors(response) == {(TOPIC, 0): ErrorCode.NONE}
    assert fault.fired == 0


def test_client_id_filter_spares_other_clients(broker, client) -> None:
    other = RawClient(broker.bootstrap_servers, client_id="billing")
    try:
        with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", client_id="billing"):
            mine = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
            theirs = other.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    finally:
        other.close()
    assert partition_errors(mine) == {(TOPIC, 0): ErrorCode.NONE}
    assert partition_errors(theirs) == {(TOPIC, 0): NOT_LEADER}


def test_rate_zero_never_fires_and_rate_one_always_does(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", rate=0.0) as never:
        spared = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", rate=1.0) as always:
        hit = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert (never.fired, always.fired) == (0, 1)
    assert partition_errors(spared)[(TOPIC, 0)] == ErrorCode.NONE
    assert partition_errors(hit)[(TOPIC, 0)] == NOT_LEADER


def test_fetch_partition_error_leaves_the_top_level_error_unset(broker, client) -> None:
    fetch = messages.FetchRequest
    request = fetch(max_wait_ms=0, min_bytes=1, topics=[fetch.FetchTopic(topic=TOPIC, partitions=[
        fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    with broker.faults.inject(api="Fetch", error="NOT_LEADER_OR_FOLLOWER"):
        response = client.call(FETCH, 12, request)
    assert response.error_code == ErrorCode.NONE
    partition = response.responses[0].partitions[0]
    assert (response.responses[0].topic, partition.partition_index, partition.error_code) == (TOPIC, 0, NOT_LEADER)
    assert partition.high_watermark == -1


def test_coordinator_error_is_answered_at_the_top_level(broker, client) -> None:
    join = messages.JoinGroupRequest
    request = join(group_id="payments", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                   protocol_type="consumer", protocols=[join.JoinGroupRequestProtocol(name="range", metadata=b"")])
    with broker.faults.inject(api="JoinGroup", error="COORDINATOR_LOAD_IN_PROGRESS", group="payments"):
        response = client.call(JOIN_GROUP, 5, request)
    assert response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert response.generation_id == -1


def test_find_coordinator_v4_error_is_per_coordinator_key(broker, client) -> None:
    find = messages.FindCoordinatorRequest
    with broker.faults.inject(api="FindCoordinator", error="COORDINATOR_NOT_AVAILABLE"):
        response = client.call(FIND_COORDINATOR, 4, find(key_type=0, coordinator_keys=["a", "b"]))
    assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [
        ("a", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1), ("b", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)]


def test_offset_commit_coordinator_error_is_per_partition_as_the_api_has_no_top_level_error(broker, client) -> None:
    commit = messages.OffsetCommitRequest
    request = commit(group_id="payments", generation_id_or_member_epoch=-1, member_id="", topics=[
        commit.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=5),
            commit.OffsetCommitRequestPartition(partition_index=1, committed_offset=7)])])
    with broker.faults.inject(api="OffsetCommit", error="NOT_COORDINATOR"):
        response = client.call(OFFSET_COMMIT, 8, request)
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, ErrorCode.NOT_COORDINATOR), (1, ErrorCode.NOT_COORDINATOR)]


def test_coordinator_unavailable_answers_every_group_api(broker, client) -> None:
    faults = broker.faults.coordinator_unavailable("COORDINATOR_LOAD_IN_PROGRESS")
    find = messages.FindCoordinatorRequest
    try:
        response = client.call(FIND_COORDINATOR, 3, find(key_type=0, key="payments"))
    finally:
        for fault in faults:
            fault.remove()
    assert response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert {messages.api(fault.api).name for fault in faults} >= {"JoinGroup", "Heartbeat", "OffsetCommit"}


def test_acks_zero_produce_gets_no_answer_under_an_error(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER") as fault:
        client.send(PRODUCE, 9, produce_request({TOPIC: [0]}, acks=0))
        answered = client.call(3, 12, messages.MetadataRequest(topics=None))
    assert fault.fired == 1
    assert answered.topics  # the next answer is Metadata's: the produce was not answered


def test_rate_acts_on_about_that_fraction_of_requests(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", rate=0.5) as fault:
        for _ in range(200):
            client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert 60 <= fault.fired <= 140  # binomial(200, 0.5): outside this once in ~10^8 runs
    assert broker.broker.partition_log(TOPIC, 0).log_end_offset == 200 - fault.fired


def test_rate_with_count_stops_after_count(broker, client) -> None:
    with broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", rate=1.0, count=2) as fault:
        for _ in range(5):
            client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert fault.fired == 2


def test_a_metadata_error_marks_every_topic_of_an_all_topics_request_and_keeps_the_brokers(broker, client) -> None:
    with broker.faults.inject(api="Metadata", error="LEADER_NOT_AVAILABLE", count=1):
        answered = client.call(3, 12, messages.MetadataRequest(topics=None))
    assert [broker_.node_id for broker_ in answered.brokers] == [broker.broker.node_id]
    assert answered.controller_id == broker.broker.node_id
    assert {topic.name: topic.error_code for topic in answered.topics} == {TOPIC: ErrorCode.LEADER_NOT_AVAILABLE}


def test_a_metadata_error_for_one_partition_marks_that_partition_alone(broker, client) -> None:
    request = messages.MetadataRequest(topics=[messages.classes("MetadataRequest")["MetadataRequestTopic"](
        name=TOPIC, topic_id=None)])
    with broker.faults.inject(api="Metadata", error="LEADER_NOT_AVAILABLE", topic=TOPIC, partition=1, count=1):
        (topic,) = client.call(3, 12, request).topics
    assert topic.error_code == ErrorCode.NONE
    assert {p.partition_index: p.error_code for p in topic.partitions} == {0: ErrorCode.NONE,
                                                                          1: ErrorCode.LEADER_NOT_AVAILABLE}
