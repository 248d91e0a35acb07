"""Transactions v2 (KIP-890 part 2, Kafka 4's `transaction.version` 2) over a socket on a single node: the feature in
ApiVersions, partitions added by their leader from Produce v12 and by the group coordinator from TxnOffsetCommit v5,
and EndTxn v5's epoch bump, retries, empty aborts and producer id rotation. Java producers on v2:
compat-tests/test_transactions_java.py."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_transaction_coordinator import TOPIC, TXN_ID, _describe, _init, _markers

from kbroker.coordinator.offsets import OFFSETS_TOPIC
from kbroker.coordinator.transactions.metadata import TxnState
from wire import messages
from wire.errors import ErrorCode
from wire.records import CONTROL_ABORT, CONTROL_COMMIT, Record, build_batch

from raw_client import RawClient

API_VERSIONS, PRODUCE, END_TXN, TXN_OFFSET_COMMIT = 18, 0, 26, 28
GROUP = "v2-readers"


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic(TOPIC, 2)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def _end_v5(client, producer_id: int, epoch: int, commit: bool):
    return client.call(END_TXN, 5, messages.EndTxnRequest(
        transactional_id=TXN_ID, producer_id=producer_id, producer_epoch=epoch, committed=commit))


def _produce_v12(client, producer_id: int, epoch: int, partition: int, sequence: int = 0):
    P = messages.ProduceRequest
    batch = build_batch([Record(0, time.time_ns() // 1_000_000, None, b"v2", ())], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    response = client.call(PRODUCE, 12, P(transactional_id=TXN_ID, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]))
    return response.responses[0].partition_responses[0].error_code


def test_api_versions_finalizes_transaction_version_2_and_lists_its_range_from_v4(client) -> None:
    v4 = client.call(API_VERSIONS, 4, messages.ApiVersionsRequest(client_software_name="t",
                                                                  client_software_version="1"))
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features] == \
        [("transaction.version", 2, 2)]
    assert v4.finalized_features_epoch >= 0
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [("transaction.version", 0, 2)]
    assert {k.api_key: k.max_version for k in v4.api_keys}[END_TXN] == 5
    v3 = client.call(API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                  client_software_version="1"))
    assert v3.supported_features == []  # a level-0 minimum is listed to v4+ only, as Kafka does


def test_a_produce_v12_adds_its_partition_to_the_transaction(client) -> None:
    init = _init(client)
    assert _produce_v12(client, init.producer_id, init.producer_epoch, 1) == ErrorCode.NONE
    described = _describe(client)
    assert described.transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in described.topics] == [(TOPIC, [1])]


def test_an_end_txn_v5_bumps_the_epoch_and_its_markers_carry_the_new_one(kafka_broker, client) -> None:
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    assert _produce_v12(client, pid, epoch, 0) == ErrorCode.NONE
    ended = _end_v5(client, pid, epoch, True)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_COMMIT, pid, epoch + 1)]
    assert _produce_v12(client, pid, epoch + 1, 0) == ErrorCode.NONE  # the next transaction, sequence 0 again


def test_a_retried_end_txn_v5_one_epoch_behind_gets_the_same_answer(client) -> None:
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _produce_v12(client, pid, epoch, 0)
    first = _end_v5(client, pid, epoch, True)
    again = _end_v5(client, pid, epoch, True)
    assert (again.error_code, again.producer_id, again.producer_epoch) == \
        (ErrorCode.NONE, first.producer_id, first.producer_epoch)
    assert _end_v5(client, pid, epoch, False).error_code == ErrorCode.INVALID_TXN_STATE  # not the end it retries


def test_an_end_txn_v5_abort_with_nothing_added_is_an_empty_transaction(client) -> None:
    init = _init(client)
    ended = _end_v5(client, init.producer_id, init.producer_epoch, False)
    assert (ended.error_code, ended.producer_epoch) == (ErrorCode.NONE, init.producer_epoch + 1)
    assert _describe(client).transaction_state == "CompleteAbort"
    assert _end_v5(client, init.producer_id, init.producer_epoch + 1, True).error_code == ErrorCode.INVALID_TXN_STATE


def test_an_end_txn_v5_with_an_older_epoch_than_the_last_bump_is_producer_fenced(client) -> None:
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _produce_v12(client, pid, epoch, 0)
    assert _end_v5(client, pid, epoch, True).error_code == ErrorCode.NONE
    assert _end_v5(client, pid, epoch + 1, False).error_code == ErrorCode.NONE  # an empty abort: epoch + 2
    assert _end_v5(client, pid, epoch, True).error_code == ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_moves_the_producer_to_a_new_id_at_its_end(kafka_broker, client) -> None:
    """At epoch 32766 the end's markers carry 32767 under the old id, and the client continues with a new id."""
    init = _init(client)
    coordinator = kafka_broker.broker.transactions
    worn = coordinator.transactions[TXN_ID].moved(producer_epoch=32766)

    async def wear_out() -> None:
        assert await coordinator._write(worn) == ErrorCode.NONE
    asyncio.run_coroutine_threadsafe(wear_out(), kafka_broker._loop).result(10)
    pid = init.producer_id
    assert _produce_v12(client, pid, 32766, 0) == ErrorCode.NONE
    ended = _end_v5(client, pid, 32766, True)
    assert ended.error_code == ErrorCode.NONE
    assert ended.producer_id != pid and ended.producer_epoch == 0
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_COMMIT, pid, 32767)]
    again = _end_v5(client, pid, 32766, True)  # its retry, under the old id
    assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, ended.producer_id, 0)
    assert coordinator.transactions[TXN_ID].state == TxnState.COMPLETE_COMMIT


def test_a_txn_offset_commit_v5_adds_the_groups_offsets_partition(kafka_broker, client) -> None:
    init = _init(client)
    T = messages.TxnOffsetCommitRequest
    response = client.call(TXN_OFFSET_COMMIT, 5, T(
        transactional_id=TXN_ID, group_id=GROUP, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
        generation_id=-1, member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(
            name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata="")])]))
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    offsets_partition = kafka_broker.broker.transactions.group_partition(GROUP)
    assert [(t.topic, t.partitions) for t in _describe(client).topics] == [(OFFSETS_TOPIC, [offsets_partition[1]])]


def test_a_produce_v12_with_two_transactional_producers_is_invalid_producer_id_mapping(kafka_broker, client) -> None:
    init = _init(client)
    P = messages.ProduceRequest
    now = time.time_ns() // 1_000_000
    batches = [build_batch([Record(0, now, None, b"x", ())], producer_id=pid, producer_epoch=init.producer_epoch,
                           base_sequence=0, is_transactional=True) for pid in (init.producer_id, init.producer_id + 1)]
    response = client.call(PRODUCE, 12, P(transactional_id=TXN_ID, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=TOPIC, partition_data=[P.PartitionProduceData(index=i, records=batches[i])
                                                       for i in (0, 1)])]))
    assert [p.error_code for p in response.responses[0].partition_responses] == \
        [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 2
    assert _describe(client).transaction_state == "Empty"
    assert kafka_broker.broker.partition_log(TOPIC, 1).log_end_offset == 0


def test_a_fenced_v2_transaction_is_aborted_one_epoch_up_and_its_producers_abort_answered_as_a_retry(
        kafka_broker, client) -> None:
    """A new InitProducerId aborts the open transaction under the next epoch (Kafka 4's v2 end); the old producer's
    EndTxn v5 abort, one epoch behind, is the retry of that end."""
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _produce_v12(client, pid, epoch, 0)
    assert _init(client).error_code == ErrorCode.CONCURRENT_TRANSACTIONS  # the open transaction is aborted first
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_ABORT, pid, epoch + 1)]
    aborted = _end_v5(client, pid, epoch, False)
    assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
    assert _end_v5(client, pid, epoch, True).error_code == ErrorCode.INVALID_TXN_STATE
