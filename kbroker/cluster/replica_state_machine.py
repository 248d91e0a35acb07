"""The controller's replica state machine, as Kafka 3.9's ZkReplicaStateMachine.

Legal moves (controller_states.ReplicaStatus) and what each does:
- NonExistent -> New: the replica gets LeaderAndIsr (is_new) with the partition's current leadership, unless it is
  that leadership's leader (refused);
- New -> Online: the replica joins the assignment if it is missing from it; nothing is sent;
- Online/Offline/DeletionIneligible -> Online: the replica gets LeaderAndIsr with the current leadership;
- any of New/Online/Offline/DeletionIneligible -> Offline: StopReplica (no delete) to the replica, the replica
  leaves the ISR in ZooKeeper (leader -1 if it led, the ISR kept when it was the only member, leader epoch + 1),
  and the other replicas get LeaderAndIsr (not for topics queued for deletion);
- Offline -> DeletionStarted: StopReplica with delete;
- DeletionStarted -> DeletionSuccessful, Offline/DeletionStarted -> DeletionIneligible: the state only;
- DeletionSuccessful -> NonExistent: the replica leaves the assignment and the state is forgotten.
Each call is one request batch, sent at its end; replicas are handled broker by broker.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.cluster.controller_context import ControllerContext, PartitionAndReplica, TopicPartition, remove_replica
from kbroker.cluster.controller_requests import RequestBatch
from kbroker.cluster.controller_states import ReplicaStatus
from kbroker.cluster.controller_store import (
    ControllerMovedError,
    PartitionStateStore,
    StateChangeFailed,
    StoreWriteFailed,
    is_version_conflict,
)
from kbroker.cluster.model import NO_LEADER, LeaderAndIsr, PartitionState, ReplicaAssignment
from kbroker.cluster.partition_state_machine import StateChangeFailure

__all__ = ["ReplicaStateMachine", "ReplicaStatus"]


def _sorted(replicas: Iterable[PartitionAndReplica]) -> list[PartitionAndReplica]:
    return sorted(dict.fromkeys(replicas), key=lambda r: (r.replica, r.topic_partition.topic,
                                                          r.topic_partition.partition))


class ReplicaStateMachine:
    """Moves replicas between states, shrinking ISRs in ZooKeeper and queuing LeaderAndIsr/StopReplica."""

    def __init__(self, context: ControllerContext, store: PartitionStateStore, batch: RequestBatch,
                 failures: list[StateChangeFailure] | None = None) -> None:
        self.context = context
        self.store = store
        self.batch = batch
        self.failures = failures if failures is not None else []

    def startup(self) -> None:
        """On becoming controller: replicas on live brokers are online, the rest ineligible for deletion (a broker
        may have died during failover); then online ones get LeaderAndIsr and offline ones the Offline move."""
        for tp in self.context.all_partitions():
            for replica in self.context.partition_replica_assignment(tp):
                online = self.context.is_replica_online(replica, tp)
                state = ReplicaStatus.ONLINE if online else ReplicaStatus.DELETION_INELIGIBLE
                self.context.put_replica_state(PartitionAndReplica(tp, replica), state)
        online, offline = self.context.online_and_offline_replicas()
        self.handle_state_changes(online, ReplicaStatus.ONLINE)
        self.handle_state_changes(offline, ReplicaStatus.OFFLINE)

    def handle_state_changes(self, replicas: Iterable[PartitionAndReplica], target: ReplicaStatus) -> None:
        replicas = _sorted(replicas)
        if not replicas:
            return
        self.batch.new_batch()
        try:
            by_broker: dict[int, list[PartitionAndReplica]] = {}
            for replica in replicas:
                by_broker.setdefault(replica.replica, []).append(replica)
            for broker_id, on_broker in by_broker.items():
                self._do_handle_state_changes(broker_id, on_broker, target)
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception as e:  # Kafka logs and drops the whole call
            self.batch.clear()
            self.failures.append(StateChangeFailure(None, None, target, f"Error while moving some replicas to "
                                                    f"{target.value} state: {e}"))
            return
        self.batch.send(self.context.epoch)

    def _do_handle_state_changes(self, broker_id: int, replicas: list[PartitionAndReplica],
                                 target: ReplicaStatus) -> None:
        for replica in replicas:
            self.context.put_replica_state_if_absent(replica, ReplicaStatus.NON_EXISTENT)
        valid = []
        for replica in replicas:
            current = self.context.replica_state(replica)
            if current in target.valid_previous:
                valid.append(replica)
            else:
                previous = ",".join(sorted(s.value for s in target.valid_previous))
                self._fail(replica, current, target, f"Replica {replica.replica} for partition "
                           f"{_name(replica.topic_partition)} should be in the {previous} states before moving to "
                           f"{target.value} state. Instead it is in {current.value} state")
        handler = {
            ReplicaStatus.NEW: self._to_new,
            ReplicaStatus.ONLINE: self._to_online,
            ReplicaStatus.OFFLINE: self._to_offline,
            ReplicaStatus.DELETION_STARTED: self._to_deletion_started,
            ReplicaStatus.NON_EXISTENT: self._to_non_existent,
        }.get(target)
        if handler is None:  # DeletionSuccessful, DeletionIneligible: the state only
            for replica in valid:
                self.context.put_replica_state(replica, target)
        else:
            handler(broker_id, valid)

    # ---- the moves

    def _to_new(self, broker_id: int, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            tp = replica.topic_partition
            state = self.context.partition_leadership_info(tp)
            if state is not None and state.leader_and_isr.leader == broker_id:
                self._fail(replica, self.context.replica_state(replica), ReplicaStatus.OFFLINE,
                           f"Replica {broker_id} for partition {_name(tp)} cannot be moved to NewReplica state as "
                           f"it is being requested to become leader")
                continue
            if state is not None:
                self.batch.add_leader_and_isr([broker_id], tp, state,
                                              self.context.partition_full_replica_assignment(tp), is_new=True)
            self.context.put_replica_state(replica, ReplicaStatus.NEW)

    def _to_online(self, broker_id: int, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            tp = replica.topic_partition
            if self.context.replica_state(replica) == ReplicaStatus.NEW:
                assignment = self.context.partition_full_replica_assignment(tp)
                if broker_id not in assignment.replicas:
                    self.context.update_partition_full_replica_assignment(
                        tp, ReplicaAssignment((*assignment.replicas, broker_id), assignment.adding,
                                              assignment.removing))
            else:
                state = self.context.partition_leadership_info(tp)
                if state is not None:
                    self.batch.add_leader_and_isr([broker_id], tp, state,
                                                  self.context.partition_full_replica_assignment(tp), is_new=False)
            self.context.put_replica_state(replica, ReplicaStatus.ONLINE)

    def _to_offline(self, broker_id: int, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            self.batch.add_stop_replica([broker_id], replica.topic_partition, delete_partition=False)
        with_leadership = [r for r in replicas
                           if self.context.partition_leadership_info(r.topic_partition) is not None]
        without_leadership = [r for r in replicas if r not in with_leadership]
        updated = self._remove_from_isr(broker_id, [r.topic_partition for r in with_leadership])
        for tp, state in updated.items():
            if not self.context.is_topic_queued_up_for_deletion(tp.topic):
                recipients = [r for r in self.context.partition_replica_assignment(tp) if r != broker_id]
                self.batch.add_leader_and_isr(recipients, tp, state,
                                              self.context.partition_full_replica_assignment(tp), is_new=False)
            self.context.put_replica_state(PartitionAndReplica(tp, broker_id), ReplicaStatus.OFFLINE)
        for replica in without_leadership:
            self.batch.add_update_metadata(self.context.live_or_shutting_down_broker_ids, [replica.topic_partition])
            self.context.put_replica_state(replica, ReplicaStatus.OFFLINE)

    def _to_deletion_started(self, broker_id: int, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            self.context.put_replica_state(replica, ReplicaStatus.DELETION_STARTED)
            self.batch.add_stop_replica([broker_id], replica.topic_partition, delete_partition=True)

    def _to_non_existent(self, broker_id: int, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            tp = replica.topic_partition
            self.context.update_partition_full_replica_assignment(
                tp, remove_replica(self.context.partition_full_replica_assignment(tp), broker_id))
            self.context.remove_replica_state(replica)

    # ---- ISR removal

    def _remove_from_isr(self, broker_id: int, partitions: list[TopicPartition]) -> dict[TopicPartition,
                                                                                         PartitionState]:
        """Take the replica out of each partition's ISR in ZooKeeper, retrying version conflicts; returns the
        leadership now cached for each partition that succeeded (also those whose ISR did not hold it)."""
        results: dict[TopicPartition, PartitionState] = {}
        remaining = partitions
        while remaining:
            done, remaining = self._try_remove_from_isr(broker_id, remaining)
            for tp, outcome in done.items():
                if isinstance(outcome, Exception):
                    replica = PartitionAndReplica(tp, broker_id)
                    self._fail(replica, self.context.replica_state(replica), ReplicaStatus.OFFLINE, str(outcome))
                else:
                    results[tp] = outcome
        return results

    def _try_remove_from_isr(self, broker_id: int, partitions: list[TopicPartition]
                             ) -> tuple[dict[TopicPartition, PartitionState | Exception], list[TopicPartition]]:
        current, missing, done = self._read_states(partitions)
        shrunk: dict[str, dict[int, PartitionState]] = {}
        for tp, lai in current.items():
            if broker_id in lai.isr:
                leader = NO_LEADER if lai.leader == broker_id else lai.leader
                isr = lai.isr if len(lai.isr) == 1 else tuple(r for r in lai.isr if r != broker_id)
                new = LeaderAndIsr(leader, lai.leader_epoch + 1, isr, lai.leader_recovery_state, lai.partition_epoch)
                shrunk.setdefault(tp.topic, {})[tp.partition] = PartitionState(new, self.context.epoch)
            else:
                done[tp] = self._cache(tp, lai)
        retry: list[TopicPartition] = []
        for topic, states in shrunk.items():
            outcomes = self.store.update_partition_states(topic, states, self.context.epoch_zk_version)
            for partition, state in states.items():
                tp, outcome = TopicPartition(topic, partition), outcomes.get(partition)
                if outcome is not None and outcome.ok:
                    lai = state.leader_and_isr
                    done[tp] = self._cache(tp, LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr,
                                                            lai.leader_recovery_state, outcome.version))
                elif outcome is not None and is_version_conflict(outcome):
                    retry.append(tp)
                else:
                    done[tp] = StoreWriteFailed("no result" if outcome is None else outcome.status.name)
        for tp in missing:
            if not self.context.is_topic_queued_up_for_deletion(tp.topic):
                done[tp] = StateChangeFailed(f"Failed to change state of replica {broker_id} for partition "
                                             f"{_name(tp)} since the leader and isr path in zookeeper is empty")
        return done, retry

    def _read_states(self, partitions: list[TopicPartition]) -> tuple[
            dict[TopicPartition, LeaderAndIsr], list[TopicPartition], dict[TopicPartition, PartitionState | Exception]]:
        """The current states; partitions with none; and failures (a read error, or a newer controller's write)."""
        try:
            read = self.store.partition_states(partitions)
        except ControllerMovedError:
            raise
        except Exception as e:  # a failed read fails every partition
            return {}, [], {tp: e for tp in partitions}
        current, missing, failed = {}, [], {}
        for tp in partitions:
            state = read.get(tp)
            if state is None:
                missing.append(tp)
            elif state.controller_epoch > self.context.epoch:
                failed[tp] = StateChangeFailed(
                    f"Leader and isr path written by another controller. This probably means the current controller "
                    f"with epoch {self.context.epoch} went through a soft failure and another controller was elected "
                    f"with epoch {state.controller_epoch}. Aborting state change by this controller")
            else:
                current[tp] = state.leader_and_isr
        return current, missing, failed

    def _cache(self, tp: TopicPartition, lai: LeaderAndIsr) -> PartitionState:
        state = PartitionState(lai, self.context.epoch)
        self.context.put_partition_leadership_info(tp, state)
        return state

    def _fail(self, replica: PartitionAndReplica, current: ReplicaStatus, target: ReplicaStatus, reason: str) -> None:
        self.failures.append(StateChangeFailure(replica, current, target, reason))


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
