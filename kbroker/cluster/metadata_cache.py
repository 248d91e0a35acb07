"""What this broker knows of the cluster, as its controller last told it with UpdateMetadata.

As Kafka 3.9's ZkMetadataCache: the controller's UpdateMetadata is the only writer. It replaces the set
of live brokers (with their endpoints per listener, and racks) and names the controller; its partition
states add or replace partitions, and a partition whose leader is -2 (LeaderDuringDelete) is being
deleted and leaves the cache. Metadata, DescribeCluster and FindCoordinator answer from here in
cluster mode, so a client sees the same leaders whichever broker it asks.

The cache takes plain records (BrokerRegistration, PartitionMetadata), not wire messages, so it can be
filled from ZooKeeper or a test as well as from a request (`from_update_metadata` does the wire part).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kbroker.cluster.model import NO_LEADER, BrokerRegistration, EndPoint

LEADER_DURING_DELETE = -2  # the leader a controller sends for a partition whose topic it is deleting
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}  # Kafka's ids on the wire
ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition as UpdateMetadata states it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    zk_version: int = 0
    controller_epoch: int = 0


@dataclass(frozen=True)
class MetadataUpdate:
    """One UpdateMetadata request, as records."""

    controller_id: int
    controller_epoch: int
    brokers: tuple[BrokerRegistration, ...]
    partitions: tuple[PartitionMetadata, ...]
    topic_ids: dict[str, uuid.UUID]


@dataclass(frozen=True)
class KnownTopic:
    """A topic of the cluster as the group coordinator's checks see it (the fields of kbroker.broker.Topic they
    read): a cluster member hosts only some topics, but a group commits to any."""

    name: str
    topic_id: uuid.UUID
    partitions: int


class MetadataCache:
    """The cluster as the controller last described it; see the module docstring. Reads and the one writer
    may run on different threads, so an update swaps whole dictionaries under a lock."""

    def __init__(self) -> None:
        self.controller_id: int | None = None
        self.controller_epoch = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        self._partitions: dict[str, dict[int, PartitionMetadata]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._lock = threading.Lock()
        self._known: tuple[object, dict[str, KnownTopic], dict[uuid.UUID, KnownTopic]] = (None, {}, {})

    # --- writing ----------------------------------------------------------------------

    def update(self, update: MetadataUpdate) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata; returns the partitions it deleted."""
        deleted: list[tuple[str, int]] = []
        with self._lock:
            self.controller_id = update.controller_id if update.controller_id >= 0 else None
            self.controller_epoch = update.controller_epoch
            self._brokers = {b.broker_id: b for b in update.brokers}
            partitions = {topic: dict(by_index) for topic, by_index in self._partitions.items()}
            topic_ids = dict(self._topic_ids)
            for topic, topic_id in update.topic_ids.items():
                if topic_id != ZERO_UUID:
                    topic_ids[topic] = topic_id
            for state in update.partitions:
                if state.leader == LEADER_DURING_DELETE:
                    if partitions.get(state.topic, {}).pop(state.partition, None) is not None:
                        deleted.append((state.topic, state.partition))
                    if not partitions.get(state.topic):
                        partitions.pop(state.topic, None)
                        topic_ids.pop(state.topic, None)
                else:
                    partitions.setdefault(state.topic, {})[state.partition] = state
            self._partitions, self._topic_ids = partitions, topic_ids
        return deleted

    # --- reading ----------------------------------------------------------------------

    def alive_brokers(self) -> list[BrokerRegistration]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def alive_broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def endpoint(self, broker_id: int, listener: str) -> EndPoint | None:
        """A live broker's endpoint on `listener`, or None (dead, or without that listener)."""
        found = self._brokers.get(broker_id)
        return None if found is None else found.endpoint(listener)

    def topics(self) -> list[str]:
        return sorted(self._partitions)

    def contains(self, topic: str) -> bool:
        return topic in self._partitions

    def topic_id(self, topic: str) -> uuid.UUID:
        return self._topic_ids.get(topic, ZERO_UUID)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((name for name, known in self._topic_ids.items() if known == topic_id), None)

    def known_topics(self) -> tuple[dict[str, KnownTopic], dict[uuid.UUID, KnownTopic]]:
        """Every topic by name and by id, rebuilt only after an update (which swaps the dictionaries)."""
        source, by_name, by_id = self._known
        partitions, topic_ids = self._partitions, self._topic_ids
        if source is not partitions:
            by_name = {name: KnownTopic(name, topic_ids.get(name, ZERO_UUID), len(found))
                       for name, found in partitions.items()}
            by_id = {topic.topic_id: topic for topic in by_name.values() if topic.topic_id != ZERO_UUID}
            self._known = (partitions, by_name, by_id)
        return by_name, by_id

    def partitions(self, topic: str) -> list[PartitionMetadata]:
        return sorted(self._partitions.get(topic, {}).values(), key=lambda p: p.partition)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        return self._partitions.get(topic, {}).get(partition)

    def leader_endpoint(self, topic: str, partition: int, listener: str) -> EndPoint | None:
        """Where the partition's leader serves `listener`; None when it has no live leader."""
        state = self.partition(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        return self.endpoint(state.leader, listener)


def from_update_metadata(request: object) -> MetadataUpdate:
    """An UpdateMetadata request (any version) as records."""
    brokers = tuple(
        BrokerRegistration(b.id, tuple(EndPoint((e.listener or SECURITY_PROTOCOLS.get(e.security_protocol, "PLAINTEXT"))
                                                .upper(), e.host, e.port,
                                                SECURITY_PROTOCOLS.get(e.security_protocol, "PLAINTEXT"))
                                       for e in b.endpoints), b.rack)
        for b in request.live_brokers)  # type: ignore[attr-defined]
    partitions: list[PartitionMetadata] = []
    topic_ids: dict[str, uuid.UUID] = {}
    for topic in request.topic_states or ():  # type: ignore[attr-defined]
        topic_ids[topic.topic_name] = getattr(topic, "topic_id", None) or ZERO_UUID
        partitions.extend(_partition(topic.topic_name, p) for p in topic.partition_states)
    for p in getattr(request, "ungrouped_partition_states", None) or ():  # v0-v4
        partitions.append(_partition(p.topic_name, p))
    return MetadataUpdate(request.controller_id, request.controller_epoch, brokers,  # type: ignore[attr-defined]
                          tuple(partitions), topic_ids)


def _partition(topic: str, state: object) -> PartitionMetadata:
    s = state
    return PartitionMetadata(topic, s.partition_index, s.leader, s.leader_epoch,  # type: ignore[attr-defined]
                             tuple(s.replicas), tuple(s.isr),  # type: ignore[attr-defined]
                             tuple(getattr(s, "offline_replicas", None) or ()),
                             s.zk_version, s.controller_epoch)  # type: ignore[attr-defined]


def updates(brokers: Iterable[BrokerRegistration], partitions: Iterable[PartitionMetadata],
            controller_id: int = -1, controller_epoch: int = 0,
            topic_ids: dict[str, uuid.UUID] | None = None) -> MetadataUpdate:
    """A MetadataUpdate built by hand (tests, and a broker that reads ZooKeeper directly)."""
    return MetadataUpdate(controller_id, controller_epoch, tuple(brokers), tuple(partitions), dict(topic_ids or {}))
