"""An in-memory ControllerStore: the znodes the controller writes, kept in dicts, with ZooKeeper's version rules.

This is a test double of the store interface in controller_store (acceptable because cluster/zk.py, the real
implementation, is proved against a real ZooKeeper in its own tests). It enforces what the controller's logic
relies on: every write is fenced on the controller epoch znode's version (ControllerMovedError otherwise), a
partition state update must name the znode's current version (VERSION_CONFLICT otherwise), creating an existing
state is NODE_EXISTS, updating a missing one NO_NODE, and versions count up from 0 as ZooKeeper's do.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kbroker.cluster.controller_store import ControllerMovedError
from kbroker.cluster.model import PartitionState, TopicAssignment


class WriteStatus(enum.Enum):
    OK = "ok"
    VERSION_CONFLICT = "version conflict"
    NO_NODE = "no node"
    NODE_EXISTS = "node exists"


@dataclass(frozen=True)
class WriteResult:
    status: WriteStatus
    version: int = -1

    @property
    def ok(self) -> bool:
        return self.status is WriteStatus.OK


class MemoryStore:
    """Partition states, topic assignments and deletion marks, versioned like znodes."""

    def __init__(self, controller_epoch_zk_version: int = 0) -> None:
        self.controller_epoch_zk_version = controller_epoch_zk_version
        self.states: dict[tuple[str, int], tuple[PartitionState, int]] = {}  # state without version, version
        self.topics: dict[str, tuple[TopicAssignment, int]] = {}
        self.deletion_marks: set[str] = set()
        self.reassignment: dict[tuple[str, int], tuple[int, ...]] | None = None  # /admin/reassign_partitions

    # ---- reads

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        found = {}
        for tp in partitions:
            key = (tp[0], tp[1])
            if key in self.states:
                found[tp] = self.state(*key)
        return found

    def state(self, topic: str, partition: int) -> PartitionState | None:
        """The state as read: its LeaderAndIsr's partition_epoch is the znode version."""
        if (topic, partition) not in self.states:
            return None
        state, version = self.states[(topic, partition)]
        return replace(state, leader_and_isr=replace(state.leader_and_isr, partition_epoch=version))

    def assignment(self, topic: str) -> TopicAssignment | None:
        return self.topics[topic][0] if topic in self.topics else None

    # ---- controller writes (fenced)

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> dict[int, WriteResult]:
        self._fence(controller_zk_version)
        results = {}
        for partition, state in states.items():
            if (topic, partition) in self.states:
                results[partition] = WriteResult(WriteStatus.NODE_EXISTS)
            else:
                self.states[(topic, partition)] = (state, 0)
                results[partition] = WriteResult(WriteStatus.OK, 0)
        return results

    def update_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> dict[int, WriteResult]:
        self._fence(controller_zk_version)
        return {p: self._update(topic, p, s) for p, s in states.items()}

    def set_topic_assignment(self, assignment: TopicAssignment, controller_zk_version: int) -> WriteResult:
        self._fence(controller_zk_version)
        if assignment.name not in self.topics:
            return WriteResult(WriteStatus.NO_NODE)
        version = self.topics[assignment.name][1] + 1
        self.topics[assignment.name] = (assignment, version)
        return WriteResult(WriteStatus.OK, version)

    def delete_topic_znodes(self, topic: str, controller_zk_version: int) -> None:
        self._fence(controller_zk_version)
        self.topics.pop(topic, None)
        for key in [k for k in self.states if k[0] == topic]:
            del self.states[key]
        self.deletion_marks.discard(topic)

    def delete_topic_deletions(self, topics: Sequence[str], controller_zk_version: int) -> None:
        self._fence(controller_zk_version)
        self.deletion_marks.difference_update(topics)

    def partition_reassignment(self) -> dict[tuple[str, int], tuple[int, ...]] | None:
        return None if self.reassignment is None else dict(self.reassignment)

    def set_partition_reassignment(self, targets: Mapping[tuple[str, int], Sequence[int]],
                                   controller_zk_version: int) -> None:
        self._fence(controller_zk_version)
        self.reassignment = {tp: tuple(replicas) for tp, replicas in targets.items()}

    def delete_partition_reassignment(self, controller_zk_version: int) -> None:
        self._fence(controller_zk_version)
        self.reassignment = None

    # ---- what others write (admin tools, partition leaders)

    def create_topic(self, assignment: TopicAssignment) -> None:
        self.topics[assignment.name] = (assignment, 0)

    def leader_writes(self, topic: str, partition: int, state: PartitionState) -> WriteResult:
        """A partition leader's own conditional write (pre-AlterPartition ISR changes, or a racing writer)."""
        return self._update(topic, partition, state)

    def _update(self, topic: str, partition: int, state: PartitionState) -> WriteResult:
        current = self.states.get((topic, partition))
        if current is None:
            return WriteResult(WriteStatus.NO_NODE)
        if state.leader_and_isr.partition_epoch != current[1]:
            return WriteResult(WriteStatus.VERSION_CONFLICT)
        self.states[(topic, partition)] = (state, current[1] + 1)
        return WriteResult(WriteStatus.OK, current[1] + 1)

    def _fence(self, controller_zk_version: int) -> None:
        if controller_zk_version != self.controller_epoch_zk_version:
            raise ControllerMovedError(f"controller epoch znode is at version {self.controller_epoch_zk_version}, "
                                       f"not {controller_zk_version}")
