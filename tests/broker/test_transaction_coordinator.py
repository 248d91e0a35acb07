"""The transaction coordinator over a socket (Kafka 3.9's transactions v1): producer ids and epochs,
fencing, the end of a transaction with its markers, timeouts, the state in `__transaction_state` across a
restart, and the admin APIs. Real clients' transactions: compat-tests/test_transactions.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC, decode_key, decode_value
from kbroker.testing import running_broker
from wire import messages
from wire.errors import ErrorCode
from wire.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    iter_records,
    parse_control_key,
    read_batch_header,
)

from raw_client import RawClient

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, DESCRIBE, LIST = 24, 25, 26, 27, 65, 66
TOPIC = "orders"
TXN_ID = "payments-1"


def _init(client: RawClient, transactional_id: str = TXN_ID, timeout_ms: int = 60_000, producer_id: int = -1,
          epoch: int = -1, version: int = 4):
    return client.call(INIT_PRODUCER_ID, version, messages.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms, producer_id=producer_id,
        producer_epoch=epoch))


def _add(client: RawClient, producer_id: int, epoch: int, partitions: dict[str, list[int]], version: int = 3,
         transactional_id: str = TXN_ID):
    R = messages.AddPartitionsToTxnRequest
    response = client.call(ADD_PARTITIONS, version, R(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            R.AddPartitionsToTxnTopic(name=name, partitions=indexes) for name, indexes in partitions.items()]))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


def _end(client: RawClient, producer_id: int, epoch: int, commit: bool, version: int = 3) -> int:
    return client.call(END_TXN, version, messages.EndTxnRequest(
        transactional_id=TXN_ID, producer_id=producer_id, producer_epoch=epoch, committed=commit)).error_code


def _produce(client: RawClient, producer_id: int, epoch: int, sequence: int, values: list[bytes],
             transactional_id: str | None = TXN_ID, partition: int = 0) -> int:
    P = messages.ProduceRequest
    now = time.time_ns() // 1_000_000
    batch = build_batch([Record(i, now, None, v, ()) for i, v in enumerate(values)], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    response = client.call(PRODUCE, 9, P(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]))
    return response.responses[0].partition_responses[0].error_code


def _describe(client: RawClient, transactional_id: str = TXN_ID):
    return client.call(DESCRIBE, 0, messages.DescribeTransactionsRequest(
        transactional_ids=[transactional_id])).transaction_states[0]


def _markers(broker, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(control type, producer id, epoch) of every control batch in the partition."""
    plog = broker.partition_log(topic, partition)
    buf = plog.read(plog.log_start_offset, 1 << 20).read_bytes()
    found, pos = [], 0
    while pos < len(buf):
        header = read_batch_header(buf, pos)
        if header.is_control:
            record = next(iter_records(buf, pos))
            found.append((parse_control_key(record.key), header.producer_id, header.producer_epoch))
        pos += header.size
    return found


@pytest.fixture
def client(kafka_broker):
    kafka_broker.broker.create_topic(TOPIC, 2)
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def test_find_coordinator_names_this_broker_for_a_transactional_id_and_creates_the_state_topic(
        kafka_broker, client) -> None:
    response = client.call(FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key=TXN_ID, key_type=1))
    port = int(kafka_broker.bootstrap_servers.rsplit(":", 1)[1])
    assert (response.error_code, response.node_id, response.port) == (0, 0, port)
    state_topic = kafka_broker.broker.topics[TRANSACTION_TOPIC]
    assert state_topic.partitions == 50
    assert state_topic.configs["cleanup.policy"] == "compact"


def test_a_transactional_id_starts_at_epoch_0_and_each_init_bumps_the_epoch(client) -> None:
    first = _init(client)
    second = _init(client)
    assert (first.error_code, first.producer_epoch) == (0, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (0, first.producer_id, 1)


def test_a_timeout_above_transaction_max_timeout_ms_is_invalid_transaction_timeout(client) -> None:
    assert _init(client, timeout_ms=900_001).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_an_empty_transactional_id_is_invalid_request(client) -> None:
    assert _init(client, transactional_id="").error_code == ErrorCode.INVALID_REQUEST


def test_an_old_epoch_is_producer_fenced_and_invalid_producer_epoch_before_v2(client) -> None:
    old = _init(client)
    _init(client)
    assert _add(client, old.producer_id, old.producer_epoch, {TOPIC: [0]}) == {(TOPIC, 0): ErrorCode.PRODUCER_FENCED}
    assert _add(client, old.producer_id, old.producer_epoch, {TOPIC: [0]}, version=1) == \
        {(TOPIC, 0): ErrorCode.INVALID_PRODUCER_EPOCH}


def test_a_producer_id_the_transactional_id_does_not_have_is_invalid_producer_id_mapping(client) -> None:
    init = _init(client)
    assert _end(client, init.producer_id + 1, init.producer_epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_an_unknown_partition_is_named_and_no_partition_is_added(client) -> None:
    init = _init(client)
    errors = _add(client, init.producer_id, init.producer_epoch, {TOPIC: [0], "nowhere": [0]})
    assert errors == {(TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                      ("nowhere", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _describe(client).transaction_state == "Empty"


def test_end_txn_without_a_transaction_is_invalid_txn_state(client) -> None:
    init = _init(client)
    assert _end(client, init.producer_id, init.producer_epoch, True) == ErrorCode.INVALID_TXN_STATE


def test_a_commit_writes_a_commit_marker_into_every_partition_of_the_transaction(kafka_broker, client) -> None:
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    assert _add(client, pid, epoch, {TOPIC: [0, 1]}) == {(TOPIC, 0): 0, (TOPIC, 1): 0}
    assert _produce(client, pid, epoch, 0, [b"a", b"b"]) == 0
    assert _end(client, pid, epoch, True) == 0
    broker = kafka_broker.broker
    assert _markers(broker, TOPIC, 0) == _markers(broker, TOPIC, 1) == [(CONTROL_COMMIT, pid, epoch)]
    described = _describe(client)
    assert (described.transaction_state, described.topics) == ("CompleteCommit", [])


def test_a_retried_commit_succeeds_and_an_abort_after_it_is_invalid_txn_state(client) -> None:
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _add(client, pid, epoch, {TOPIC: [0]})
    assert _end(client, pid, epoch, True) == 0
    assert _end(client, pid, epoch, True) == 0
    assert _end(client, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE


def test_an_init_while_a_transaction_is_open_aborts_it_under_a_new_epoch_and_asks_to_retry(
        kafka_broker, client) -> None:
    zombie = _init(client)
    pid = zombie.producer_id
    _add(client, pid, zombie.producer_epoch, {TOPIC: [0]})
    assert _produce(client, pid, zombie.producer_epoch, 0, [b"half-done"]) == 0
    assert _init(client).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_ABORT, pid, zombie.producer_epoch + 1)]
    retried = _init(client)
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (0, pid, zombie.producer_epoch + 2)
    assert _produce(client, pid, zombie.producer_epoch, 1, [b"late"]) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", **{
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}) as broker_thread:
        broker_thread.broker.create_topic(TOPIC, 1)
        client = RawClient(broker_thread.bootstrap_servers)
        try:
            init = _init(client, timeout_ms=300)
            pid, epoch = init.producer_id, init.producer_epoch
            _add(client, pid, epoch, {TOPIC: [0]})
            deadline = time.monotonic() + 10
            while _describe(client).transaction_state != "CompleteAbort":
                assert time.monotonic() < deadline, "the timed-out transaction was not aborted"
                time.sleep(0.05)
            assert _markers(broker_thread.broker, TOPIC, 0) == [(CONTROL_ABORT, pid, epoch + 1)]
            assert _end(client, pid, epoch, True) == ErrorCode.PRODUCER_FENCED
        finally:
            client.close()


def test_the_state_survives_a_restart_and_the_next_init_bumps_the_stored_epoch(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker_thread:
        client = RawClient(broker_thread.bootstrap_servers)
        first = _init(client)
        client.close()
    with running_broker(tmp_path / "data") as broker_thread:
        client = RawClient(broker_thread.bootstrap_servers)
        again = _init(client)
        client.close()
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, first.producer_epoch + 1)


def test_a_transaction_left_prepared_gets_its_markers_when_the_broker_starts(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker_thread:
        broker = broker_thread.broker
        broker.create_topic(TOPIC, 1)
        client = RawClient(broker_thread.bootstrap_servers)
        init = _init(client)
        _add(client, init.producer_id, init.producer_epoch, {TOPIC: [0]})
        client.close()
        coordinator = broker.transactions
        ongoing = coordinator.transactions[TXN_ID]
        asyncio.run_coroutine_threadsafe(_write_async(coordinator, ongoing.prepared(True, ongoing.last_update_ms)),
                                         broker_thread._loop).result(10)
    with running_broker(tmp_path / "data") as broker_thread:
        assert _markers(broker_thread.broker, TOPIC, 0) == [(CONTROL_COMMIT, init.producer_id, init.producer_epoch)]
        assert broker_thread.broker.transactions.transactions[TXN_ID].state.kafka_name == "CompleteCommit"


async def _write_async(coordinator, metadata) -> None:
    assert await coordinator._write(metadata) == ErrorCode.NONE


def test_state_records_are_kafkas_transaction_log_key_and_value(kafka_broker, client) -> None:
    init = _init(client)
    _add(client, init.producer_id, init.producer_epoch, {TOPIC: [1, 0]})
    broker = kafka_broker.broker
    partition = broker.transactions.partition_for(TXN_ID)
    plog = broker.partition_log(TRANSACTION_TOPIC, partition)
    buf = plog.read(0, 1 << 20).read_bytes()
    records = [r for pos in _positions(buf) for r in iter_records(buf, pos)]
    key, value = bytes(records[-1].key), bytes(records[-1].value)
    assert key == b"\x00\x00" + len(TXN_ID).to_bytes(2, "big") + TXN_ID.encode()
    assert value[:2] == b"\x00\x00"  # value version 0, as Kafka 3.9 writes it
    assert decode_key(key) == TXN_ID
    stored = decode_value(TXN_ID, value)
    assert (stored.state.kafka_name, stored.topics()) == ("Ongoing", {TOPIC: [0, 1]})


def _positions(buf: bytes) -> list[int]:
    positions, pos = [], 0
    while pos < len(buf):
        positions.append(pos)
        pos += read_batch_header(buf, pos).size
    return positions


def test_describe_of_an_unknown_transactional_id_is_transactional_id_not_found(client) -> None:
    assert _describe(client, "never-seen").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_list_transactions_filters_by_state_and_reports_unknown_state_names(client) -> None:
    ongoing = _init(client, transactional_id="ongoing")
    _add(client, ongoing.producer_id, ongoing.producer_epoch, {TOPIC: [0]}, transactional_id="ongoing")
    _init(client, transactional_id="idle")
    L = messages.ListTransactionsRequest
    response = client.call(LIST, 1, L(state_filters=["Ongoing", "Sleeping"], producer_id_filters=[],
                                      duration_filter=-1))
    assert response.unknown_state_filters == ["Sleeping"]
    assert [(t.transactional_id, t.transaction_state) for t in response.transaction_states] == [("ongoing", "Ongoing")]
    everything = client.call(LIST, 0, L(state_filters=[], producer_id_filters=[]))
    assert sorted(t.transactional_id for t in everything.transaction_states) == ["idle", "ongoing"]


def _list_matching(client: RawClient, pattern: str | None):
    return client.call(LIST, 2, messages.ListTransactionsRequest(
        state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=pattern))


def test_list_transactions_matches_its_pattern_against_whole_transactional_ids(client) -> None:
    for transactional_id in ("orders-1", "orders-2", "my-orders-3"):
        _init(client, transactional_id=transactional_id)
    response = _list_matching(client, "orders-.")
    assert response.error_code == 0
    assert sorted(t.transactional_id for t in response.transaction_states) == ["orders-1", "orders-2"]
    assert len(_list_matching(client, "").transaction_states) == 3  # empty, as null: no filter (KIP-1152)


@pytest.mark.timeout(60)
def test_list_transactions_with_a_catastrophic_backtracking_pattern_answers_at_once(client) -> None:
    """Kafka compiles the pattern with RE2/J, in time linear in the id; kbroker with RE2, so a pattern a backtracking
    engine (Python's re) needs 2^40 steps for cannot stall the broker."""
    _init(client, transactional_id="a" * 40 + "b")
    started = time.monotonic()
    response = _list_matching(client, "(a+)+$")
    assert time.monotonic() - started < 5
    assert (response.error_code, response.transaction_states) == (0, [])
    matching = _list_matching(client, "(a+)+b")
    assert [t.transactional_id for t in matching.transaction_states] == ["a" * 40 + "b"]


@pytest.mark.parametrize("pattern", ["(ab(cd", r"(a)\1", "(?=a)a", "a++"])
def test_list_transactions_with_a_pattern_re2_refuses_is_invalid_regular_expression(client, pattern) -> None:
    """Kafka's listTransactionStates throws InvalidRegularExpression (RE2/J refuses backreferences, lookarounds,
    possessive repeats), which KafkaApis answers with INVALID_REGULAR_EXPRESSION and nothing else."""
    _init(client, transactional_id="ab")
    response = _list_matching(client, pattern)
    assert (response.error_code, response.unknown_state_filters, response.transaction_states) == \
        (ErrorCode.INVALID_REGULAR_EXPRESSION, [], [])


def test_write_txn_markers_ends_a_hanging_transaction_on_the_partition_leader(tmp_path: Path) -> None:
    """What `kafka-transactions abort` does: the marker goes straight to the partition's leader."""
    pid, epoch = 4242, 3
    # with verification off the partition takes a transactional batch without asking the coordinator, as Kafka
    # does; the coordinator never heard of it, so it hangs
    with running_broker(tmp_path / "data", **{"transaction.partition.verification.enable": "false"}) as kafka_broker:
        kafka_broker.broker.create_topic(TOPIC, 2)
        client = RawClient(kafka_broker.bootstrap_servers)
        try:
            _hanging_transaction_aborted_by_a_marker(kafka_broker, client, pid, epoch)
        finally:
            client.close()


def _hanging_transaction_aborted_by_a_marker(kafka_broker, client: RawClient, pid: int, epoch: int) -> None:
    assert _produce(client, pid, epoch, 0, [b"hanging"], transactional_id="unknown-to-the-coordinator") == 0
    plog = kafka_broker.broker.partition_log(TOPIC, 0)
    assert plog.last_stable_offset == 0
    W = messages.WriteTxnMarkersRequest
    response = client.call(WRITE_MARKERS, 1, W(markers=[W.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
        topics=[W.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
    assert response.markers[0].topics[0].partitions[0].error_code == 0
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_ABORT, pid, epoch)]
    assert plog.last_stable_offset == plog.log_end_offset == 2


def test_a_producer_id_without_its_epoch_is_invalid_request(client) -> None:
    assert _init(client, producer_id=5, epoch=-1).error_code == ErrorCode.INVALID_REQUEST
    assert _init(client, transactional_id=None, producer_id=-1, epoch=3).error_code == ErrorCode.INVALID_REQUEST


def test_an_idempotent_producer_naming_its_old_id_gets_a_new_one_at_epoch_0(client) -> None:
    first = _init(client, transactional_id=None)
    again = _init(client, transactional_id=None, producer_id=first.producer_id, epoch=first.producer_epoch)
    assert (again.error_code, again.producer_epoch) == (0, 0)
    assert again.producer_id != first.producer_id


def test_a_retried_epoch_bump_gets_the_same_answer_and_an_older_epoch_is_fenced(client) -> None:
    """KIP-360: InitProducerId naming the producer's id and epoch bumps it; a retry of that request (whose answer
    was lost) gets the bumped epoch again; an epoch older than both is fenced."""
    first = _init(client)
    bumped = _init(client, producer_id=first.producer_id, epoch=first.producer_epoch)
    retried = _init(client, producer_id=first.producer_id, epoch=first.producer_epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    assert (retried.error_code, retried.producer_epoch) == (0, bumped.producer_epoch)
    newest = _init(client, producer_id=bumped.producer_id, epoch=bumped.producer_epoch)
    assert _init(client, producer_id=first.producer_id, epoch=first.producer_epoch).error_code == \
        ErrorCode.PRODUCER_FENCED
    assert newest.producer_epoch == bumped.producer_epoch + 1


def test_internal_topics_cannot_join_a_transaction(client) -> None:
    init = _init(client)
    errors = _add(client, init.producer_id, init.producer_epoch, {TOPIC: [0], TRANSACTION_TOPIC: [0]})
    assert errors == {(TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                      (TRANSACTION_TOPIC, 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_verify_only_names_partitions_outside_the_transaction_abortable(client) -> None:
    init = _init(client)
    _add(client, init.producer_id, init.producer_epoch, {TOPIC: [0]})
    R = messages.AddPartitionsToTxnRequest
    response = client.call(ADD_PARTITIONS, 4, R(transactions=[R.AddPartitionsToTxnTransaction(
        transactional_id=TXN_ID, producer_id=init.producer_id, producer_epoch=init.producer_epoch, verify_only=True,
        topics=[R.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0, 1])])]))
    (result,) = response.results_by_transaction
    errors = {p.partition_index: p.partition_error_code for t in result.topic_results for p in t.results_by_partition}
    assert errors == {0: ErrorCode.NONE, 1: ErrorCode.TRANSACTION_ABORTABLE}
    assert _describe(client).topics[0].partitions == [0]  # verifying adds nothing


def test_a_refused_marker_keeps_the_transaction_prepared_and_the_id_busy(kafka_broker, client) -> None:
    """A partition refuses the coordinator's marker (here: it has seen a newer coordinator epoch): the transaction
    stays PrepareCommit, never CompleteCommit, and the id answers CONCURRENT_TRANSACTIONS, as in Kafka."""
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _add(client, pid, epoch, {TOPIC: [0]})
    assert _produce(client, pid, epoch, 0, [b"x"]) == 0
    W = messages.WriteTxnMarkersRequest
    newer = client.call(WRITE_MARKERS, 1, W(markers=[W.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=7,
        topics=[W.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
    assert newer.markers[0].topics[0].partitions[0].error_code == 0
    assert _end(client, pid, epoch, True) == ErrorCode.NONE  # answered once PrepareCommit is written
    assert _describe(client).transaction_state == "PrepareCommit"
    assert _end(client, pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
    # a transition under way is answered before the epoch is checked, as Kafka 4 orders its checks
    assert _add(client, pid, epoch + 5, {TOPIC: [1]}) == {(TOPIC, 1): ErrorCode.CONCURRENT_TRANSACTIONS}
    assert _markers(kafka_broker.broker, TOPIC, 0) == [(CONTROL_ABORT, pid, epoch)]


def test_a_transactional_batch_for_a_partition_not_in_the_transaction_is_refused(kafka_broker, client) -> None:
    """KIP-890 part 1: the partition asks the coordinator before a batch opens a transaction there."""
    init = _init(client)
    pid, epoch = init.producer_id, init.producer_epoch
    _add(client, pid, epoch, {TOPIC: [0]})
    assert _produce(client, pid, epoch, 0, [b"stray"], partition=1) == ErrorCode.INVALID_TXN_STATE
    assert kafka_broker.broker.partition_log(TOPIC, 1).log_end_offset == 0
    assert _produce(client, pid, epoch, 0, [b"added"], partition=0) == ErrorCode.NONE


def test_a_late_batch_of_a_fenced_producer_cannot_open_a_transaction(kafka_broker, client) -> None:
    zombie = _init(client)
    _init(client)
    assert _produce(client, zombie.producer_id, zombie.producer_epoch, 0, [b"late"]) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert kafka_broker.broker.partition_log(TOPIC, 0).last_stable_offset == 0
