"""Topic deletion as Kafka 3.9's TopicDeletionManager runs it.

A topic queued for deletion (/admin/delete_topics) is deleted in steps: its partitions go Offline then
NonExistent, every broker gets UpdateMetadata announcing leader -2, live replicas go Offline (StopReplica, out of
the ISR) then DeletionStarted (StopReplica with delete); each broker's StopReplica answer moves its replicas to
DeletionSuccessful or DeletionIneligible. When all of a topic's replicas are DeletionSuccessful they become
NonExistent and the topic's znodes are deleted. Replicas on dead brokers, and a reassignment in progress, make the
topic ineligible; a broker coming back, or the reassignment finishing, resumes it; ineligible replicas are retried
from Offline.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kbroker.cluster.controller_context import PartitionAndReplica
from kbroker.cluster.controller_states import PartitionStatus, ReplicaStatus

if TYPE_CHECKING:
    from kbroker.cluster.controller_core import ControllerCore


class TopicDeletionManager:
    """Drives queued topic deletions over the controller's state machines."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        self.context = core.context
        self.enabled = core.config.delete_topic_enable

    def init(self, to_delete: Iterable[str], ineligible: Iterable[str]) -> None:
        """On failover: queue what ZooKeeper lists (or drop the marks when deletion is disabled)."""
        to_delete = sorted(set(to_delete))
        if self.enabled:
            self.context.queue_topic_deletion(to_delete)
            self.context.topics_ineligible_for_deletion |= set(ineligible) & self.context.topics_to_be_deleted
        elif to_delete:
            self.core.store.delete_topic_deletions(to_delete, self.context.epoch_zk_version)

    def try_topic_deletion(self) -> None:
        if self.enabled:
            self._resume_deletions()

    def enqueue_topics_for_deletion(self, topics: Iterable[str]) -> None:
        if self.enabled:
            self.context.queue_topic_deletion(topics)
            self._resume_deletions()

    def resume_deletion_for_topics(self, topics: Iterable[str]) -> None:
        if not self.enabled:
            return
        resumed = set(topics) & self.context.topics_to_be_deleted
        if resumed:
            self.context.topics_ineligible_for_deletion -= resumed
            self._resume_deletions()

    def fail_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        if not self.enabled:
            return
        failed = [r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)]
        if failed:
            self.core.replica_state_machine.handle_state_changes(failed, ReplicaStatus.DELETION_INELIGIBLE)
            self.mark_topic_ineligible_for_deletion({r.topic for r in failed})
            self._resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: Iterable[str]) -> None:
        if self.enabled:
            self.context.topics_ineligible_for_deletion |= self.context.topics_to_be_deleted & set(topics)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return self.enabled and self.context.is_topic_queued_up_for_deletion(topic)

    def complete_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        deleted = [r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)]
        self.core.replica_state_machine.handle_state_changes(deleted, ReplicaStatus.DELETION_SUCCESSFUL)
        self._resume_deletions()

    # ---- the steps

    def _is_ineligible(self, topic: str) -> bool:
        return not self.enabled or topic in self.context.topics_ineligible_for_deletion

    def _is_in_progress(self, topic: str) -> bool:
        return self.enabled and self.context.is_any_replica_in_state(topic, ReplicaStatus.DELETION_STARTED)

    def _is_eligible(self, topic: str) -> bool:
        return (self.context.is_topic_queued_up_for_deletion(topic) and not self._is_in_progress(topic)
                and not self._is_ineligible(topic))

    def _resume_deletions(self) -> None:
        retry, eligible = [], []
        for topic in sorted(self.context.topics_to_be_deleted):
            if self.context.are_all_replicas_in_state(topic, ReplicaStatus.DELETION_SUCCESSFUL):
                self._complete_delete_topic(topic)
            elif not self.context.is_any_replica_in_state(topic, ReplicaStatus.DELETION_STARTED) and \
                    self.context.is_any_replica_in_state(topic, ReplicaStatus.DELETION_INELIGIBLE):
                retry.append(topic)
            if self._is_eligible(topic):
                eligible.append(topic)
        if retry:
            failed = [r for t in retry for r in self.context.replicas_in_state(t, ReplicaStatus.DELETION_INELIGIBLE)]
            self.core.replica_state_machine.handle_state_changes(failed, ReplicaStatus.OFFLINE)
        if eligible:
            self._on_topic_deletion(eligible)

    def _complete_delete_topic(self, topic: str) -> None:
        deleted = self.context.replicas_in_state(topic, ReplicaStatus.DELETION_SUCCESSFUL)
        self.core.replica_state_machine.handle_state_changes(deleted, ReplicaStatus.NON_EXISTENT)
        self.core.store.delete_topic_znodes(topic, self.context.epoch_zk_version)
        self.context.remove_topic(topic)

    def _on_topic_deletion(self, topics: list[str]) -> None:
        unseen = [t for t in topics if t not in self.context.topics_with_deletion_started]
        if unseen:
            partitions = [tp for t in unseen for tp in self.context.partitions_for_topic(t)]
            psm = self.core.partition_state_machine
            psm.handle_state_changes(partitions, PartitionStatus.OFFLINE)
            psm.handle_state_changes(partitions, PartitionStatus.NON_EXISTENT)
            self.context.begin_topic_deletion(unseen)
        self.core.send_update_metadata_to_all([tp for t in topics for tp in self.context.partitions_for_topic(t)])
        self._on_partition_deletion(topics)

    def _on_partition_deletion(self, topics: list[str]) -> None:
        dead, retry, ineligible = [], [], set()
        for topic in topics:
            replicas = self.context.replicas_for_topic(topic)
            alive = [r for r in replicas if self.context.is_replica_online(r.replica, r.topic_partition)]
            gone = [r for r in replicas if r not in alive]
            deleted = set(self.context.replicas_in_state(topic, ReplicaStatus.DELETION_SUCCESSFUL))
            dead += gone
            retry += [r for r in alive if r not in deleted]
            if gone:
                ineligible.add(topic)
        rsm = self.core.replica_state_machine
        rsm.handle_state_changes(dead, ReplicaStatus.DELETION_INELIGIBLE)
        rsm.handle_state_changes(retry, ReplicaStatus.OFFLINE)
        rsm.handle_state_changes(retry, ReplicaStatus.DELETION_STARTED)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible)
