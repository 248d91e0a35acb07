"""Transactional offset commits (TxnOffsetCommit): pending until the transaction's marker, in the
log as one transactional batch, replayed with their markers, and the API's answers."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator

import pytest
import test_cluster_coordination as cluster

from kbroker.apis import offsets as api
from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator import Coordinator
from kbroker.coordinator.groups import Group
from kbroker.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore
from kbroker.testing import running_broker
from wire import headers, messages
from wire.errors import ErrorCode
from wire.records import build_end_txn_batch, iter_batches

NOW = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000
PID, EPOCH = 4000, 0
TXN_OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, CONSUMER_GROUP_HEARTBEAT = 28, 9, 11, 68
TOC, OF = messages.TxnOffsetCommitRequest, messages.OffsetFetchRequest


def _broker(tmp_path) -> Broker:
    broker = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))
    if "t" not in broker.topics:
        broker.create_topic("t", 2)
    return broker


def _offset(value: int) -> CommittedOffset:
    return CommittedOffset(value, -1, "", NOW)


def _end_transaction(broker: Broker, store: OffsetStore, group: str, commit: bool, producer_id: int = PID) -> None:
    """What the transaction marker writer does: the marker appended as the partition's leader, then the store told."""
    partition = store.partition_for(group)
    marker = build_end_txn_batch(commit, producer_id=producer_id, producer_epoch=EPOCH, coordinator_epoch=0,
                                 timestamp=NOW)
    broker.replicas.get(OFFSETS_TOPIC, partition).append_as_leader(marker, NOW, -1, coordinator=True)
    store.complete_transaction(partition, producer_id, commit)


def _batches(broker: Broker, store: OffsetStore, group: str) -> list:
    plog = broker.partition_log(OFFSETS_TOPIC, store.partition_for(group))
    return [header for _, header in iter_batches(plog.read(0, 1 << 20).read_bytes())]


# --- the store ---------------------------------------------------------------------------------


def test_transactional_commit_is_invisible_until_its_commit_marker(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    assert store.fetch("g", "t", 0) is None and store.unstable("g", "t", 0)
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) == _offset(7) and not store.unstable("g", "t", 0)
    broker.close()


def test_aborted_transactional_commit_never_appears(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit("g", {("t", 0): _offset(3)}, NOW)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    _end_transaction(broker, store, "g", commit=False)
    assert store.fetch("g", "t", 0) == _offset(3) and not store.has_pending_transactions("g")
    broker.close()


def test_transactional_commit_is_one_transactional_batch_of_the_producer(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, 3, {("t", 0): _offset(7), ("t", 1): _offset(8)}, NOW)
    (batch,) = _batches(broker, store, "g")
    assert (batch.is_transactional, batch.is_control, batch.record_count) == (True, False, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (PID, 3, 0)  # as Kafka writes it
    broker.close()


def test_a_marker_settles_only_its_producers_offsets(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    store.commit_transactional("g", PID + 1, EPOCH, {("t", 1): _offset(9)}, NOW)
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) == _offset(7) and store.fetch("g", "t", 1) is None
    assert store.unstable("g", "t", 1)
    broker.close()


def test_a_plain_commit_appended_after_the_transactional_batch_wins(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    store.commit("g", {("t", 0): _offset(9)}, NOW)
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) == _offset(9)  # Kafka keeps the commit whose batch came later
    broker.close()


def test_a_deferred_plain_commit_for_a_group_with_pending_offsets_is_appended_at_once(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    store.deferring = True
    store.commit("g", {("t", 0): _offset(9)}, NOW)
    assert len(_batches(broker, store, "g")) == 2  # its place in the log decides against the transaction
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) == _offset(9)
    broker.close()


def test_replay_applies_a_committed_transaction(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    _end_transaction(broker, store, "g", commit=True)
    broker.close()
    reopened = _broker(tmp_path)
    assert OffsetStore(reopened).fetch("g", "t", 0) == _offset(7)
    reopened.close()


def test_replay_never_applies_an_aborted_transaction(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit("g", {("t", 0): _offset(3)}, NOW)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    _end_transaction(broker, store, "g", commit=False)
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert replayed.fetch("g", "t", 0) == _offset(3) and not replayed.has_pending_transactions("g")
    reopened.close()


def test_replay_keeps_a_transaction_open_at_the_end_of_the_log_pending(tmp_path) -> None:
    broker = _broker(tmp_path)
    OffsetStore(broker).commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert replayed.fetch("g", "t", 0) is None and replayed.unstable("g", "t", 0)
    _end_transaction(reopened, replayed, "g", commit=True)  # its marker after the restart
    assert replayed.fetch("g", "t", 0) == _offset(7)
    reopened.close()


def test_replay_keeps_a_plain_commit_appended_after_the_transactional_batch(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    store.commit("g", {("t", 0): _offset(9)}, NOW)
    _end_transaction(broker, store, "g", commit=True)
    broker.close()
    reopened = _broker(tmp_path)
    assert OffsetStore(reopened).fetch("g", "t", 0) == _offset(9)
    reopened.close()


def test_deleted_offsets_take_their_pending_transactional_offsets_along(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7), ("t", 1): _offset(8)}, NOW)
    store.delete("g", [("t", 0)], NOW)  # Kafka's removeOffsets drops them; its tombstone keeps them dropped
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) is None and store.fetch("g", "t", 1) == _offset(8)
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert replayed.fetch("g", "t", 0) is None and replayed.fetch("g", "t", 1) == _offset(8)
    reopened.close()


def test_offset_expiry_spares_partitions_and_groups_with_pending_transactional_offsets(tmp_path) -> None:
    broker = _broker(tmp_path)
    coordinator = Coordinator(broker, offsets_retention_ms=7 * DAY_MS)
    store = coordinator.offsets
    store.commit("g", {("t", 0): _offset(3), ("t", 1): _offset(4)}, NOW)
    store.commit_transactional("g", PID, EPOCH, {("t", 0): _offset(7)}, NOW)
    coordinator.groups.groups["g"] = Group("g")  # Empty, as TxnOffsetCommit leaves it
    assert coordinator.expire_offsets(NOW + 30 * DAY_MS) == 1  # ("t", 1) only
    assert store.fetch("g", "t", 0) == _offset(3) and coordinator.groups.group("g") is not None
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) == _offset(7)
    broker.close()


# --- the handlers, called directly ------------------------------------------------------------


def _call(broker: Broker, handler, api_key: int, version: int, request):
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                    client_id="test")
    response = asyncio.run(handler(broker, header, request))
    messages.encode(response, version)  # the response must be valid at this version
    return response


def _txn_commit(group: str = "g", topic: str = "t", partition: int = 0, offset: int = 7, metadata: str = "",
                generation: int = -1, member_id: str = "", instance_id: str | None = None, producer_id: int = PID,
                transactional_id: str = "tx"):
    return TOC(transactional_id=transactional_id, group_id=group, producer_id=producer_id, producer_epoch=EPOCH,
               generation_id=generation, member_id=member_id, group_instance_id=instance_id,
               topics=[TOC.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                   TOC.TxnOffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                                       committed_leader_epoch=-1, committed_metadata=metadata)])])


def _errors(response) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


def _fetch(version: int, require_stable: bool):
    if version >= 8:
        topic = OF.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])
        return OF(groups=[OF.OffsetFetchRequestGroup(group_id="g", topics=[topic])], require_stable=require_stable)
    return OF(group_id="g", topics=[OF.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])],
              require_stable=require_stable)


def _fetched(version: int, response) -> list[tuple[int, int, int]]:
    group_error = response.groups[0].error_code if version >= 8 else response.error_code
    topics = response.groups[0].topics if version >= 8 else response.topics
    return [(group_error, p.committed_offset, p.error_code) for p in topics[0].partitions]


@pytest.mark.parametrize("version", [7, 8, 9])
def test_require_stable_answers_unstable_offset_commit_for_a_pending_partition(broker: Broker, version: int) -> None:
    store = broker.coordinator.offsets
    store.commit("g", {("t", 0): _offset(3), ("t", 1): _offset(4)}, NOW)
    _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit(offset=7))
    fetched = _fetched(version, _call(broker, api.offset_fetch, OFFSET_FETCH, version, _fetch(version, True)))
    assert fetched == [(0, -1, ErrorCode.UNSTABLE_OFFSET_COMMIT), (0, 4, 0)]  # partition level, as in Kafka


def test_without_require_stable_a_pending_partition_answers_its_committed_offset(broker: Broker) -> None:
    broker.coordinator.offsets.commit("g", {("t", 0): _offset(3)}, NOW)
    _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit(offset=7))
    fetched = _fetched(8, _call(broker, api.offset_fetch, OFFSET_FETCH, 8, _fetch(8, False)))
    assert fetched == [(0, 3, 0), (0, -1, 0)]


def test_txn_offset_commit_for_a_group_led_elsewhere_is_not_coordinator(broker: Broker) -> None:
    broker.coordinator.offsets.owned = set()  # a cluster member leading none of __consumer_offsets
    response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit())
    assert _errors(response) == [ErrorCode.NOT_COORDINATOR]


def test_txn_offset_commit_creates_an_empty_group(broker: Broker) -> None:
    response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 0, _txn_commit())
    assert _errors(response) == [0] and broker.coordinator.groups.group("g") is not None


def test_txn_offset_commit_with_a_fenced_producer_epoch_is_invalid_producer_epoch(broker: Broker) -> None:
    store = broker.coordinator.offsets
    store.commit_transactional("g", PID, EPOCH + 1, {("t", 0): _offset(7)}, NOW)  # the producer's newer epoch
    response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit(offset=8))
    assert _errors(response) == [ErrorCode.INVALID_PRODUCER_EPOCH]  # the log refuses the older epoch, as Kafka's
    assert store.pending_partitions("g") == {("t", 0)}


def test_delete_groups_deletes_a_group_holding_only_pending_transactional_offsets(broker: Broker) -> None:
    _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit(offset=7))
    request = messages.DeleteGroupsRequest(groups_names=["g"])
    (result,) = _call(broker, api.delete_groups, 42, 2, request).results
    assert result.error_code == ErrorCode.NONE
    store = broker.coordinator.offsets
    _end_transaction(broker, store, "g", commit=True)
    assert store.fetch("g", "t", 0) is None  # deleted with the group, as Kafka does


@pytest.mark.parametrize(("transactional_id", "error"), [
    ("tx", ErrorCode.INVALID_PRODUCER_ID_MAPPING), ("", ErrorCode.INVALID_REQUEST)])
def test_txn_offset_commit_without_a_producer_id_is_refused_by_transaction_verification(
        broker: Broker, transactional_id: str, error: int) -> None:
    """Producer id -1 (NO_PRODUCER_ID): Kafka's KIP-890 verification asks the transaction coordinator, which knows
    no transaction of that producer; nothing is written, so nothing is left pending for a marker that never comes."""
    for version in (0, 3):
        response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, version,
                         _txn_commit(producer_id=-1, transactional_id=transactional_id))
        assert _errors(response) == [error]
    store = broker.coordinator.offsets
    assert store.fetch("g", "t", 0) is None and not store.has_pending_transactions("g")
    plog = broker.partition_log(OFFSETS_TOPIC, store.partition_for("g"))
    assert plog is None or plog.log_end_offset == 0  # nothing written


def test_txn_offset_commit_without_a_producer_id_is_verified_before_the_member(broker: Broker) -> None:
    """Kafka verifies the producer before the group validates the member (GroupCoordinator.handleTxnCommitOffsets)."""
    response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3,
                     _txn_commit(producer_id=-1, member_id="stranger", generation=5))
    assert _errors(response) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]


def test_txn_offset_commit_without_a_producer_id_and_without_verification_is_a_plain_commit(tmp_path) -> None:
    """With transaction.partition.verification.enable=false Kafka's storeOffsets writes producer id -1's offsets as
    a plain (non-transactional) commit, which counts at once: no marker is ever needed."""
    broker = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                           "transaction.partition.verification.enable": "false"}))
    broker.create_topic("t", 2)
    response = _call(broker, api.txn_offset_commit, TXN_OFFSET_COMMIT, 3, _txn_commit(producer_id=-1, offset=9))
    assert _errors(response) == [ErrorCode.NONE]
    broker.flush_deferred_appends()  # what the network layer does before the answer leaves
    store = broker.coordinator.offsets
    assert store.fetch("g", "t", 0).offset == 9
    assert not store.unstable("g", "t", 0) and not store.has_pending_transactions("g")
    assert [(h.is_transactional, h.producer_id) for h in _batches(broker, store, "g")] == [(False, -1)]
    fetched = _fetched(8, _call(broker, api.offset_fetch, OFFSET_FETCH, 8, _fetch(8, True)))
    assert fetched == [(0, 9, 0), (0, -1, 0)]
    assert broker.coordinator.groups.group("g") is not None  # created Empty, as Kafka does
    broker.close()


def test_a_txn_offset_commit_whose_handler_failed_names_every_partition_with_the_error() -> None:
    response = api._txn_commit_failed(_txn_commit(), ErrorCode.UNKNOWN_SERVER_ERROR)
    messages.encode(response, 5)
    assert [(t.name, _errors(response)) for t in response.topics] == [("t", [ErrorCode.UNKNOWN_SERVER_ERROR])]


# --- over the wire ------------------------------------------------------------------------------


class _Client:
    """Requests over a plain socket, each answer decoded at the request's version."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.stream = self.sock.makefile("rb")
        self.correlation_id = 0

    def call(self, api_key: int, version: int, request):
        self.correlation_id += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self.correlation_id, client_id="txn-test")
        body = bytes(messages.encode(request, version, headers.encode_request_header(header)))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        frame = self.stream.read(struct.unpack(">i", self.stream.read(4))[0])
        _, at = headers.decode_response_header(frame, api_key, version)
        return messages.decode(messages.api(api_key).response.name, version, frame, at)[0]

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@pytest.fixture(scope="module")
def wire():
    """One broker for the wire tests (each uses its own group), classic joins completing at once."""
    with running_broker(**{"group.initial.rebalance.delay.ms": "0"}) as running:
        running.broker.create_topic("orders", 2)
        client = _Client(running.bootstrap_servers)
        yield client
        client.close()


def _join(client: _Client, group: str, instance_id: str | None = None):
    """A static member joins a new classic group (no MEMBER_ID_REQUIRED round): (member id, generation)."""
    JG = messages.JoinGroupRequest
    response = client.call(JOIN_GROUP, 5, JG(
        group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
        group_instance_id=instance_id or f"{group}-instance", protocol_type="consumer",
        protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")]))
    assert response.error_code == 0
    return response.member_id, response.generation_id


def _wire_commit(client: _Client, version: int = 3, **fields) -> int:
    fields.setdefault("topic", "orders")
    (error,) = _errors(client.call(TXN_OFFSET_COMMIT, version, _txn_commit(**fields)))
    return error


def test_wire_txn_offset_commit_is_not_fetched_before_its_transaction_ends(wire) -> None:
    assert _wire_commit(wire, group="w-visible", offset=11) == ErrorCode.NONE
    fetch = OF(groups=[OF.OffsetFetchRequestGroup(group_id="w-visible", topics=[
        OF.OffsetFetchRequestTopics(name="orders", partition_indexes=[0])])], require_stable=False)
    partition = wire.call(OFFSET_FETCH, 8, fetch).groups[0].topics[0].partitions[0]
    assert (partition.committed_offset, partition.error_code) == (-1, 0)


def test_wire_txn_offset_commit_to_an_unknown_topic_is_unknown_topic_or_partition(wire) -> None:
    assert _wire_commit(wire, group="w-topic", topic="nowhere") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_wire_txn_offset_commit_to_an_unknown_partition_is_unknown_topic_or_partition(wire) -> None:
    assert _wire_commit(wire, group="w-partition", partition=5) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_wire_txn_offset_commit_with_oversized_metadata_is_offset_metadata_too_large(wire) -> None:
    assert _wire_commit(wire, group="w-metadata", metadata="m" * 4097) == ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_wire_txn_offset_commit_with_an_old_generation_is_illegal_generation(wire) -> None:
    member_id, generation = _join(wire, "w-generation")
    error = _wire_commit(wire, group="w-generation", member_id=member_id, generation=generation - 1,
                         instance_id="w-generation-instance")
    assert error == ErrorCode.ILLEGAL_GENERATION


def test_wire_txn_offset_commit_from_an_unknown_member_is_unknown_member_id(wire) -> None:
    _, generation = _join(wire, "w-member")
    assert _wire_commit(wire, group="w-member", member_id="stranger", generation=generation) == \
        ErrorCode.UNKNOWN_MEMBER_ID


def test_wire_txn_offset_commit_from_a_replaced_static_instance_is_fenced_instance_id(wire) -> None:
    _, generation = _join(wire, "w-fenced")
    error = _wire_commit(wire, group="w-fenced", member_id="old-member-id", generation=generation,
                         instance_id="w-fenced-instance")
    assert error == ErrorCode.FENCED_INSTANCE_ID


def test_wire_txn_offset_commit_of_the_current_member_is_accepted(wire) -> None:
    member_id, generation = _join(wire, "w-member-ok")
    assert _wire_commit(wire, group="w-member-ok", member_id=member_id, generation=generation,
                        instance_id="w-member-ok-instance") == ErrorCode.NONE


def test_wire_v2_txn_offset_commit_names_no_member_and_is_accepted_by_a_group_with_members(wire) -> None:
    _join(wire, "w-v2")
    assert _wire_commit(wire, version=2, group="w-v2") == ErrorCode.NONE


def test_wire_txn_offset_commit_with_a_stale_consumer_group_epoch_is_illegal_generation(wire) -> None:
    HB = messages.ConsumerGroupHeartbeatRequest
    joined = wire.call(CONSUMER_GROUP_HEARTBEAT, 1, HB(
        group_id="w-kip848", member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["orders"], topic_partitions=[]))
    assert joined.error_code == 0
    error = _wire_commit(wire, group="w-kip848", member_id="m1", generation=joined.member_epoch + 1)
    assert error == ErrorCode.ILLEGAL_GENERATION


# --- a cluster broker: the ISR semantics of OffsetCommit ----------------------------------------


async def _cluster_txn_commit(broker: Broker, offset: int) -> int:
    header = messages.RequestHeader(request_api_key=TXN_OFFSET_COMMIT, request_api_version=3, correlation_id=1,
                                    client_id="t")
    (error,) = _errors(await api.txn_offset_commit(broker, header, _txn_commit(group=cluster.GROUP, offset=offset)))
    return error


@pytest.fixture
def cluster_broker(tmp_path) -> Iterator[Broker]:
    broker = cluster.cluster_broker(tmp_path)
    yield broker
    broker.close()


def test_cluster_txn_offset_commit_is_answered_once_the_isr_has_it(cluster_broker: Broker) -> None:
    cluster.leadership(cluster_broker, cluster.LOCAL, 1, (cluster.LOCAL, cluster.FOLLOWER))

    async def scenario() -> tuple[bool, int]:
        waited, _, answer = await cluster.answered_once_caught_up(cluster_broker,
                                                                  _cluster_txn_commit(cluster_broker, 7), 0.3)
        return waited, answer

    assert asyncio.run(scenario()) == (True, ErrorCode.NONE)
    assert cluster_broker.coordinator.offsets.unstable(cluster.GROUP, "t", 0)


def test_cluster_txn_offset_commit_the_isr_does_not_get_in_time_is_not_left_pending(tmp_path) -> None:
    broker = cluster.cluster_broker(tmp_path, **{"offsets.commit.timeout.ms": "200"})
    try:
        cluster.leadership(broker, cluster.LOCAL, 1, (cluster.LOCAL, cluster.FOLLOWER))
        assert asyncio.run(_cluster_txn_commit(broker, 7)) == ErrorCode.REQUEST_TIMED_OUT
        assert not broker.coordinator.offsets.has_pending_transactions(cluster.GROUP)
    finally:
        broker.close()


def test_cluster_pending_offsets_are_pending_again_when_the_broker_leads_again(cluster_broker: Broker) -> None:
    cluster.leadership(cluster_broker, cluster.LOCAL, 1)
    assert asyncio.run(_cluster_txn_commit(cluster_broker, 7)) == ErrorCode.NONE
    cluster.leadership(cluster_broker, cluster.FOLLOWER, 2, (cluster.FOLLOWER, cluster.LOCAL))
    assert not cluster_broker.coordinator.offsets.has_pending_transactions(cluster.GROUP)
    cluster.leadership(cluster_broker, cluster.LOCAL, 3, (cluster.FOLLOWER, cluster.LOCAL), isr=(cluster.LOCAL,))
    store = cluster_broker.coordinator.offsets
    assert store.unstable(cluster.GROUP, "t", 0) and store.fetch(cluster.GROUP, "t", 0) is None
