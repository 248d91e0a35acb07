"""The ZooKeeper writes and reads the controller's decision logic needs, as an interface.

The state machines and event handlers call these few methods; cluster/zk.py's ZkClient has them under the same
names and shapes (partition states keyed by (topic, partition), WriteResult with `ok`, `status`, `version`), so it
can be passed in as it is. Every write is fenced on the controller epoch znode's version: a deposed controller's
write must raise ControllerMovedError (or a subclass), which the state machines let through so the controller can
resign, as Kafka's ControllerMovedException does.

A partition state write is conditional on the znode version the LeaderAndIsr carries (`partition_epoch`): a
VERSION_CONFLICT means a leader changed the ISR meanwhile, and the controller re-reads and decides again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.cluster.model import PartitionState, TopicAssignment


class ControllerMovedError(RuntimeError):
    """A write was fenced: /controller_epoch moved on, another broker is controller now."""


class StateChangeFailed(Exception):
    """A state change Kafka gives up on for one partition (Kafka's StateChangeFailedException)."""


class StoreWriteFailed(Exception):
    """A write failed for a reason other than a version conflict (Kafka's KeeperException, e.g. NONODE)."""


class WriteOutcome(Protocol):
    """The result of one conditional write (zk.py's WriteResult has this shape)."""

    @property
    def ok(self) -> bool: ...

    @property
    def status(self) -> enum.Enum: ...

    @property
    def version(self) -> int: ...


def is_version_conflict(outcome: WriteOutcome) -> bool:
    """BADVERSION: the znode changed since it was read; the writer retries with a fresh read."""
    return outcome.status.name == "VERSION_CONFLICT"


class PartitionStateStore(Protocol):
    """What the partition and replica state machines read and write: /brokers/topics/<t>/partitions/<p>/state."""

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> Mapping[tuple[str, int], PartitionState]:
        """The states that exist (missing partitions are left out); each LeaderAndIsr's `partition_epoch` is the
        znode's version."""
        ...

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> Mapping[int, WriteOutcome]:
        """A new partition's first state; NODE_EXISTS for one that already has a state."""
        ...

    def update_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> Mapping[int, WriteOutcome]:
        """Conditional writes on each LeaderAndIsr's `partition_epoch`; `version` of an OK result is the new one."""
        ...


class ControllerStore(PartitionStateStore, Protocol):
    """Adds what the event handlers write besides partition states."""

    def set_topic_assignment(self, assignment: TopicAssignment, controller_zk_version: int) -> WriteOutcome:
        """Replace /brokers/topics/<t> (a reassignment's phases)."""
        ...

    def delete_topic_znodes(self, topic: str, controller_zk_version: int) -> None:
        """A deletion's last step: the topic's tree, its config, its /admin/delete_topics mark."""
        ...

    def delete_topic_deletions(self, topics: Sequence[str], controller_zk_version: int) -> None:
        """Drop /admin/delete_topics marks the controller will not act on (unknown topics, deletion disabled)."""
        ...

    def partition_reassignment(self) -> Mapping[tuple[str, int], tuple[int, ...]] | None:
        """/admin/reassign_partitions: the target replicas of each partition submitted through ZooKeeper; None
        without the znode, empty for one that lists nothing (or cannot be read)."""
        ...

    def set_partition_reassignment(self, targets: Mapping[tuple[str, int], Sequence[int]],
                                   controller_zk_version: int) -> None:
        """Rewrite /admin/reassign_partitions with the partitions still to move."""
        ...

    def delete_partition_reassignment(self, controller_zk_version: int) -> None:
        """Remove /admin/reassign_partitions once none of its partitions is left to move."""
        ...


@dataclass(frozen=True)
class StoreWrite:
    """One write the controller made, as the event's output records it: what, where, and whether it landed.

    `op` is the store method's name (`topic` is empty for /admin/reassign_partitions writes); `states` holds
    partition states (by partition), `assignment` a topic assignment; `results` maps each partition to its write
    status name (for one-shot writes, key -1).
    """

    op: str
    topic: str
    states: Mapping[int, PartitionState] = field(default_factory=dict)
    assignment: TopicAssignment | None = None
    results: Mapping[int, str] = field(default_factory=dict)


class RecordingStore:
    """Forwards to a store and keeps the list of writes made, so each event can report them."""

    def __init__(self, store: ControllerStore) -> None:
        self.store = store
        self.writes: list[StoreWrite] = []

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> Mapping[tuple[str, int], PartitionState]:
        return self.store.partition_states(partitions)

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> Mapping[int, WriteOutcome]:
        results = self.store.create_partition_states(topic, states, controller_zk_version)
        self._record("create_partition_states", topic, states=states, results=results)
        return results

    def update_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> Mapping[int, WriteOutcome]:
        results = self.store.update_partition_states(topic, states, controller_zk_version)
        self._record("update_partition_states", topic, states=states, results=results)
        return results

    def set_topic_assignment(self, assignment: TopicAssignment, controller_zk_version: int) -> WriteOutcome:
        result = self.store.set_topic_assignment(assignment, controller_zk_version)
        self._record("set_topic_assignment", assignment.name, assignment=assignment, results={-1: result})
        return result

    def delete_topic_znodes(self, topic: str, controller_zk_version: int) -> None:
        self.store.delete_topic_znodes(topic, controller_zk_version)
        self.writes.append(StoreWrite("delete_topic_znodes", topic))

    def delete_topic_deletions(self, topics: Sequence[str], controller_zk_version: int) -> None:
        self.store.delete_topic_deletions(topics, controller_zk_version)
        for topic in topics:
            self.writes.append(StoreWrite("delete_topic_deletions", topic))

    def partition_reassignment(self) -> Mapping[tuple[str, int], tuple[int, ...]] | None:
        return self.store.partition_reassignment()

    def set_partition_reassignment(self, targets: Mapping[tuple[str, int], Sequence[int]],
                                   controller_zk_version: int) -> None:
        self.store.set_partition_reassignment(targets, controller_zk_version)
        self.writes.append(StoreWrite("set_partition_reassignment", ""))

    def delete_partition_reassignment(self, controller_zk_version: int) -> None:
        self.store.delete_partition_reassignment(controller_zk_version)
        self.writes.append(StoreWrite("delete_partition_reassignment", ""))

    def _record(self, op: str, topic: str, *, states: Mapping[int, PartitionState] | None = None,
                assignment: TopicAssignment | None = None, results: Mapping[int, WriteOutcome]) -> None:
        self.writes.append(StoreWrite(op, topic, dict(states or {}), assignment,
                                      {p: r.status.name for p, r in results.items()}))

    def take(self) -> list[StoreWrite]:
        writes, self.writes = self.writes, []
        return writes
