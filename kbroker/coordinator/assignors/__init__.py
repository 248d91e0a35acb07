"""Partition assignors: which group member consumes which partition.

The classic protocol runs these on the group leader (a client); the names are the ones clients put in
`partition.assignment.strategy`. range and roundrobin give exactly the layouts of Kafka's Java assignors;
sticky and cooperative-sticky meet the same guarantees (balance first, then as few moves as possible) but may
break ties between equally good answers differently.

The KIP-848 consumer protocol runs the assignor on the broker, picked by `group.remote.assignor` or, when
the client leaves it unset (its default), by the first of the broker's `group.consumer.assignors`, which in
Kafka defaults to "uniform,range". Kafka's server-side "uniform" assignor aims at what the sticky one does
(balanced, then as few moves as possible), so "uniform" here IS the sticky algorithm; where several answers
are equally good its choice may differ from Kafka's. Server-side "range" is the range assignor. The broker
does not need the cooperative two-round variant for KIP-848 (it revokes before it reassigns by itself).

All assignors are deterministic, ignore subscribed topics missing from `partitions_per_topic`, return every
member (possibly with nothing), and list partitions in ascending order per topic.
"""

from __future__ import annotations

from kbroker.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kbroker.coordinator.assignors.model import Assignment, Assignor, MemberSubscription
from kbroker.coordinator.assignors.range import RangeAssignor
from kbroker.coordinator.assignors.roundrobin import RoundRobinAssignor
from kbroker.coordinator.assignors.sticky import StickyAssignor


class UniformAssignor(StickyAssignor):
    """KIP-848's default server-side assignor name, served by the sticky algorithm (see the module docstring)."""

    name = "uniform"


ASSIGNORS: dict[str, Assignor] = {
    assignor.name: assignor
    for assignor in (
        RangeAssignor(),
        RoundRobinAssignor(),
        StickyAssignor(),
        CooperativeStickyAssignor(),
        UniformAssignor(),
    )
}


def get_assignor(name: str) -> Assignor:
    """The assignor Kafka calls `name` (case-sensitive, as in Kafka); ValueError lists the known names."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        known = ", ".join(sorted(ASSIGNORS))
        raise ValueError(f"unknown partition assignor {name!r}; known assignors: {known}") from None


__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "UniformAssignor",
    "get_assignor",
]
