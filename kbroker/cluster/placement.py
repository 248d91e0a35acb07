"""Replica placement as Kafka 3.9 does it in ZooKeeper mode (AdminUtils.assignReplicasToBrokers and
AdminZkClient's CreatePartitions path), so a kbroker controller places replicas exactly where a Kafka one would.

Pure functions, no I/O. The randomness Kafka uses (start index and follower shift) comes from `rng` unless the
caller fixes it, which is what tests and CreatePartitions do.

What callers must know about Kafka's broker lists (the order matters for the rack-unaware layout):
- CreatePartitions takes `broker_metadatas(...)`: every registered broker, sorted by id, racks enforced.
- CreateTopics passes the metadata cache's live brokers in that cache's own iteration order, racks as they are:
  `metadata_cache_order(...)` gives that order.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kbroker.cluster.model import ReplicaAssignment
from wire.errors import ErrorCode


class RackedBroker(Protocol):
    """Anything with a broker id and an optional rack: BrokerRegistration, or BrokerMetadata below."""

    @property
    def broker_id(self) -> int: ...

    @property
    def rack(self) -> str | None: ...


@dataclass(frozen=True)
class BrokerMetadata:
    """The two facts placement reads about a broker (Kafka's BrokerMetadata)."""

    broker_id: int
    rack: str | None = None


class RackAwareMode(Enum):
    """How AdminZkClient.getBrokerMetadatas treats racks when only some brokers have one."""

    ENFORCED = "enforced"  # refuse
    SAFE = "safe"          # drop every rack
    DISABLED = "disabled"  # always drop racks


class PlacementError(Exception):
    """A placement Kafka refuses: `error_code` is the code its answer carries, `str(self)` Kafka's own text."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code

    @property
    def client_message(self) -> str | None:
        """What Kafka puts in the response's error message: nothing for UNKNOWN_SERVER_ERROR (ApiError hides it)."""
        return None if self.error_code == ErrorCode.UNKNOWN_SERVER_ERROR else str(self)


def assign_replicas_to_brokers(brokers: Sequence[RackedBroker], partitions: int, replication_factor: int, *,
                               start_index: int | None = None, replica_shift: int | None = None,
                               start_partition_id: int = 0,
                               rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    """Partition id -> replicas, leader first, as AdminUtils.assignReplicasToBrokers.

    Kafka has one `fixedStartIndex` that fixes both the start index and the follower shift; here a given
    `start_index` does the same unless `replica_shift` is also given. Unfixed values are drawn from `rng`
    (start first, then shift), each uniform over the broker count, as Kafka draws them.
    """
    if partitions <= 0:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication_factor} larger than available brokers: "
                             f"{len(brokers)}.")
    racked = [b for b in brokers if b.rack is not None]
    if racked and len(racked) < len(brokers):
        raise PlacementError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             "Not all brokers have rack information for replica rack aware assignment.")
    rng = rng or random.Random()
    if racked:
        rack_of = {b.broker_id: b.rack for b in brokers}
        ring = rack_alternated_brokers(rack_of)
    else:
        rack_of = None
        ring = [b.broker_id for b in brokers]
    start = start_index if start_index is not None else rng.randrange(len(ring))
    if replica_shift is not None:
        shift = replica_shift
    else:
        shift = start_index if start_index is not None else rng.randrange(len(ring))
    return _place(ring, rack_of, partitions, replication_factor, start, shift, max(0, start_partition_id))


def _place(ring: list[int], rack_of: dict[int, str] | None, partitions: int, replication_factor: int,
           start: int, shift: int, first_partition: int) -> dict[int, tuple[int, ...]]:
    """Leaders round-robin from `start`; the follower shift grows by one each time the ring wraps."""
    n = len(ring)
    placed: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        if rack_of is None:
            followers = [ring[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            followers = _rack_aware_followers(ring, rack_of, first, shift, replication_factor)
        placed[partition] = (ring[first], *followers)
    return placed


def _rack_aware_followers(ring: list[int], rack_of: dict[int, str], first: int, shift: int,
                          replication_factor: int) -> list[int]:
    """Walk the shifted ring, skipping a broker whose rack (or itself) already holds a replica while some rack
    (or broker) holds none, so replicas reach every rack before any rack gets a second."""
    n, rack_count = len(ring), len(set(rack_of.values()))
    leader = ring[first]
    racks_used, brokers_used = {rack_of[leader]}, {leader}
    followers: list[int] = []
    k = 0
    while len(followers) < replication_factor - 1:
        broker = ring[_replica_index(first, shift * rack_count, k, n)]
        rack = rack_of[broker]
        k += 1
        if rack in racks_used and len(racks_used) < rack_count:
            continue
        if broker in brokers_used and len(brokers_used) < n:
            continue
        followers.append(broker)
        racks_used.add(rack)
        brokers_used.add(broker)
    return followers


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """The j-th follower's ring index: never the leader's, as the offset stays within 1..n-1."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated_brokers(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers taken one per rack in turn (racks in Java's string order, brokers by id within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack, key=java_string_order)]
    alternated: list[int] = []
    for depth in range(max(len(q) for q in queues)):
        alternated.extend(q[depth] for q in queues if depth < len(q))
    return alternated


def java_string_order(text: str) -> bytes:
    """A sort key matching java.lang.String.compareTo (UTF-16 code units, not code points)."""
    return text.encode("utf-16-be", "surrogatepass")


def broker_metadatas(brokers: Iterable[RackedBroker],
                     mode: RackAwareMode = RackAwareMode.ENFORCED) -> list[BrokerMetadata]:
    """The broker list AdminZkClient.getBrokerMetadatas gives CreatePartitions: sorted by id, racks per `mode`."""
    brokers = list(brokers)
    with_rack = sum(1 for b in brokers if b.rack is not None)
    partial = 0 < with_rack < len(brokers)
    if mode is RackAwareMode.ENFORCED and partial:
        raise PlacementError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             "Not all brokers have rack information. Add --disable-rack-aware in command line to "
                             "make replica assignment without rack information.")
    keep_racks = mode is RackAwareMode.ENFORCED or (mode is RackAwareMode.SAFE and with_rack == len(brokers))
    listed = [BrokerMetadata(b.broker_id, b.rack if keep_racks else None) for b in brokers]
    return sorted(listed, key=lambda b: b.broker_id)


def assign_new_partitions(topic: str, existing: Mapping[int, ReplicaAssignment], brokers: Sequence[RackedBroker],
                          partition_count: int,
                          manual: Sequence[Sequence[int]] | None = None) -> dict[int, ReplicaAssignment]:
    """The replicas of the partitions CreatePartitions adds, as ZkAdminManager and AdminZkClient decide them.

    `brokers` is `broker_metadatas(...)`'s list; `manual` the request's assignments, one per new partition.
    Without one, placement continues the topic's layout: the start index is that of the first broker whose id
    is at least partition 0's leader, and it fixes the follower shift too, as Kafka's single fixedStartIndex does.
    """
    _check_partition_increase(topic, existing, partition_count)
    broker_ids = [b.broker_id for b in brokers]
    proposed = None
    if manual is not None:
        proposed = _numbered_manual_assignment(existing, broker_ids, partition_count, manual)
    return new_partitions_assignment(topic, existing, brokers, partition_count, proposed)


def _check_partition_increase(topic: str, existing: Mapping[int, ReplicaAssignment], partition_count: int) -> None:
    """ZkAdminManager.createPartitions' own checks, made before AdminZkClient sees the request."""
    if any(a.adding or a.removing for a in existing.values()):
        raise PlacementError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"A partition reassignment is in progress for the topic '{topic}'.")
    if not existing:
        raise PlacementError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist.")
    current = len(existing)
    if partition_count < current:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {current} partitions, which is higher than the requested "
                             f"{partition_count}.")
    if partition_count == current:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")


def _numbered_manual_assignment(existing: Mapping[int, ReplicaAssignment], broker_ids: Sequence[int],
                                partition_count: int, manual: Sequence[Sequence[int]]) -> dict[int, list[int]]:
    named = _scala_set([b for replicas in manual for b in replicas])
    unknown = [b for b in named if b not in set(broker_ids)]
    if unknown:
        if len(named) > _SCALA_SMALL_SET:
            unknown = _scala_set(unknown)  # a HashSet stays one after `--`, so its order is its hash order
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    increment = partition_count - len(existing)
    if len(manual) != increment:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Increasing the number of partitions by {increment} but {len(manual)} assignments "
                             "provided.")
    return {len(existing) + i: list(replicas) for i, replicas in enumerate(manual)}


def new_partitions_assignment(topic: str, existing: Mapping[int, ReplicaAssignment],
                              brokers: Sequence[RackedBroker], partition_count: int,
                              proposed: Mapping[int, Sequence[int]] | None = None) -> dict[int, ReplicaAssignment]:
    """AdminZkClient.createNewPartitionsAssignment: validate a proposed assignment or place the new partitions."""
    if 0 not in existing:
        raise PlacementError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is missing.")
    first_replicas = existing[0].replicas
    to_add = partition_count - len(existing)
    if to_add <= 0:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                             f"The number of partitions for a topic can only be increased. Topic {topic} currently "
                             f"has {len(existing)} partitions, {partition_count} would not be an increase.")
    if proposed is not None:
        _validate_proposed(proposed, len(first_replicas), [b.broker_id for b in brokers])
        placed = {p: tuple(r) for p, r in proposed.items()}
    else:
        start = next((i for i, b in enumerate(brokers) if b.broker_id >= first_replicas[0]), 0)
        placed = assign_replicas_to_brokers(brokers, to_add, len(first_replicas), start_index=start,
                                            start_partition_id=len(existing))
    return {p: ReplicaAssignment(replicas) for p, replicas in placed.items()}


def _validate_proposed(proposed: Mapping[int, Sequence[int]], replication_factor: int,
                       broker_ids: Sequence[int]) -> None:
    """AdminZkClient.validateReplicaAssignment, in its order: per partition (in the Scala map's iteration
    order, which decides which problem is named), then the replication factors."""
    available = _scala_set(broker_ids)
    for partition in _scala_set(list(proposed)):
        replicas = proposed[partition]
        listed = ", ".join(map(str, replicas))
        if not replicas:
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers not allowed in replica assignment: {listed} for partition id "
                                 f"{partition}.")
        if not set(replicas) <= set(available):
            raise PlacementError(ErrorCode.BROKER_NOT_AVAILABLE,
                                 f"Some brokers specified for partition id {partition} are not available. "
                                 f"Specified brokers: {listed}, available brokers: "
                                 f"{', '.join(map(str, available))}.")
    bad = sorted((p, len(r)) for p, r in proposed.items() if len(r) != replication_factor)
    if bad:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Inconsistent replication factor between partitions, partition 0 has "
                             f"{replication_factor} while partitions [{', '.join(str(p) for p, _ in bad)}] have "
                             f"replication factors [{', '.join(str(n) for _, n in bad)}], respectively.")


# Kafka's texts list the members of Scala immutable sets (and the keys of immutable maps), so their order is
# Scala 2.13's: up to four members keep insertion order (Set1..Set4); beyond that a CHAMP hash trie orders them.
_SCALA_SMALL_SET = 4


def _scala_set(elements: Sequence[int]) -> list[int]:
    """The iteration order of `elements.toSet` (or `.toMap` keys) in Scala 2.13."""
    distinct = list(dict.fromkeys(elements))
    if len(distinct) <= _SCALA_SMALL_SET:
        return distinct
    return _champ_order(distinct, 0)


def _champ_order(elements: list[int], shift: int) -> list[int]:
    """A CHAMP node's order: its own entries by hash fragment, then each sub-node's, depth first by fragment."""
    by_fragment: dict[int, list[int]] = {}
    for element in elements:
        by_fragment.setdefault((_scala_improve(element) >> shift) & 31, []).append(element)
    own = [group[0] for _, group in sorted(by_fragment.items()) if len(group) == 1]
    nested = [_champ_order(group, shift + 5) for _, group in sorted(by_fragment.items()) if len(group) > 1]
    return own + [element for group in nested for element in group]


def _scala_improve(value: int) -> int:
    """scala.collection.Hashing.improve of an Int's hash (the Int itself), as an unsigned 32-bit value."""
    mask = 0xFFFFFFFF
    h = (value + ~(value << 9)) & mask
    h ^= h >> 14
    h = (h + (h << 4)) & mask
    return h ^ (h >> 10)


def metadata_cache_order(live_brokers: Sequence[int], previous_count: int) -> list[int]:
    """The order ZooKeeper-mode Kafka's metadata cache lists live brokers in, which CreateTopics places over.

    The cache keeps them in a Scala `mutable.LongMap`, rebuilt on every UpdateMetadata: sized for the previous
    snapshot's broker count and filled in the request's live-broker order. Its iteration order is key 0 first,
    then hash-table slot order; this replays those inserts (with the table's growth) to find it.
    """
    table = _LongMapSlots(previous_count)
    for broker in live_brokers:
        table.insert(broker)
    return table.order()


class _LongMapSlots:
    """Just enough of scala.collection.mutable.LongMap (2.13) to know where each key lands."""

    def __init__(self, initial_size: int) -> None:
        if initial_size < 0:
            self.mask = 0x7
        else:
            bits = 32 - _leading_zeros32((initial_size - 1) & 0xFFFFFFFF)
            self.mask = (((1 << (bits % 32)) - 1) & 0x3FFFFFFF) | 0x7
        self.slots: list[int | None] = [None] * (self.mask + 1)
        self.size = 0
        self.has_zero = False

    def insert(self, key: int) -> None:
        if key == 0:
            self.has_zero = True
            return
        index = self._probe(key)
        if self.slots[index] == key:
            return
        self.slots[index] = key
        self.size += 1
        if self.size > 0.5 * self.mask:
            self._repack()

    def _probe(self, key: int) -> int:
        """The slot holding `key`, or the first free one on its probe sequence (no removals, so no vacancies)."""
        index, step = self._home(key), 0
        while self.slots[index] is not None and self.slots[index] != key:
            step += 1
            index = (index + 2 * (step + 1) * step - 3) & self.mask
        return index

    def _home(self, key: int) -> int:
        h = (key ^ (key >> 32)) & 0xFFFFFFFF  # MurmurHash3's 32-bit finalizer, in part
        x = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
        return (x ^ (x >> 13)) & self.mask

    def _repack(self) -> None:
        mask = self.mask
        if self.size >= 0.5 * mask:
            mask = ((mask << 1) + 1) & 0x3FFFFFFF
        while mask > 8 and 8 * self.size < mask:
            mask >>= 1
        old, self.mask = self.slots, mask
        self.slots = [None] * (mask + 1)
        for key in old:
            if key is not None:
                self.slots[self._probe(key)] = key

    def order(self) -> list[int]:
        return ([0] if self.has_zero else []) + [key for key in self.slots if key is not None]


def _leading_zeros32(value: int) -> int:
    return 32 - value.bit_length()
