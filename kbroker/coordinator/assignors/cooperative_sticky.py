"""Kafka's CooperativeStickyAssignor (KIP-429): the sticky target, reached in two rebalances.

`assign` computes the same target as the sticky assignor, then leaves out of it every partition that some
other member still owns (claims in its `owned`, whether or not it still subscribes to the topic). That is the
intermediate assignment of the first round: the current owner sees the partition missing and revokes it,
nobody else gets it yet. The owner then rejoins, and a second call, with `owned` updated to the intermediate
assignment, hands the now-unowned partition to its new owner; no partition is owned by two members at once.
Partitions whose owner has left the group, and partitions nobody owns, are given out in the first round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from kbroker.coordinator.assignors.model import (
    Assignment,
    MemberSubscription,
    TopicPartition,
    check_unique_members,
    to_assignment,
)
from kbroker.coordinator.assignors.sticky import StickyProblem, sticky_target


class CooperativeStickyAssignor:
    name = "cooperative-sticky"

    def assign(self, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
        check_unique_members(members)
        target = sticky_target(StickyProblem.build(members, partitions_per_topic))
        claims = _claimants(members)
        intermediate = {
            member: {tp for tp in partitions if claims.get(tp, set()) <= {member}}
            for member, partitions in target.items()
        }
        return to_assignment(members, intermediate)


def _claimants(members: Sequence[MemberSubscription]) -> dict[TopicPartition, set[str]]:
    claims: dict[TopicPartition, set[str]] = defaultdict(set)
    for member in members:
        for topic, partitions in member.owned.items():
            for partition in partitions:
                claims[(topic, partition)].add(member.member_id)
    return claims
