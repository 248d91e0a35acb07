"""The controller's partition state machine, as Kafka 3.9's ZkPartitionStateMachine.

Legal moves (controller_states.PartitionStatus) and what each does:
- NonExistent -> New: nothing but the state (the assignment is already in the context);
- New -> Online: the first online replica leads, every online replica is in the ISR, epochs 0; the state znode is
  created, and the ISR members get LeaderAndIsr with is_new (every live broker UpdateMetadata);
- Online/Offline -> Online: a leader is elected with the given strategy, the state znode is conditionally
  updated (re-read and re-decided on a version conflict), and the strategy's recipients get LeaderAndIsr;
- New/Online/Offline -> Offline and Offline -> NonExistent: the state only.
A move from any other state is refused and recorded as a failure; so is an election that finds no leader.
Each call is one request batch, sent at its end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kbroker.cluster.controller_context import ControllerContext, TopicPartition
from kbroker.cluster.controller_requests import RequestBatch
from kbroker.cluster.controller_states import PartitionStatus
from kbroker.cluster.controller_store import (
    ControllerMovedError,
    PartitionStateStore,
    StateChangeFailed,
    StoreWriteFailed,
    is_version_conflict,
)
from kbroker.cluster.elections import (
    ElectionResult,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassign,
    initial_leadership,
)
from kbroker.cluster.model import LeaderAndIsr, PartitionState

__all__ = ["CONTROLLED_SHUTDOWN", "OFFLINE", "PREFERRED", "REASSIGN", "ElectionStrategy", "PartitionStateMachine",
           "PartitionStatus", "StateChangeFailure"]

ElectionOutcome = LeaderAndIsr | Exception


@dataclass(frozen=True)
class ElectionStrategy:
    """Kafka's PartitionLeaderElectionStrategy: how a leader is picked when a partition goes (back) online."""

    kind: str                   # offline | reassign | preferred | controlled_shutdown
    allow_unclean: bool = False  # offline only: unclean even if the topic's config says no (admin UNCLEAN)

    def __str__(self) -> str:
        names = {"offline": f"OfflinePartitionLeaderElectionStrategy({str(self.allow_unclean).lower()})",
                 "reassign": "ReassignPartitionLeaderElectionStrategy",
                 "preferred": "PreferredReplicaPartitionLeaderElectionStrategy",
                 "controlled_shutdown": "ControlledShutdownPartitionLeaderElectionStrategy"}
        return names[self.kind]


OFFLINE = ElectionStrategy("offline")
REASSIGN = ElectionStrategy("reassign")
PREFERRED = ElectionStrategy("preferred")
CONTROLLED_SHUTDOWN = ElectionStrategy("controlled_shutdown")


@dataclass(frozen=True)
class StateChangeFailure:
    """A state change the controller gave up on (Kafka logs these to its state-change log)."""

    subject: object  # TopicPartition or PartitionAndReplica
    from_state: object
    to_state: object
    reason: str


def _sorted(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(dict.fromkeys(TopicPartition(*tp) for tp in partitions), key=lambda tp: (tp.topic, tp.partition))


class PartitionStateMachine:
    """Moves partitions between states, writing their state znodes and queuing LeaderAndIsr/UpdateMetadata."""

    def __init__(self, context: ControllerContext, store: PartitionStateStore, batch: RequestBatch,
                 unclean_enabled: Callable[[str], bool] = lambda topic: False,
                 leader_recovery_supported: bool = True,
                 failures: list[StateChangeFailure] | None = None) -> None:
        self.context = context
        self.store = store
        self.batch = batch
        self.unclean_enabled = unclean_enabled  # the topic's unclean.leader.election.enable
        self.leader_recovery_supported = leader_recovery_supported  # IBP >= 3.2 (KIP-704)
        self.failures = failures if failures is not None else []

    # ---- startup

    def startup(self) -> dict[TopicPartition, ElectionOutcome]:
        """On becoming controller: set each partition's state from its cached leadership, then bring new and
        offline partitions online."""
        self.initialize_partition_state()
        return self.trigger_online_partition_state_change()

    def initialize_partition_state(self) -> None:
        for tp in self.context.all_partitions():
            state = self.context.partition_leadership_info(tp)
            if state is None:
                self.context.put_partition_state(tp, PartitionStatus.NEW)
            elif self.context.is_replica_online(state.leader_and_isr.leader, tp):
                self.context.put_partition_state(tp, PartitionStatus.ONLINE)
            else:
                self.context.put_partition_state(tp, PartitionStatus.OFFLINE)

    def trigger_online_partition_state_change(self, topic: str | None = None) -> dict[TopicPartition, ElectionOutcome]:
        """Elect leaders (clean unless the topic allows unclean) for every new or offline partition, except those of
        topics queued for deletion."""
        partitions = self.context.partitions_in_states({PartitionStatus.OFFLINE, PartitionStatus.NEW}, topic)
        partitions = [tp for tp in partitions if not self.context.is_topic_queued_up_for_deletion(tp.topic)]
        return self.handle_state_changes(partitions, PartitionStatus.ONLINE, OFFLINE)

    # ---- transitions

    def handle_state_changes(self, partitions: Iterable[TopicPartition], target: PartitionStatus,
                             strategy: ElectionStrategy | None = None) -> dict[TopicPartition, ElectionOutcome]:
        """Move `partitions` to `target` in one request batch. For ONLINE, returns each election's new leadership or
        the exception that stopped it (partitions initialised from NEW are not in the result, as in Kafka)."""
        partitions = _sorted(partitions)
        if not partitions:
            return {}
        self.batch.new_batch()
        try:
            result = self._do_handle_state_changes(partitions, target, strategy)
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception as e:  # Kafka fails every partition of the call with the error
            self.batch.clear()
            return {tp: e for tp in partitions}
        self.batch.send(self.context.epoch)
        return result

    def _do_handle_state_changes(self, partitions: list[TopicPartition], target: PartitionStatus,
                                 strategy: ElectionStrategy | None) -> dict[TopicPartition, ElectionOutcome]:
        for tp in partitions:
            self.context.put_partition_state_if_absent(tp, PartitionStatus.NON_EXISTENT)
        valid = [tp for tp in partitions if self.context.partition_state(tp) in target.valid_previous]
        for tp in partitions:
            if tp not in valid:
                current = self.context.partition_state(tp)
                previous = ",".join(sorted(s.value for s in target.valid_previous))
                self._fail(tp, current, target, f"Partition {tp.topic}-{tp.partition} should be in one of "
                           f"{previous} states before moving to {target.value} state. Instead it is in "
                           f"{current.value} state")
        if target != PartitionStatus.ONLINE:
            for tp in valid:
                self.context.put_partition_state(tp, target)
            return {}
        uninitialized = [tp for tp in valid if self.context.partition_state(tp) == PartitionStatus.NEW]
        to_elect = [tp for tp in valid if self.context.partition_state(tp) in (PartitionStatus.OFFLINE,
                                                                                PartitionStatus.ONLINE)]
        for tp in self._initialize_leader_and_isr(uninitialized):
            self.context.put_partition_state(tp, PartitionStatus.ONLINE)
        if not to_elect:
            return {}
        if strategy is None:
            raise ValueError("Election strategy is a required field when the target state is OnlinePartition")
        results = self._elect_leaders(to_elect, strategy)
        for tp, outcome in results.items():
            if isinstance(outcome, LeaderAndIsr):
                self.context.put_partition_state(tp, PartitionStatus.ONLINE)
        return results

    # ---- New -> Online

    def _initialize_leader_and_isr(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Create the state znodes of new partitions; returns those created."""
        initial: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            leadership = initial_leadership(self.context.partition_replica_assignment(tp), self.context.liveness(tp))
            if leadership is None:
                replicas = ",".join(map(str, self.context.partition_replica_assignment(tp)))
                live = ",".join(map(str, sorted(self.context.live_broker_ids)))
                self._fail(tp, PartitionStatus.NEW, PartitionStatus.ONLINE,
                           f"Controller epoch {self.context.epoch} encountered error during state change of "
                           f"partition {tp.topic}-{tp.partition} from New to Online, assigned replicas are "
                           f"[{replicas}], live brokers are [{live}]. No assigned replica is alive.")
            else:
                initial[tp] = PartitionState(leadership, self.context.epoch)
        created = []
        for topic, states in _group_by_topic(initial).items():
            try:
                results = self.store.create_partition_states(topic, states, self.context.epoch_zk_version)
            except ControllerMovedError:
                raise
            except Exception as e:  # Kafka logs the failure for every partition written
                for partition in states:
                    self._fail(TopicPartition(topic, partition), PartitionStatus.NEW, PartitionStatus.ONLINE, str(e))
                continue
            for partition, state in states.items():
                tp = TopicPartition(topic, partition)
                outcome = results.get(partition)
                if outcome is None or not outcome.ok:
                    status = "no result" if outcome is None else outcome.status.name
                    self._fail(tp, PartitionStatus.NEW, PartitionStatus.ONLINE, status)
                    continue
                self.context.put_partition_leadership_info(tp, state)
                self.batch.add_leader_and_isr(state.leader_and_isr.isr, tp, state,
                                              self.context.partition_full_replica_assignment(tp), is_new=True)
                created.append(tp)
        return _sorted(created)

    # ---- elections

    def _elect_leaders(self, partitions: list[TopicPartition],
                       strategy: ElectionStrategy) -> dict[TopicPartition, ElectionOutcome]:
        """Elect and write until no write is left with a version conflict."""
        remaining = partitions
        finished: dict[TopicPartition, ElectionOutcome] = {}
        while remaining:
            done, remaining = self._try_elect_leaders(remaining, strategy)
            for tp, outcome in done.items():
                if isinstance(outcome, Exception):
                    self._fail(tp, self.context.partition_state(tp), PartitionStatus.ONLINE, str(outcome))
            finished.update(done)
        return finished

    def _try_elect_leaders(self, partitions: list[TopicPartition], strategy: ElectionStrategy
                           ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
        try:
            current = self.store.partition_states(partitions)
        except ControllerMovedError:
            raise
        except Exception as e:  # a failed read fails every partition, without retry
            return {tp: e for tp in partitions}, []
        failed: dict[TopicPartition, ElectionOutcome] = {}
        elected: dict[TopicPartition, ElectionResult] = {}
        for tp in partitions:
            state = current.get(tp)
            if state is None:
                failed[tp] = StateChangeFailed(f"LeaderAndIsr information doesn't exist for partition "
                                               f"{tp.topic}-{tp.partition} in "
                                               f"{self.context.partition_state(tp).value} state")
            elif state.controller_epoch > self.context.epoch:
                failed[tp] = StateChangeFailed(
                    f"Aborted leader election for partition {tp.topic}-{tp.partition} since the LeaderAndIsr path "
                    f"was already written by another controller. This probably means that the current controller "
                    f"went through a soft failure and another controller was elected with epoch "
                    f"{state.controller_epoch}.")
            else:
                result = self._elect(tp, state.leader_and_isr, strategy)
                if result.leader_and_isr is None:
                    failed[tp] = StateChangeFailed(f"Failed to elect leader for partition {tp.topic}-{tp.partition} "
                                                   f"under strategy {strategy}")
                else:
                    elected[tp] = result
        done, retry = self._write_elected(elected)
        done.update(failed)
        return done, retry

    def _elect(self, tp: TopicPartition, current: LeaderAndIsr, strategy: ElectionStrategy) -> ElectionResult:
        liveness = self.context.liveness(tp)
        assignment = self.context.partition_full_replica_assignment(tp)
        if strategy.kind == "offline":
            unclean = strategy.allow_unclean or self.unclean_enabled(tp.topic)
            return elect_offline(assignment.replicas, current, liveness, unclean, self.leader_recovery_supported)
        if strategy.kind == "reassign":
            return elect_reassign(assignment, current, liveness)
        if strategy.kind == "preferred":
            return elect_preferred(assignment.replicas, current, liveness)
        return elect_controlled_shutdown(assignment.replicas, current, liveness)

    def _write_elected(self, elected: Mapping[TopicPartition, ElectionResult]
                       ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
        """Conditionally write each new leadership; cache and announce those written, return the conflicts."""
        done: dict[TopicPartition, ElectionOutcome] = {}
        retry: list[TopicPartition] = []
        states = {tp: PartitionState(r.leader_and_isr, self.context.epoch) for tp, r in elected.items()}
        for topic, by_partition in _group_by_topic(states).items():
            results = self.store.update_partition_states(topic, by_partition, self.context.epoch_zk_version)
            for partition, state in by_partition.items():
                tp = TopicPartition(topic, partition)
                outcome = results.get(partition)
                if outcome is not None and outcome.ok:
                    written = PartitionState(replace(state.leader_and_isr, partition_epoch=outcome.version),
                                             self.context.epoch)
                    self.context.put_partition_leadership_info(tp, written)
                    self.batch.add_leader_and_isr(elected[tp].recipients, tp, written,
                                                  self.context.partition_full_replica_assignment(tp), is_new=False)
                    done[tp] = written.leader_and_isr
                elif outcome is not None and is_version_conflict(outcome):
                    retry.append(tp)
                else:
                    done[tp] = StoreWriteFailed("no result" if outcome is None else outcome.status.name)
        return done, retry

    def _fail(self, tp: TopicPartition, current: PartitionStatus, target: PartitionStatus, reason: str) -> None:
        self.failures.append(StateChangeFailure(tp, current, target, reason))


def _group_by_topic(states: Mapping[TopicPartition, PartitionState]) -> dict[str, dict[int, PartitionState]]:
    grouped: dict[str, dict[int, PartitionState]] = {}
    for tp in _sorted(states):
        grouped.setdefault(tp.topic, {})[tp.partition] = states[tp]
    return grouped
