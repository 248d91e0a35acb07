"""Replica fetchers: how a follower copies its leader's log, as Kafka 3.9's ReplicaFetcherThread.

One fetcher per (leader broker, fetcher id), the id being Kafka's `abs(31 * hash(topic) + partition) %
num.replica.fetchers` with Java's String.hashCode, so a partition lands on the same fetcher as in Kafka.
Each fetcher is an asyncio task that sends Fetch v17 (replica_state: this broker's id and epoch; topics
by id; each partition with its current leader epoch, its log end offset as fetch offset and the epoch of
its last batch), sessionless, and for each partition of the answer:

- records: appended as the leader wrote them (offsets kept), then the follower's HW is the leader's,
  capped at the local log end, and its log start moves up to the leader's (what DeleteRecords waits for);
- a diverging epoch (KIP-595 truncation on fetch): the log is cut back to where it and the leader's agree
  (the end of the diverging epoch, or of the largest local epoch below it) and fetching goes on from there;
- OFFSET_OUT_OF_RANGE: the leader's log end is asked (ListOffsets, latest): below ours we truncate to it,
  else our offset fell below the leader's log start and the log restarts empty at that start;
- any other error (a leadership change not yet known here, for one): the partition waits
  replica.fetch.backoff.ms, as a failed request makes the whole fetcher wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kbroker.cluster.broker_connection import BrokerConnection
from kbroker.cluster.model import EndPoint
from kbroker.cluster.partition import NO_EPOCH, Partition, Role
from kbroker.coordinator.hashing import java_string_hash
from kbroker.log.future_log import truncation_offset
from kbroker.log.partition_log import PartitionLog
from kbroker.replication_quotas import ReplicationQuotas
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

FETCH, LIST_OFFSETS = 1, 2
FETCH_VERSION = 17        # what a Kafka 3.9 follower sends at inter.broker.protocol.version 3.9
LIST_OFFSETS_VERSION = 7  # ListOffsets with replica_id, as the follower asks the leader's end
LATEST, EARLIEST = -1, -2
ZERO_UUID = uuid.UUID(int=0)
TopicPartition = tuple[str, int]


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def java_abs(value: int) -> int:
    """Kafka's Utils.abs: Math.abs, except that Integer.MIN_VALUE gives 0."""
    return 0 if value == -(1 << 31) else abs(value)


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: Utils.abs(31 * topic.hashCode + partition) % fetchers."""
    return java_abs(_int32(31 * java_string_hash(topic) + partition)) % num_fetchers


@dataclass(frozen=True)
class FetcherSettings:
    """replica.fetch.* and friends, read once when the manager is built."""

    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1_048_576             # replica.fetch.max.bytes, per partition
    response_max_bytes: int = 10_485_760   # replica.fetch.response.max.bytes
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    num_fetchers: int = 1

    @classmethod
    def from_config(cls, config: object, broker_id: int) -> FetcherSettings:
        get = config.__getitem__  # type: ignore[attr-defined]
        return cls(broker_id, int(get("replica.fetch.wait.max.ms")), int(get("replica.fetch.min.bytes")),
                   int(get("replica.fetch.max.bytes")), int(get("replica.fetch.response.max.bytes")),
                   int(get("replica.fetch.backoff.ms")), int(get("replica.socket.timeout.ms")),
                   int(get("num.replica.fetchers")))


@dataclass
class FetchState:
    """A partition a fetcher copies: which log, the topic id the leader knows it by, the epoch we follow."""

    partition: Partition
    topic_id: uuid.UUID
    delayed_until: float = 0.0

    @property
    def log(self) -> PartitionLog:
        assert self.partition.log is not None
        return self.partition.log


def last_fetched_epoch(log: PartitionLog) -> int:
    latest = log.leader_epoch_cache.latest_epoch
    return NO_EPOCH if latest is None else latest


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader; see the module docstring."""

    def __init__(self, source: EndPoint, source_id: int, index: int, settings: FetcherSettings,
                 broker_epoch: Callable[[], int], on_appended: Callable[[Partition], object],
                 quotas: ReplicationQuotas | None = None) -> None:
        self.source_id = source_id
        self.quotas = quotas
        self.index = index
        self.settings = settings
        self.broker_epoch = broker_epoch
        self.on_appended = on_appended
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.connection = BrokerConnection(source.host, source.port, f"broker-{settings.broker_id}-fetcher-{index}",
                                           (settings.socket_timeout_ms + settings.max_wait_ms) / 1000)
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.source_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.connection.close()

    def add(self, states: dict[TopicPartition, FetchState]) -> None:
        self.partitions.update(states)
        self._changed.set()

    def remove(self, keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            self.partitions.pop(key, None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = {k: s for k, s in self.partitions.items() if s.delayed_until <= now and s.partition.log is not None}
            if not ready:
                self._changed.clear()
                wake = min((s.delayed_until for s in self.partitions.values()), default=now + 1.0)
                with contextlib.suppress(TimeoutError):  # asyncio.timeout never loses a cancellation
                    async with asyncio.timeout(max(0.01, min(wake - now, 1.0))):
                        await self._changed.wait()
                continue
            throttled = self._throttled(ready)
            quota_wait = self.quotas.follower.wait_s() if throttled and self.quotas is not None else 0.0
            if quota_wait:
                ready = {k: s for k, s in ready.items() if k not in throttled}  # as Kafka's shouldFollowerThrottle
                if not ready:
                    await asyncio.sleep(quota_wait)
                    continue
            try:
                response = await self.connection.request(FETCH, FETCH_VERSION, self._fetch_request(ready))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.info("fetch from broker %d failed: %s", self.source_id, error)
                self._delay(ready.values())
                await asyncio.sleep(self.settings.backoff_ms / 1000)
                continue
            if response.error_code:
                log.info("fetch from broker %d: %s", self.source_id, ErrorCode(response.error_code).name)
                self._delay(ready.values())
                continue
            if throttled and self.quotas is not None:
                self.quotas.follower.spend(_records_size(response, {(s.topic_id, k[1]) for k, s in ready.items()
                                                                    if k in throttled}))
            await self._process(response, ready)

    def _throttled(self, ready: dict[TopicPartition, FetchState]) -> set[TopicPartition]:
        """The partitions of `ready` this follower's replication quota applies to."""
        if self.quotas is None:
            return set()
        return {key for key, state in ready.items()
                if self.quotas.follower_throttles(key[0], key[1], state.partition.isr)}

    def _delay(self, states: Iterable[FetchState]) -> None:
        until = asyncio.get_running_loop().time() + self.settings.backoff_ms / 1000
        for state in states:
            state.delayed_until = until

    def _fetch_request(self, ready: dict[TopicPartition, FetchState]):
        request = messages.FetchRequest
        by_topic: dict[uuid.UUID, list] = {}
        for (_, index), state in ready.items():
            plog = state.log
            by_topic.setdefault(state.topic_id, []).append(request.FetchPartition(
                partition=index, current_leader_epoch=state.partition.leader_epoch, fetch_offset=plog.log_end_offset,
                last_fetched_epoch=last_fetched_epoch(plog), log_start_offset=plog.log_start_offset,
                partition_max_bytes=self.settings.max_bytes, replica_directory_id=ZERO_UUID))
        return request(
            cluster_id=None, replica_id=-1,
            replica_state=request.ReplicaState(replica_id=self.settings.broker_id, replica_epoch=self.broker_epoch()),
            max_wait_ms=self.settings.max_wait_ms, min_bytes=self.settings.min_bytes,
            max_bytes=self.settings.response_max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
            topics=[request.FetchTopic(topic=None, topic_id=topic_id, partitions=parts)
                    for topic_id, parts in by_topic.items()],
            forgotten_topics_data=[], rack_id="")

    async def _process(self, response, ready: dict[TopicPartition, FetchState]) -> None:
        by_id = {(s.topic_id, k[1]): (k, s) for k, s in ready.items()}
        for topic in response.responses:
            for data in topic.partitions:
                found = by_id.get((topic.topic_id, data.partition_index))
                if found is None or self.partitions.get(found[0]) is not found[1]:
                    continue  # removed (or replaced) while the fetch was in flight
                key, state = found
                try:
                    await self._process_partition(key, state, data)
                except Exception:
                    log.exception("replicating %s-%d from broker %d failed", key[0], key[1], self.source_id)
                    self._delay([state])

    async def _process_partition(self, key: TopicPartition, state: FetchState, data) -> None:
        error = ErrorCode(data.error_code)
        plog = state.log
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(key, state)
            return
        if error:
            log.debug("fetch %s-%d from broker %d: %s", key[0], key[1], self.source_id, error.name)
            self._delay([state])
            return
        diverging = data.diverging_epoch
        if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
            offset = truncation_offset(plog, diverging.epoch, diverging.end_offset)
            log.info("truncating %s-%d to %d (the leader's epoch %d ends at %d)", key[0], key[1], offset,
                     diverging.epoch, diverging.end_offset)
            plog.truncate_to(offset)
            return
        records = data.records
        if records:
            plog.append_as_follower(records if isinstance(records, (bytes, bytearray, memoryview)) else bytes(records))
        plog.update_high_watermark(min(data.high_watermark, plog.log_end_offset))
        if data.log_start_offset > plog.log_start_offset:  # the leader deleted records (DeleteRecords, retention)
            plog.delete_records_before(min(data.log_start_offset, plog.high_watermark))
        self.on_appended(state.partition)

    async def _handle_out_of_range(self, key: TopicPartition, state: FetchState) -> None:
        """Kafka's handleOutOfRangeError, as the leader's log end and start tell."""
        plog = state.log
        leader_end = await self._leader_offset(key, state, LATEST)
        if not self._still_following(key, state, plog):
            return  # became leader (or another leader's follower) meanwhile: its log is no longer ours to cut
        if leader_end is None:
            self._delay([state])
        elif leader_end < plog.log_end_offset:
            plog.truncate_to(leader_end)
        else:
            leader_start = await self._leader_offset(key, state, EARLIEST)
            if not self._still_following(key, state, plog):
                return
            if leader_start is None:
                self._delay([state])
            elif leader_start > plog.log_end_offset:
                plog.truncate_fully_and_start_at(leader_start)

    def _still_following(self, key: TopicPartition, state: FetchState, plog: PartitionLog) -> bool:
        """Whether `state` is still what this fetcher copies into `plog`: a LeaderAndIsr while a request was
        in flight replaces or removes the state, and a leader's log must never be truncated to another's."""
        partition = state.partition
        return self.partitions.get(key) is state and partition.log is plog and partition.role is Role.FOLLOWER

    async def _leader_offset(self, key: TopicPartition, state: FetchState, timestamp: int) -> int | None:
        request = messages.ListOffsetsRequest
        body = request(replica_id=self.settings.broker_id, isolation_level=0, topics=[request.ListOffsetsTopic(
            name=key[0], partitions=[request.ListOffsetsPartition(
                partition_index=key[1], current_leader_epoch=state.partition.leader_epoch, timestamp=timestamp)])])
        try:
            answer = await self.connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        except Exception as error:
            log.info("ListOffsets to broker %d failed: %s", self.source_id, error)
            return None
        part = answer.topics[0].partitions[0]
        return None if part.error_code else part.offset


def _records_size(response, partitions: set[tuple[uuid.UUID, int]]) -> int:
    """Bytes of records a fetch answer holds for `partitions` (topic id, index)."""
    return sum(len(data.records or b"") for topic in response.responses for data in topic.partitions
               if (topic.topic_id, data.partition_index) in partitions)


class ReplicaFetcherManager:
    """The fetchers of this broker, keyed by (leader, fetcher id); see the module docstring."""

    def __init__(self, settings: FetcherSettings, broker_epoch: Callable[[], int],
                 on_appended: Callable[[Partition], object] = lambda partition: None,
                 quotas: ReplicationQuotas | None = None) -> None:
        self.settings = settings
        self.quotas = quotas
        self.broker_epoch = broker_epoch
        self.on_appended = on_appended
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._placed: dict[TopicPartition, tuple[int, int]] = {}

    def add_partitions(self, partitions: Iterable[tuple[Partition, uuid.UUID, EndPoint]]) -> None:
        """Follow each partition (whose leader is `partition.leader_id`, reached at the endpoint given)."""
        for partition, topic_id, source in partitions:
            key = (partition.topic, partition.index)
            self.remove_partitions([key])
            placement = (partition.leader_id, fetcher_id(partition.topic, partition.index, self.settings.num_fetchers))
            fetcher = self.fetchers.get(placement)
            if fetcher is not None and (fetcher.connection.host, fetcher.connection.port) != (source.host, source.port):
                fetcher.connection.retarget(source.host, source.port)
            if fetcher is None:
                fetcher = self.fetchers[placement] = ReplicaFetcher(source, placement[0], placement[1], self.settings,
                                                                    self.broker_epoch, self.on_appended, self.quotas)
                fetcher.start()
            fetcher.add({key: FetchState(partition, topic_id)})
            self._placed[key] = placement

    def remove_partitions(self, keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            placement = self._placed.pop(key, None)
            if placement is not None and placement in self.fetchers:
                self.fetchers[placement].remove([key])

    def following(self, topic: str, partition: int) -> int | None:
        """The leader this broker fetches the partition from, or None."""
        placement = self._placed.get((topic, partition))
        return None if placement is None else placement[0]

    async def shutdown_idle_fetchers(self) -> None:
        for placement, fetcher in list(self.fetchers.items()):
            # checked again after each await: a fetcher placed meanwhile under the same key is not this one
            if self.fetchers.get(placement) is fetcher and not fetcher.partitions:
                del self.fetchers[placement]
                await fetcher.stop()

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._placed.clear()
        for fetcher in fetchers:
            await fetcher.stop()
