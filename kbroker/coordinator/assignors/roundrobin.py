"""Kafka's RoundRobinAssignor: deal all partitions, sorted by (topic, partition), to members in turn.

The dealer walks the members in Kafka's order (static members by group.instance.id, then the rest by
member id) and skips any member not subscribed to the partition's topic; the next partition continues
from the member after the one that took this one. With identical subscriptions the counts differ by at
most one; with different subscriptions they may not, exactly as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kbroker.coordinator.assignors.model import (
    Assignment,
    MemberSubscription,
    check_unique_members,
    empty_assignment,
    existing_topics,
    java_order_key,
    kafka_member_order,
)


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
        check_unique_members(members)
        topics = existing_topics(partitions_per_topic)
        ordered = kafka_member_order(members)
        result = empty_assignment(members)
        subscribed = {topic for member in members for topic in member.topics if topic in topics}
        turn = 0
        for topic in sorted(subscribed, key=java_order_key):
            for partition in range(topics[topic]):
                while topic not in ordered[turn].topics:
                    turn = (turn + 1) % len(ordered)
                result[ordered[turn].member_id].setdefault(topic, []).append(partition)
                turn = (turn + 1) % len(ordered)
        return result
