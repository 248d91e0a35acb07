"""Fetch (1): byte ranges of segment files up to the high watermark, long-polled, with
fetch sessions (KIP-227).

Records are handed to the encoder as file slices, so the network layer can `sendfile` them
straight from the page cache.

Who may read what is the partition's to say (kbroker.cluster.partition): a consumer reads up to
the high watermark, or up to the last stable offset with isolation_level READ_COMMITTED (v4+),
then told the aborted transactions of what it read (null for READ_UNCOMMITTED, as Kafka); a
follower (replica_id >= 0) reads up to the log end, and its fetch offset is its log end offset,
which may move the high watermark. Every answer reports the real last stable offset. Only the
leader serves followers and consumers older than v11; v11+ consumers may read from a follower
(KIP-392). A request's current_leader_epoch is checked first (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH), and a last_fetched_epoch (v12+) that the log does not share answers a
diverging epoch instead of records.

Sessions: a request with epoch 0 opens a session holding its partitions and fetch
positions; later requests (epoch 1, 2, ...) send only the partitions whose position changed
plus the ones to forget, and the response carries only partitions with something new:
records, a moved high watermark / log start offset, or an error. Epoch -1 is a sessionless
full fetch. Like Kafka, the cache is bounded (`max.incremental.fetch.session.cache.slots`,
1000) and evicts the least recently used session.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.cluster.partition import READ_UNCOMMITTED, FetchedData, Partition, ReplicationError
from kbroker.log.errors import OffsetOutOfRangeError
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

Response = messages.FetchResponse
NO_SESSION, FINAL_EPOCH, INITIAL_EPOCH = 0, -1, 0
SESSION_CACHE_SLOTS = 1000
TOPIC_IDS_FROM = 13  # Fetch v13 names topics by id
REPLICA_STATE_FROM = 15  # Fetch v15 moves replica_id into replica_state (KIP-903)
FOLLOWER_READS_FROM = 11  # consumers may fetch from a follower from v11 (KIP-392)
ISOLATION_LEVEL_FROM = 4  # Fetch v4 adds isolation_level, last_stable_offset and aborted_transactions


@dataclass
class SessionPartition:
    """A partition the client fetches, and what it was last told about it."""

    name: str | None
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's, v5+
    sent_high_watermark: int = -2
    sent_log_start: int = -2


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int = 1
    partitions: OrderedDict[tuple, SessionPartition] = field(default_factory=OrderedDict)


class SessionCache:
    def __init__(self, slots: int = SESSION_CACHE_SLOTS) -> None:
        self.slots = slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def create(self) -> FetchSession:
        """A session under a random id, as Kafka's FetchSessionCache: ids counted from 1 would repeat after a
        restart, and a client still holding an old session would be served another client's session."""
        session_id = random.randint(1, 0x7FFFFFFF)
        while session_id in self.sessions:
            session_id = random.randint(1, 0x7FFFFFFF)
        session = FetchSession(session_id)
        self.sessions[session.session_id] = session
        while len(self.sessions) > self.slots:
            self.sessions.popitem(last=False)
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)


def _session_cache(broker: Broker) -> SessionCache:
    cache = getattr(broker, "fetch_sessions", None)
    if cache is None:
        cache = broker.fetch_sessions = SessionCache()
    return cache


def _key(version: int, name: str | None, topic_id: uuid.UUID, partition: int) -> tuple:
    return (topic_id if version >= TOPIC_IDS_FROM else name, partition)


def _wanted(broker: Broker, request, version: int) -> list[SessionPartition]:
    """The partitions named in the request, with names resolved from ids for v13+."""
    wanted = []
    for topic in request.topics:
        name, topic_id = topic.topic, topic.topic_id or ZERO_UUID
        if version >= TOPIC_IDS_FROM:
            known = broker.topics_by_id.get(topic_id)
            name = known.name if known else None
        for p in topic.partitions:
            epoch = p.current_leader_epoch if version >= 9 else -1
            wanted.append(SessionPartition(name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes, epoch,
                                           p.last_fetched_epoch if version >= 12 else -1,
                                           p.log_start_offset if version >= 5 else -1))
    return wanted


def _replica_id(request, version: int) -> int:
    return request.replica_state.replica_id if version >= REPLICA_STATE_FROM else request.replica_id


def _aborted(fetched: FetchedData) -> list | None:
    """The response's aborted transactions: null unless the consumer reads committed records."""
    if fetched.aborted_transactions is None:
        return None
    return [Response.AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
            for txn in fetched.aborted_transactions]


def _partition_data(index: int, error: int, fetched: FetchedData | None = None, records=b""):
    """As Kafka answers: a partition that failed reports no offsets (-1), and one of a topic the broker does
    not know (refused before any read) an empty, not null, list of aborted transactions."""
    read = fetched is not None and error == ErrorCode.NONE
    unknown = error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)
    if read:
        high_watermark, last_stable = fetched.high_watermark, fetched.last_stable_offset
        log_start = fetched.log_start_offset
        aborted = _aborted(fetched)
    else:
        high_watermark = last_stable = log_start = -1
        aborted = [] if unknown else None
    data = Response.PartitionData(
        partition_index=index, error_code=error, high_watermark=high_watermark,
        last_stable_offset=last_stable, log_start_offset=log_start,
        aborted_transactions=aborted, preferred_read_replica=-1, records=records)
    if read and fetched.diverging_epoch is not None:
        data.diverging_epoch = Response.EpochEndOffset(epoch=fetched.diverging_epoch[0],
                                                       end_offset=fetched.diverging_epoch[1])
    return data


def _read_one(broker: Broker, wanted: SessionPartition, version: int, budget: int, first: bool, replica_id: int,
              isolation_level: int = READ_UNCOMMITTED):
    """(partition data, bytes found) for one partition. Only the `first` partition to return data may
    exceed the request's budget with one whole batch (KIP-74, as Kafka's minOneMessage); later
    ones stop at what is left of it."""
    if wanted.name is None:
        return _partition_data(wanted.partition, ErrorCode.UNKNOWN_TOPIC_ID), 0
    partition = broker.replicas.lookup(wanted.name, wanted.partition)
    if not isinstance(partition, Partition):
        return _partition_data(wanted.partition, partition), 0
    log = partition.log
    require_leader = replica_id >= 0 or version < FOLLOWER_READS_FROM
    quotas = broker.replication_quotas
    throttled = replica_id >= 0 and quotas.leader_throttles(wanted.name, wanted.partition, partition.isr, replica_id)
    held_back = throttled and quotas.leader.exceeded()  # Kafka answers such a partition with no records
    try:
        fetched = partition.read(wanted.fetch_offset, 0 if held_back else min(wanted.max_bytes, budget),
                                 current_leader_epoch=wanted.current_leader_epoch,
                                 last_fetched_epoch=wanted.last_fetched_epoch, require_leader=require_leader,
                                 replica_id=replica_id, min_one_batch=first and not held_back,
                                 isolation_level=isolation_level)
    except ReplicationError as error:
        return _partition_data(wanted.partition, error.error_code), 0
    except OffsetOutOfRangeError:
        return _partition_data(wanted.partition, ErrorCode.OFFSET_OUT_OF_RANGE), 0
    except OSError as error:
        offline = broker.logs.io_error(log, error, f"reading {wanted.name}-{wanted.partition}")
        return _partition_data(wanted.partition, offline.error_code), 0
    except ValueError:
        if not log.closed:
            raise
        return _partition_data(wanted.partition, broker.partition_error(wanted.name, wanted.partition)), 0
    if replica_id >= 0 and fetched.diverging_epoch is None:  # the follower's log ends at its fetch offset
        broker.replicas.record_follower_fetch(partition, replica_id, wanted.fetch_offset, wanted.log_start_offset,
                                              fetched.log_end_offset)
    chunk = fetched.records
    size = len(chunk) if chunk is not None else 0
    if throttled:
        quotas.leader.spend(size)
    return _partition_data(wanted.partition, ErrorCode.NONE, fetched, chunk if size else b""), size


def _read_all(broker: Broker, partitions: list[SessionPartition], version: int, max_bytes: int,
              incremental: bool, replica_id: int = -1,
              isolation_level: int = READ_UNCOMMITTED) -> tuple[list, int, bool]:
    """One pass: (partitions to report with their data, bytes found, whether any partition
    failed). An incremental response reports only partitions with records, an error, or
    moved offsets."""
    budget, found, failed = max_bytes, 0, False
    report = []
    for wanted in partitions:
        data, size = _read_one(broker, wanted, version, budget, found == 0, replica_id, isolation_level)
        found += size
        failed = failed or data.error_code != ErrorCode.NONE
        budget = max(0, budget - size)
        changed = (size or data.error_code or data.high_watermark != wanted.sent_high_watermark
                   or data.log_start_offset != wanted.sent_log_start)
        if changed or not incremental:
            report.append((wanted, data))
    return report, found, failed


def _response_topics(report: list, version: int) -> list:
    """Group reported partitions by topic, and remember what each client was told."""
    topics: dict[tuple, object] = {}
    for wanted, data in report:
        wanted.sent_high_watermark, wanted.sent_log_start = data.high_watermark, data.log_start_offset
        topic_key = (wanted.topic_id, wanted.name)
        if topic_key not in topics:
            topics[topic_key] = Response.FetchableTopicResponse(
                topic=wanted.name or "" if version < TOPIC_IDS_FROM else "", topic_id=wanted.topic_id, partitions=[])
        topics[topic_key].partitions.append(data)
    return list(topics.values())


def _open_session(broker: Broker, request, version: int) -> tuple[FetchSession | None, list, int]:
    """Resolve the request against the session cache: (session, partitions, error)."""
    cache = _session_cache(broker)
    wanted = _wanted(broker, request, version)
    if request.session_epoch == FINAL_EPOCH:
        cache.remove(request.session_id)
        return None, wanted, ErrorCode.NONE
    if request.session_epoch == INITIAL_EPOCH:
        cache.remove(request.session_id)
        session = cache.create()
        for p in wanted:
            session.partitions[_key(version, p.name, p.topic_id, p.partition)] = p
        return session, wanted, ErrorCode.NONE
    session = cache.get(request.session_id)
    if session is None:
        return None, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if request.session_epoch != session.next_epoch:
        return None, [], ErrorCode.INVALID_FETCH_SESSION_EPOCH
    session.next_epoch += 1
    for p in wanted:
        known = session.partitions.get(_key(version, p.name, p.topic_id, p.partition))
        if known is None:
            session.partitions[_key(version, p.name, p.topic_id, p.partition)] = p
        else:
            known.fetch_offset, known.max_bytes = p.fetch_offset, p.max_bytes
            known.current_leader_epoch = p.current_leader_epoch
            known.last_fetched_epoch, known.log_start_offset = p.last_fetched_epoch, p.log_start_offset
    for forgotten in request.forgotten_topics_data or ():
        for partition in forgotten.partitions:
            session.partitions.pop(_key(version, forgotten.topic, forgotten.topic_id, partition), None)
    return session, list(session.partitions.values()), ErrorCode.NONE


def _count_bytes_out(metrics, report: list) -> None:
    for wanted, data in report:
        if data.records:
            metrics.fetched(wanted.name, len(data.records))


@handles(1)
async def fetch(broker: Broker, header, request):
    version = header.request_api_version
    session, partitions, error = _open_session(broker, request, version)
    if error:
        return Response(throttle_time_ms=0, error_code=error, session_id=NO_SESSION, responses=[])
    session_id = session.session_id if session is not None else NO_SESSION
    incremental = request.session_epoch > INITIAL_EPOCH
    deadline = now_ms() + max(0, request.max_wait_ms)
    replica_id = _replica_id(request, version)
    isolation_level = request.isolation_level if version >= ISOLATION_LEVEL_FROM else READ_UNCOMMITTED
    while True:
        report, found, failed = _read_all(broker, partitions, version, request.max_bytes, incremental, replica_id,
                                          isolation_level)
        remaining = deadline - now_ms()
        # as Kafka's ReplicaManager: an error in any partition is answered at once, not after max_wait_ms
        if found >= request.min_bytes or failed or remaining <= 0 or broker.closing:
            if found and replica_id < 0 and broker.metrics is not None:  # Kafka counts followers' bytes apart
                _count_bytes_out(broker.metrics, report)
            return Response(throttle_time_ms=0, error_code=0, session_id=session_id,
                            responses=_response_topics(report, version))
        # nothing runs between the read above and parking here (one event loop), so no append is missed
        watched = [(p.name, p.partition) for p in partitions if p.name is not None]
        follower = replica_id >= 0
        appended = broker.fetch_waiters.park(watched, follower)
        try:
            await asyncio.wait_for(appended, remaining / 1000)
        except TimeoutError:
            pass
        finally:
            broker.fetch_waiters.unpark(appended, watched, follower)
