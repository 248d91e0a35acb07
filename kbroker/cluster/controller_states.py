"""The states the ZooKeeper-mode controller tracks for partitions and replicas, and which moves between them are legal
(Kafka 3.9's PartitionState and ReplicaState objects in PartitionStateMachine.scala / ReplicaStateMachine.scala).

Kept apart from the state machines so the controller context can hold them without importing the machines.
"""

from __future__ import annotations

from enum import Enum


class PartitionStatus(Enum):
    """A partition's lifecycle state; values are Kafka's names, as its state-change log prints them."""

    NEW = "NewPartition"                   # replicas assigned, no leader yet
    ONLINE = "OnlinePartition"             # a leader was elected
    OFFLINE = "OfflinePartition"           # the leader died
    NON_EXISTENT = "NonExistentPartition"  # never created, or deleted

    @property
    def valid_previous(self) -> frozenset[PartitionStatus]:
        return _PARTITION_PREVIOUS[self]


_PARTITION_PREVIOUS = {
    PartitionStatus.NEW: frozenset({PartitionStatus.NON_EXISTENT}),
    PartitionStatus.ONLINE: frozenset({PartitionStatus.NEW, PartitionStatus.ONLINE, PartitionStatus.OFFLINE}),
    PartitionStatus.OFFLINE: frozenset({PartitionStatus.NEW, PartitionStatus.ONLINE, PartitionStatus.OFFLINE}),
    PartitionStatus.NON_EXISTENT: frozenset({PartitionStatus.OFFLINE}),
}


class ReplicaStatus(Enum):
    """One replica's lifecycle state (a partition on one broker); values are Kafka's names."""

    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    @property
    def valid_previous(self) -> frozenset[ReplicaStatus]:
        return _REPLICA_PREVIOUS[self]


_R = ReplicaStatus
_REPLICA_PREVIOUS = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}
