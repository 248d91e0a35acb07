"""Kafka's StickyAssignor goals, reached exactly: the most balanced assignment, then the fewest moves.

Kafka's contract (KIP-54) puts balance first: counts differ by at most one, or a member with two or more
fewer partitions than another cannot take any of that member's partitions. Within that, as many partitions
as possible stay with their current owner.

Two paths, both optimal for those goals:

- Every member subscribes to the same (existing) topics: Kafka's own constrained algorithm. Each member keeps
  up to its quota (ceil(P/C) while those slots last, else floor(P/C)) of what it owns, the rest is dealt
  round-robin to members below floor(P/C) in Kafka's member order, and the leftover extras go one each to
  members at floor(P/C).
- Different subscriptions: Kafka's client code (and kafka-python's port of it) uses a heuristic here; we solve
  the problem exactly instead (sticky_general.py): minimum sum of squared counts, the most even load there is,
  then the fewest moves. Being optimal, it is never less balanced and, at equal balance, never moves more
  partitions than that heuristic (checked against kafka-python in test_assignors_differential.py); ties between
  equally good answers may be broken differently.

A partition counts as owned only if exactly one member claims it and that member still subscribes to its
topic; Kafka drops a partition claimed twice in the same generation from both claimants, and we have no
generations to tell them apart.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kbroker.coordinator.assignors.model import (
    Assignment,
    MemberSubscription,
    TopicPartition,
    assignable_topics,
    check_unique_members,
    existing_topics,
    kafka_member_order,
    to_assignment,
)
from kbroker.coordinator.assignors.sticky_general import general_assign


class StickyAssignor:
    name = "sticky"

    def assign(self, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
        check_unique_members(members)
        problem = StickyProblem.build(members, partitions_per_topic)
        return to_assignment(members, sticky_target(problem))


@dataclass
class StickyProblem:
    """The inputs of one sticky run, reduced to what the algorithm needs."""

    members: list[str]  # Kafka's member order; it breaks every tie
    eligible: dict[str, frozenset[str]]  # member -> subscribed topics that exist
    subscribers: dict[str, list[str]]  # topic -> members (in order) subscribed to it
    partitions: list[TopicPartition]  # every partition some member may take, sorted
    owner: dict[TopicPartition, str] = field(default_factory=dict)  # partitions with one valid current owner

    @classmethod
    def build(cls, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> StickyProblem:
        topics = existing_topics(partitions_per_topic)
        ordered = kafka_member_order(members)
        eligible = {member.member_id: assignable_topics(member, topics) for member in ordered}
        subscribers: dict[str, list[str]] = defaultdict(list)
        for member in ordered:
            for topic in sorted(eligible[member.member_id]):
                subscribers[topic].append(member.member_id)
        partitions = [(topic, p) for topic in sorted(subscribers) for p in range(topics[topic])]
        problem = cls([m.member_id for m in ordered], eligible, dict(subscribers), partitions)
        problem.owner = _valid_owners(ordered, eligible, topics)
        return problem

    def has_identical_subscriptions(self) -> bool:
        return len({self.eligible[member] for member in self.members}) <= 1


def _valid_owners(
    members: Sequence[MemberSubscription], eligible: Mapping[str, frozenset[str]], topics: Mapping[str, int]
) -> dict[TopicPartition, str]:
    """Owned partitions that may stay put: the topic still exists, the owner still wants it, nobody else claims it."""
    claimants: dict[TopicPartition, set[str]] = defaultdict(set)
    for member in members:
        for topic, partitions in member.owned.items():
            if topic not in eligible[member.member_id]:
                continue
            for partition in partitions:
                if 0 <= partition < topics[topic]:
                    claimants[(topic, partition)].add(member.member_id)
    return {tp: next(iter(owners)) for tp, owners in claimants.items() if len(owners) == 1}


def sticky_target(problem: StickyProblem) -> dict[str, set[TopicPartition]]:
    """The sticky assignment as member -> partitions; the cooperative variant starts from it too."""
    if not problem.members:
        return {}
    if problem.has_identical_subscriptions():
        return constrained_assign(problem)
    return general_assign(problem)


def owned_by(problem: StickyProblem) -> dict[str, list[TopicPartition]]:
    owned: dict[str, list[TopicPartition]] = {member: [] for member in problem.members}
    for tp, member in problem.owner.items():
        owned[member].append(tp)
    return {member: sorted(partitions) for member, partitions in owned.items()}


def constrained_assign(problem: StickyProblem) -> dict[str, set[TopicPartition]]:
    """Kafka's fast path when everyone subscribes to the same topics: keep up to the quota, deal the rest."""
    min_quota, extra_slots = divmod(len(problem.partitions), len(problem.members))
    max_quota = min_quota + (1 if extra_slots else 0)
    held: dict[str, list[TopicPartition]] = {}
    for member, owned in owned_by(problem).items():
        if extra_slots and len(owned) >= max_quota:
            held[member] = owned[:max_quota]
            extra_slots -= 1
        else:
            held[member] = owned[:min_quota]
    taken = {tp for partitions in held.values() for tp in partitions}
    unassigned = iter(tp for tp in problem.partitions if tp not in taken)
    below_min = deque(member for member in problem.members if len(held[member]) < min_quota)
    while below_min:
        member = below_min.popleft()
        held[member].append(next(unassigned))
        if len(held[member]) < min_quota:
            below_min.append(member)
    at_min = [member for member in problem.members if len(held[member]) == min_quota]
    for member, tp in zip(at_min, unassigned, strict=False):
        held[member].append(tp)
    return {member: set(partitions) for member, partitions in held.items()}
