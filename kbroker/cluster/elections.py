"""Partition leader elections as Kafka 3.9's ZooKeeper controller runs them (Election and
PartitionLeaderElectionAlgorithms, and the first leadership PartitionStateMachine gives a new partition).

Pure functions, no I/O. Each returns an ElectionResult: the LeaderAndIsr to write to the partition's state znode
(None when Kafka elects nobody) and the brokers Kafka sends the LeaderAndIsr request to. The result keeps the
partition epoch it was given: the conditional znode write bumps it, so the ZooKeeper layer sets it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kbroker.cluster.model import RECOVERED, RECOVERING, LeaderAndIsr, ReplicaAssignment


@dataclass(frozen=True)
class ReplicaLiveness:
    """What the controller knows about one partition's possible replicas (Kafka's ControllerContext view).

    A replica is online when its broker is registered, is not shutting down, and the log dir holding this
    partition is not offline on it; controlled shutdown also counts replicas on shutting-down brokers.
    """

    registered: frozenset[int]                   # brokers with a /brokers/ids znode
    shutting_down: frozenset[int] = frozenset()  # brokers in controlled shutdown (still registered)
    offline_dirs: frozenset[int] = frozenset()   # brokers whose log dir for this partition is offline

    @classmethod
    def of(cls, registered: Iterable[int], shutting_down: Iterable[int] = (),
           offline_dirs: Iterable[int] = ()) -> ReplicaLiveness:
        return cls(frozenset(registered), frozenset(shutting_down), frozenset(offline_dirs))

    def online(self, broker: int, include_shutting_down: bool = False) -> bool:
        up = broker in self.registered and (include_shutting_down or broker not in self.shutting_down)
        return up and broker not in self.offline_dirs


@dataclass(frozen=True)
class ElectionResult:
    """Kafka's ElectionResult: the new leadership, or None, and who receives the LeaderAndIsr request."""

    leader_and_isr: LeaderAndIsr | None
    recipients: tuple[int, ...]


def initial_leadership(assignment: Sequence[int], liveness: ReplicaLiveness) -> LeaderAndIsr | None:
    """A new partition's first state: the first online replica leads, every online replica is in the ISR, and
    both epochs start at 0. None (the partition stays new) when no replica is online."""
    online = tuple(r for r in assignment if liveness.online(r))
    if not online:
        return None
    return LeaderAndIsr(leader=online[0], leader_epoch=0, isr=online, leader_recovery_state=RECOVERED,
                        partition_epoch=0)


def offline_partition_leader(assignment: Sequence[int], isr: Sequence[int], online: Iterable[int],
                             unclean: bool) -> int | None:
    """The first online replica in assignment order that is in the ISR; failing that, when `unclean`, the first
    online replica at all."""
    online = set(online)
    clean = next((r for r in assignment if r in online and r in isr), None)
    if clean is not None or not unclean:
        return clean
    return next((r for r in assignment if r in online), None)


def elect_offline(assignment: Sequence[int], current: LeaderAndIsr, liveness: ReplicaLiveness,
                  unclean_enabled: bool, leader_recovery_supported: bool = True) -> ElectionResult:
    """A leader for a new or offline partition (OfflinePartitionLeaderElectionStrategy).

    `unclean_enabled` is the topic's unclean.leader.election.enable (or an ElectLeaders UNCLEAN request);
    Kafka only honours it when no ISR member is online. A leader from the ISR keeps the online part of the ISR;
    an unclean one becomes the whole ISR and, from IBP 3.2 (`leader_recovery_supported`), marks the partition
    RECOVERING. The leader epoch goes up by one either way.
    """
    online = [r for r in assignment if liveness.online(r)]
    unclean = unclean_enabled and not any(liveness.online(r) for r in current.isr)
    leader = offline_partition_leader(assignment, current.isr, online, unclean)
    if leader is None:
        return ElectionResult(None, tuple(online))
    if leader in current.isr:
        isr = tuple(r for r in current.isr if liveness.online(r))
        recovery = current.leader_recovery_state
    else:
        isr = (leader,)
        recovery = RECOVERING if leader_recovery_supported else current.leader_recovery_state
    elected = replace(current, leader=leader, leader_epoch=current.leader_epoch + 1, isr=isr,
                      leader_recovery_state=recovery)
    return ElectionResult(elected, tuple(online))


def target_replicas(assignment: ReplicaAssignment) -> tuple[int, ...]:
    """The replicas a reassignment ends with: all of them less those being removed (Scala's multiset diff)."""
    removing = list(assignment.removing)
    kept = []
    for replica in assignment.replicas:
        if replica in removing:
            removing.remove(replica)
        else:
            kept.append(replica)
    return tuple(kept)


def elect_reassign(assignment: ReplicaAssignment, current: LeaderAndIsr,
                   liveness: ReplicaLiveness) -> ElectionResult:
    """A leader from the reassignment's target replicas: the first online one in the ISR. Only the leader and
    its epoch change; every target replica receives the request."""
    targets = target_replicas(assignment)
    online = {r for r in targets if liveness.online(r)}
    leader = next((r for r in targets if r in online and r in current.isr), None)
    return ElectionResult(_new_leader(current, leader), targets)


def elect_preferred(assignment: Sequence[int], current: LeaderAndIsr,
                    liveness: ReplicaLiveness) -> ElectionResult:
    """The preferred (first assigned) replica, if it is online and in the ISR; the ISR is kept as it is."""
    preferred = assignment[0] if assignment else None
    ok = preferred is not None and liveness.online(preferred) and preferred in current.isr
    return ElectionResult(_new_leader(current, preferred if ok else None), tuple(assignment))


def elect_controlled_shutdown(assignment: Sequence[int], current: LeaderAndIsr,
                              liveness: ReplicaLiveness) -> ElectionResult:
    """A leader that is not shutting down: the first replica online (counting shutting-down brokers), in the
    ISR and not shutting down. The new ISR drops every shutting-down broker."""
    reachable = tuple(r for r in assignment if liveness.online(r, include_shutting_down=True))
    leader = next((r for r in assignment
                   if r in reachable and r in current.isr and r not in liveness.shutting_down), None)
    if leader is None:
        return ElectionResult(None, reachable)
    isr = tuple(r for r in current.isr if r not in liveness.shutting_down)
    return ElectionResult(replace(current, leader=leader, leader_epoch=current.leader_epoch + 1, isr=isr),
                          reachable)


def _new_leader(current: LeaderAndIsr, leader: int | None) -> LeaderAndIsr | None:
    """Kafka's LeaderAndIsr.newLeader: same ISR and recovery state, leader epoch + 1."""
    if leader is None:
        return None
    return replace(current, leader=leader, leader_epoch=current.leader_epoch + 1)
