"""FindCoordinator (10), OffsetCommit (8), TxnOffsetCommit (28), OffsetFetch (9): where a group lives and its
offsets."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.coordinator.groups import Group, GroupState, validate_txn_offset_commit
from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.offsets import (
    OFFSETS_TOPIC,
    CommittedOffset,
    CoordinatorWriteError,
    OffsetStore,
    coordinator_error,
)
from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC, TRANSACTIONS_V2
from kbroker.log.errors import LogDirOfflineError
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
MAX_METADATA_BYTES = 4096  # offset.metadata.max.bytes
_NO_ERROR = int(ErrorCode.NONE)  # a plain int: an enum member lookup costs more than the rest of a check
NO_PRODUCER_ID = -1  # Kafka's RecordBatch.NO_PRODUCER_ID
log = logging.getLogger(__name__)


def _key_problem(key: str, key_type: int) -> tuple[int, str] | None:
    """Why no coordinator is named for the key, whoever would lead its group (None for a group id to place):
    a single node and a cluster member answer these keys alike."""
    if key_type == KEY_TYPE_TRANSACTION:
        return None
    if key_type != KEY_TYPE_GROUP:
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}"
    if not key:
        return ErrorCode.INVALID_REQUEST, "Group id must not be empty"
    return None


def _coordinator_for(broker: Broker, key: str, key_type: int) -> tuple[int, str | None]:
    """(error code, message) for one key; this single node coordinates every group."""
    problem = _key_problem(key, key_type)
    if problem is not None:
        return problem
    if key_type == KEY_TYPE_TRANSACTION:
        transactions = broker.transactions
        if transactions.coordinator_error(key) is not None:  # its partition has no leader: as for a group
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
        transactions.ensure_topic()  # Kafka creates __transaction_state when the first producer asks
        return ErrorCode.NONE, None
    if broker.coordinator.offsets.not_coordinating(key):  # builds the coordinator on first use
        # its __consumer_offsets partition has no leader: Kafka's answer for such a group
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
    return ErrorCode.NONE, None


async def _cluster_coordinator(broker: Broker, key: str, key_type: int) -> tuple[int, str | None,
                                                                               tuple[int, str, int]]:
    """A cluster member's answer, from its metadata cache: the leader of the key's __consumer_offsets partition (or
    __transaction_state's for a transactional id: Kafka's Utils.abs(key.hashCode) % partitions), on the listener
    this broker advertises. A missing topic is created first, as Kafka does, and the answer is
    COORDINATOR_NOT_AVAILABLE until it has leaders."""
    nowhere = (-1, "", -1)
    problem = _key_problem(key, key_type)
    if problem is not None:
        return *problem, nowhere
    topic = TRANSACTION_TOPIC if key_type == KEY_TYPE_TRANSACTION else OFFSETS_TOPIC
    cache = broker.cluster.metadata
    partitions = cache.partitions(topic)
    if not partitions:
        await _create_internal_topic(broker, topic)
    else:
        state = partitions[partition_for(key, len(partitions))]
        endpoint = cache.endpoint(state.leader, broker.advertised_listener.name)
        if endpoint is not None:
            return ErrorCode.NONE, None, (state.leader, endpoint.host, endpoint.port)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", nowhere


async def _create_internal_topic(broker: Broker, topic: str) -> None:
    """Kafka's creation of __consumer_offsets (__transaction_state) on the first FindCoordinator:
    offsets.topic.num.partitions (transaction.state.log.num.partitions) partitions of as many replicas as the
    replication factor asks, over the live brokers, written to ZooKeeper. It fails while fewer brokers are alive
    than that factor (the client keeps asking, as against Kafka)."""
    from kbroker.cluster.topic_admin import TopicAdmin

    admin = TopicAdmin(broker.cluster)
    if topic == TRANSACTION_TOPIC:
        error = await admin.create_transaction_topic(broker.config)
    else:
        error = await admin.create_offsets_topic(broker.config)
    if error != ErrorCode.LEADER_NOT_AVAILABLE:
        log.info("cannot create %s yet: %s", topic, error.name)  # clients keep asking: not a warning


async def _locate(broker: Broker, key: str, key_type: int) -> tuple[int, str | None, tuple[int, str, int]]:
    """(error, message, (node id, host, port)) for one key: this node, or what the cluster's metadata says."""
    if getattr(broker, "cluster", None) is not None:
        return await _cluster_coordinator(broker, key, key_type)
    error, message = _coordinator_for(broker, key, key_type)
    listener = broker.advertised_listener
    node = (broker.node_id, listener.host, listener.port) if error == ErrorCode.NONE else (-1, "", -1)
    return error, message, node


@handles(10)
async def find_coordinator(broker: Broker, header, request):
    Response = messages.FindCoordinatorResponse
    version = header.request_api_version
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, (node_id, host, port) = await _locate(broker, key, request.key_type)
            coordinators.append(Response.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error,
                                                     error_message=message))
        return Response(throttle_time_ms=0, coordinators=coordinators)
    error, message, (node_id, host, port) = await _locate(broker, request.key, request.key_type if version >= 1 else 0)
    ok = error == ErrorCode.NONE
    response = Response(error_code=error, node_id=node_id, host=host, port=port)
    if version >= 1:  # ErrorMessage exists from v1; Kafka writes the error's name there on success
        response.error_message = message if message is not None or not ok else ErrorCode.NONE.name
    return response


@functools.cache
def _commit_response_classes() -> tuple[type, type, type]:
    """The response classes, looked up once (every commit needs them)."""
    Response = messages.OffsetCommitResponse
    return Response, Response.OffsetCommitResponseTopic, Response.OffsetCommitResponsePartition


def _metadata_too_large(metadata: str | None) -> bool:
    # a character is at most 4 bytes of UTF-8: short metadata needs no encoding to check
    return metadata is not None and len(metadata) * 4 > MAX_METADATA_BYTES and \
        len(metadata.encode()) > MAX_METADATA_BYTES


@handles(8)
async def offset_commit(broker: Broker, header, request):
    Response, Topic_, Partition_ = _commit_response_classes()
    version = header.request_api_version
    coordinator = broker.coordinator
    group_id = request.group_id
    group = coordinator.groups.group(group_id)
    error = ErrorCode.INVALID_GROUP_ID if not group_id else coordinator.groups.commit_offsets_error(
        group_id, request.member_id, request.group_instance_id if version >= 7 else None,
        request.generation_id_or_member_epoch)
    consumer_group = coordinator.consumer_groups.group(group_id)
    if consumer_group is not None:  # a KIP-848 group: member epochs, not generations
        error = coordinator.consumer_groups.validate_offset_commit(
            consumer_group, request.member_id, request.generation_id_or_member_epoch, version)
    if group_id and coordinator.offsets.not_coordinating(group_id):
        error = ErrorCode.NOT_COORDINATOR  # led elsewhere, or its log dir failed: not this broker's group
    now = now_ms()
    commits: dict[tuple[str, int], CommittedOffset] = {}
    topics = []
    by_name, by_id = broker.known_topics()
    for topic in request.topics:
        if version >= 10:  # topics by id (KIP-848 era); unknown ids are UNKNOWN_TOPIC_ID
            known = by_id.get(topic.topic_id)
            name, topic_id, missing = (known.name if known else ""), topic.topic_id, ErrorCode.UNKNOWN_TOPIC_ID
        else:
            known = by_name.get(topic.name)
            name, missing = topic.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topic_id = known.topic_id if known else ZERO_UUID
        partitions = []
        for p in topic.partitions:
            index, code = p.partition_index, error
            if code == _NO_ERROR:
                if known is None or not 0 <= index < known.partitions:
                    code = missing if known is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif _metadata_too_large(p.committed_metadata):
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    commits[(name, index)] = CommittedOffset(
                        p.committed_offset, p.committed_leader_epoch if version >= 6 else -1,
                        p.committed_metadata or "", now)
            partitions.append(Partition_(partition_index=index, error_code=code))
        # name and topic_id are both ignorable: the encoder keeps whichever the version has
        topics.append(Topic_(name=name, topic_id=topic_id, partitions=partitions))
    if commits:
        store = coordinator.offsets
        stored = await _commit(broker, store, group_id, commits, now, topics)
        if stored and group is None and consumer_group is None and not error and \
                not store.not_coordinating(group_id):
            coordinator.groups.groups.setdefault(group_id, Group(group_id))  # a group used only for offsets
    return Response(throttle_time_ms=0, topics=topics)


async def _commit(broker: Broker, store: OffsetStore, group_id: str, commits: dict[tuple[str, int], CommittedOffset],
                  now: int, topics: list) -> bool:
    """OffsetCommit's write of the commits: whether they hold (staged ones do: they are flushed before the answer
    leaves; in a cluster once the ISR has them). The partitions that were to be committed say why not."""
    end = _store_commits(store, group_id, commits, now, topics)
    stored = end is not None or store.deferring
    if end is not None and store.owned is not None:  # a cluster: it holds, and is answered, once the ISR has it
        stored = await _replicated(broker, store, group_id, end, topics)
        store.replicated_commits(group_id, commits, end, stored)
    return stored


def _store_commits(store: OffsetStore, group_id: str, commits: dict[tuple[str, int], CommittedOffset], now: int,
                   topics: list) -> int | None:
    """Append the commits (the offset after them, if appended now); when that fails, the partitions
    that were to be committed say so."""
    try:
        return store.commit(group_id, commits, now)
    except LogDirOfflineError:
        _fail_commits(topics, ErrorCode.NOT_COORDINATOR)  # Kafka's mapping of KAFKA_STORAGE_ERROR for a commit
    except CoordinatorWriteError as error:
        _fail_commits(topics, error.error_code)
    except Exception:
        log.exception("cannot append the offsets of group %s to %s", group_id, OFFSETS_TOPIC)
        _fail_commits(topics, ErrorCode.UNKNOWN_SERVER_ERROR)
    return None


async def _replicated(broker: Broker, store: OffsetStore, group_id: str, end: int, topics: list) -> bool:
    """Kafka's acks=all for a commit: whether the high watermark passed it within offsets.commit.timeout.ms;
    if not, the partitions say why (Kafka's mapping)."""
    key = (OFFSETS_TOPIC, store.partition_for(group_id))
    errors = await broker.replicas.wait_for_acks({key: end}, int(broker.config["offsets.commit.timeout.ms"]))
    error = coordinator_error(errors.get(key, ErrorCode.NONE))
    if error:
        _fail_commits(topics, error)
    return not error


def _fail_commits(topics: list, error: ErrorCode) -> None:
    """The partitions that were to be committed say `error`."""
    for topic in topics:
        for partition in topic.partitions:
            if partition.error_code == ErrorCode.NONE:
                partition.error_code = error


@functools.cache
def _txn_commit_response_classes() -> tuple[type, type, type]:
    Response = messages.TxnOffsetCommitResponse
    return Response, Response.TxnOffsetCommitResponseTopic, Response.TxnOffsetCommitResponsePartition


def _txn_commit_failed(request, error: int):
    """Kafka's getErrorResponse for a TxnOffsetCommit: every partition of the request says `error`."""
    Response, Topic_, Partition_ = _txn_commit_response_classes()
    return Response(throttle_time_ms=0, topics=[
        Topic_(name=t.name, partitions=[Partition_(partition_index=p.partition_index, error_code=error)
                                        for p in t.partitions]) for t in request.topics])


def _unverified_producer(broker: Broker, request) -> int:
    """KIP-890's verification of a TxnOffsetCommit whose producer id no transaction can have (below 0; -1 is
    NO_PRODUCER_ID). Kafka (`transaction.partition.verification.enable`, on by default) asks the transactional
    id's coordinator, before the group checks the member, whether the producer's transaction has the group's
    __consumer_offsets partition (GroupCoordinator.handleTxnCommitOffsets); the coordinator finds the id's producer
    is another and answers INVALID_PRODUCER_ID_MAPPING (INVALID_REQUEST for an empty transactional id), which every
    partition of the TxnOffsetCommit then says. NONE when nothing is to be verified."""
    if request.producer_id >= 0 or not broker.config["transaction.partition.verification.enable"]:
        return _NO_ERROR
    return ErrorCode.INVALID_PRODUCER_ID_MAPPING if request.transactional_id else ErrorCode.INVALID_REQUEST


TRANSACTIONS_V2_TXN_OFFSET_COMMIT = 5  # TxnOffsetCommit v5+ adds the group's offsets partition to the transaction
# how the group coordinator words the transaction coordinator's errors (Kafka's CoordinatorOperationExceptionHelper)
_ADD_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
               ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
               ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
               ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR}


async def _added_offsets_partition(broker: Broker, request, version: int) -> int:
    """Transactions v2 (TxnOffsetCommit v5+, served by a single node): the group's `__consumer_offsets` partition is
    added to the producer's transaction before the member is checked (Kafka's addPartition verification), as the
    client sends no AddOffsetsToTxn; not for a request naming no known partition (Kafka asks no coordinator then)."""
    if version < TRANSACTIONS_V2_TXN_OFFSET_COMMIT or getattr(broker, "cluster", None) is not None:
        return _NO_ERROR
    by_name = broker.known_topics()[0]
    if not any(t.name in by_name and 0 <= p.partition_index < by_name[t.name].partitions
               for t in request.topics for p in t.partitions):
        return _NO_ERROR
    coordinator = broker.transactions
    error = await coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                             [coordinator.group_partition(request.group_id)],
                                             client_tv=TRANSACTIONS_V2)
    return _ADD_ERRORS.get(error, error)


async def _txn_commit_error(broker: Broker, request, version: int) -> int:
    """The group's answer to a TxnOffsetCommit (Kafka's validateGroupStatus, the producer's verification, then
    validateOffsetCommit of the classic or KIP-848 group); v0-2 name no member, generation or instance."""
    group_id = request.group_id
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    coordinator = broker.coordinator
    if coordinator.offsets.not_coordinating(group_id):
        return ErrorCode.NOT_COORDINATOR  # led elsewhere, or its log dir failed (no load is ever in progress here)
    unverified = _unverified_producer(broker, request) or await _added_offsets_partition(broker, request, version)
    if unverified:
        return unverified
    member_id, instance_id, generation = ((request.member_id, request.group_instance_id, request.generation_id)
                                          if version >= 3 else ("", None, -1))
    consumer_group = coordinator.consumer_groups.group(group_id)
    if consumer_group is not None:
        return coordinator.consumer_groups.validate_txn_offset_commit(consumer_group, member_id, instance_id,
                                                                      generation)
    return validate_txn_offset_commit(coordinator.groups.group(group_id), member_id, instance_id, generation)


@handles(28, failed=_txn_commit_failed)
async def txn_offset_commit(broker: Broker, header, request):
    """Offsets committed inside a transaction: appended now, as one transactional batch of the producer, and
    invisible to OffsetFetch until the transaction's marker commits them (OffsetStore.complete_transaction).
    Producer id -1 is refused by verification, or else (verification off) a plain commit, as in Kafka."""
    Response, Topic_, Partition_ = _txn_commit_response_classes()
    version = header.request_api_version
    group_id = request.group_id
    error = await _txn_commit_error(broker, request, version)
    now = now_ms()
    commits: dict[tuple[str, int], CommittedOffset] = {}
    topics = []
    by_name, _ = broker.known_topics()
    for topic in request.topics:
        known = by_name.get(topic.name)
        partitions = []
        for p in topic.partitions:
            index = p.partition_index
            if known is None or not 0 <= index < known.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # KafkaApis answers these before the coordinator
            elif error:
                code = error
            elif _metadata_too_large(p.committed_metadata):
                code = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                code = ErrorCode.NONE
                commits[(topic.name, index)] = CommittedOffset(
                    p.committed_offset, p.committed_leader_epoch if version >= 2 else -1,
                    p.committed_metadata or "", now)
            partitions.append(Partition_(partition_index=index, error_code=code))
        topics.append(Topic_(name=topic.name, partitions=partitions))
    if commits:
        coordinator = broker.coordinator
        store = coordinator.offsets
        if request.producer_id == NO_PRODUCER_ID:
            # no producer and no verification: Kafka's storeOffsets writes a plain commit (a TxnOffsetCommit is
            # transactional only for producerId != NO_PRODUCER_ID), which counts at once; no marker would ever come
            stored = await _commit(broker, store, group_id, commits, now, topics)
        else:
            end = _store_txn_commits(store, request, commits, now, topics)
            # a cluster: answered once the ISR has it, as OffsetCommit
            if end is not None and store.owned is not None and \
                    not await _replicated(broker, store, group_id, end, topics):
                store.abandon_transactional(group_id, request.producer_id, commits, end)
                end = None
            stored = end is not None
        if stored and coordinator.consumer_groups.group(group_id) is None and \
                not store.not_coordinating(group_id):
            coordinator.groups.groups.setdefault(group_id, Group(group_id))  # Kafka creates the group as Empty
    return Response(throttle_time_ms=0, topics=topics)


def _store_txn_commits(store: OffsetStore, request, commits: dict[tuple[str, int], CommittedOffset], now: int,
                       topics: list) -> int | None:
    """Append the transactional commits (the offset after them); when that fails, the partitions that were
    to be committed say why, mapped as OffsetCommit's (a fenced producer epoch passes as it is)."""
    try:
        return store.commit_transactional(request.group_id, request.producer_id, request.producer_epoch, commits,
                                          now)
    except LogDirOfflineError:
        _fail_commits(topics, ErrorCode.NOT_COORDINATOR)
    except CoordinatorWriteError as error:
        _fail_commits(topics, error.error_code)
    except Exception:
        log.exception("cannot append the transactional offsets of group %s to %s", request.group_id, OFFSETS_TOPIC)
        _fail_commits(topics, ErrorCode.UNKNOWN_SERVER_ERROR)
    return None


FetchedPartition = tuple[int, CommittedOffset | None, int]  # partition, committed offset, error
UnstableCheck = Callable[[str, str, int], bool]  # (group, topic, partition) -> a commit of it is in flight


def _unstable_check(broker: Broker, require_stable: bool) -> UnstableCheck | None:
    """`OffsetStore.unstable` when a require_stable fetch must ask it, else None (nothing is in flight)."""
    store = broker.coordinator.offsets
    return store.unstable if require_stable and store.has_unstable() else None


def _fetched(unstable: UnstableCheck | None, group_id: str, topic: str, partition: int,
             committed: CommittedOffset | None) -> FetchedPartition:
    """One partition's answer: a commit still in flight answers UNSTABLE_OFFSET_COMMIT and no offset, as Kafka's
    getOffsets does for require_stable (partition level; the group's error stays NONE)."""
    if unstable is not None and unstable(group_id, topic, partition):
        return partition, None, ErrorCode.UNSTABLE_OFFSET_COMMIT
    return partition, committed, 0


def _fetch_group(broker: Broker, group_id: str, topics,
                 require_stable: bool = False) -> list[tuple[str, list[FetchedPartition]]]:
    """Committed offsets of one group: the requested partitions, or all when `topics` is None."""
    store = broker.coordinator.offsets
    unstable = _unstable_check(broker, require_stable)
    if topics is None:
        by_topic: dict[str, list[FetchedPartition]] = {}
        for (topic, partition), committed in sorted(store.group_offsets(group_id).items()):
            by_topic.setdefault(topic, []).append(_fetched(unstable, group_id, topic, partition, committed))
        return list(by_topic.items())
    if unstable is None:
        return [(name, [(p, store.fetch(group_id, name, p), 0) for p in partitions]) for name, partitions in topics]
    return [(name, [_fetched(unstable, group_id, name, p, store.fetch(group_id, name, p)) for p in partitions])
            for name, partitions in topics]


def _v10_topics(broker: Broker, group_id: str, requested, require_stable: bool) -> list:
    """OffsetFetch v10 names topics by id: (topic id, [(partition, committed, error)]) per topic."""
    store = broker.coordinator.offsets
    by_name, by_id = broker.known_topics()
    if requested is None:
        found = []
        for name, parts in _fetch_group(broker, group_id, None, require_stable):
            known = by_name.get(name)
            if known is not None:  # a deleted topic has no id left to report it under
                found.append((known.topic_id, parts))
        return found
    unstable = _unstable_check(broker, require_stable)
    found = []
    for t in requested:
        known = by_id.get(t.topic_id)
        if known is None:
            found.append((t.topic_id, [(p, None, ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]))
        else:
            found.append((t.topic_id, [_fetched(unstable, group_id, known.name, p, store.fetch(group_id, known.name, p))
                                       for p in t.partition_indexes]))
    return found


@handles(9)
async def offset_fetch(broker: Broker, header, request):
    Response = messages.OffsetFetchResponse
    version = header.request_api_version
    if version >= 8:
        Group_ = Response.OffsetFetchResponseGroup
        Topic_ = Response.OffsetFetchResponseTopics
        Partition_ = Response.OffsetFetchResponsePartitions

        def partition(p: int, c: CommittedOffset | None, error: int = 0):
            return Partition_(partition_index=p, committed_offset=c.offset if c else -1,
                              committed_leader_epoch=c.leader_epoch if c else -1,
                              metadata=c.metadata if c else "", error_code=error)

        groups = []
        for g in request.groups:
            if broker.coordinator.offsets.not_coordinating(g.group_id):
                groups.append(Group_(group_id=g.group_id, error_code=ErrorCode.NOT_COORDINATOR, topics=[]))
                continue
            if version >= 9:  # a KIP-848 member names itself and its epoch
                error = broker.coordinator.consumer_groups.offset_fetch_error(g.group_id, g.member_id, g.member_epoch)
                if error:
                    groups.append(Group_(group_id=g.group_id, error_code=error, topics=[]))
                    continue
            if version >= 10:
                topics = [Topic_(topic_id=topic_id, partitions=[partition(p, c, e) for p, c, e in parts])
                          for topic_id, parts in _v10_topics(broker, g.group_id, g.topics, request.require_stable)]
            else:
                wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
                topics = [Topic_(name=name, partitions=[partition(p, c, e) for p, c, e in parts])
                          for name, parts in _fetch_group(broker, g.group_id, wanted, request.require_stable)]
            groups.append(Group_(group_id=g.group_id, error_code=0, topics=topics))
        return Response(throttle_time_ms=0, groups=groups)
    Topic_ = Response.OffsetFetchResponseTopic
    Partition_ = Response.OffsetFetchResponsePartition
    if broker.coordinator.offsets.not_coordinating(request.group_id):
        return Response(topics=[], error_code=ErrorCode.NOT_COORDINATOR)  # v2+ has the field; v0-1 get no topics
    topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    found = _fetch_group(broker, request.group_id, topics, version >= 7 and request.require_stable)
    response = Response(topics=[Topic_(name=name, partitions=[
        Partition_(partition_index=p, committed_offset=c.offset if c else -1,
                   metadata=c.metadata if c else "", error_code=e,
                   **({"committed_leader_epoch": c.leader_epoch if c else -1} if version >= 5 else {}))
        for p, c, e in parts]) for name, parts in found])
    if version >= 2:
        response.error_code = 0
    return response




def _subscribed_topics(group: Group) -> set[str] | None:
    """Topics the group's members subscribe to; None when that cannot be read from their metadata."""
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            metadata = member.metadata_for(group.protocol_name)
            version = int.from_bytes(metadata[:2], "big", signed=True)
            version = min(version, messages.valid_versions("ConsumerProtocolSubscription").high)
            subscription, _ = messages.decode("ConsumerProtocolSubscription", version, metadata, 2)
        except Exception:
            return None
        topics.update(subscription.topics)
    return topics


@handles(47)
async def offset_delete(broker: Broker, header, request):
    """Drop committed offsets of partitions the group no longer consumes (KIP-496)."""
    Response = messages.OffsetDeleteResponse
    coordinator = broker.coordinator
    if coordinator.offsets.not_coordinating(request.group_id):  # led elsewhere, or its log dir failed
        return Response(error_code=ErrorCode.NOT_COORDINATOR, throttle_time_ms=0, topics=[])
    group = coordinator.groups.group(request.group_id)
    consumer_group = coordinator.consumer_groups.group(request.group_id)
    offsets = coordinator.offsets.group_offsets(request.group_id)
    if group is None and consumer_group is None and not offsets and \
            not coordinator.offsets.has_pending_transactions(request.group_id):
        return Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND, throttle_time_ms=0, topics=[])
    active = group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD)
    subscribed = _subscribed_topics(group) if active else set()
    if consumer_group is not None:  # KIP-848: by name or through a regex
        subscribed = consumer_group.subscribed_topic_names() | set(consumer_group.subscription_metadata)
    if subscribed is None:
        return Response(error_code=ErrorCode.NON_EMPTY_GROUP, throttle_time_ms=0, topics=[])
    doomed: list[tuple[str, int]] = []
    topics = []
    by_name, _ = broker.known_topics()
    for topic in request.topics:
        known = by_name.get(topic.name)
        partitions = []
        for p in topic.partitions:
            if known is None or not 0 <= p.partition_index < known.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic.name in subscribed:
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = ErrorCode.NONE
                doomed.append((topic.name, p.partition_index))
            partitions.append(Response.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                                                     error_code=code))
        topics.append(Response.OffsetDeleteResponseTopic(name=topic.name, partitions=partitions))
    try:
        coordinator.offsets.delete(request.group_id, doomed, now_ms())
    except CoordinatorWriteError as error:
        return Response(error_code=error.error_code, throttle_time_ms=0, topics=[])
    return Response(error_code=0, throttle_time_ms=0, topics=topics)


@handles(42)
async def delete_groups(broker: Broker, header, request):
    """Delete groups that have no members: their offsets get tombstones, the group is forgotten."""
    Response = messages.DeleteGroupsResponse
    coordinator = broker.coordinator
    results = []
    for group_id in request.groups_names:
        group = coordinator.groups.group(group_id)
        consumer_group = coordinator.consumer_groups.group(group_id)
        # its committed offsets and those still pending in transactions (Kafka deletes both with the group)
        offsets = {**coordinator.offsets.group_offsets(group_id),
                   **dict.fromkeys(coordinator.offsets.pending_partitions(group_id))}
        if not group_id:
            code = ErrorCode.INVALID_GROUP_ID
        elif coordinator.offsets.not_coordinating(group_id):
            code = ErrorCode.NOT_COORDINATOR
        elif group is None and consumer_group is None and not offsets:
            code = ErrorCode.GROUP_ID_NOT_FOUND
        elif (consumer_group is not None and consumer_group.members) or \
                (group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD)):
            code = ErrorCode.NON_EMPTY_GROUP
        else:
            code = _delete_group(coordinator, group_id, list(offsets))
        results.append(Response.DeletableGroupResult(group_id=group_id, error_code=code))
    return Response(throttle_time_ms=0, results=results)


def _delete_group(coordinator, group_id: str, offsets: list[tuple[str, int]]) -> int:
    """Tombstones for the group's offsets and metadata; Kafka's error for the group if appending them failed."""
    try:
        coordinator.offsets.delete(group_id, offsets, now_ms())
        coordinator.forget_group(group_id)
    except CoordinatorWriteError as error:
        return error.error_code
    return ErrorCode.NONE
