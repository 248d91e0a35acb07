"""Kafka's RangeAssignor: each topic on its own, split into contiguous ranges over the members in Kafka's order.

With n partitions and m subscribers of a topic, every subscriber gets n // m partitions and the first n % m
(in Kafka's member order: static members by group.instance.id, then the rest by member id) get one more.
Because every topic restarts at the first member, members early in the order collect the extras of every
topic; that imbalance is Kafka's documented behaviour and clients rely on it for co-partitioned joins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kbroker.coordinator.assignors.model import (
    Assignment,
    MemberSubscription,
    check_unique_members,
    empty_assignment,
    existing_topics,
    kafka_member_order,
)


class RangeAssignor:
    name = "range"

    def assign(self, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
        check_unique_members(members)
        topics = existing_topics(partitions_per_topic)
        ordered = kafka_member_order(members)
        result = empty_assignment(members)
        for topic in sorted(topics):
            subscribers = [member.member_id for member in ordered if topic in member.topics]
            for member_id, partitions in zip(subscribers, _ranges(topics[topic], len(subscribers)), strict=True):
                if partitions:
                    result[member_id][topic] = partitions
        return result


def _ranges(partition_count: int, member_count: int) -> list[list[int]]:
    """Contiguous blocks, the first `partition_count % member_count` one partition longer."""
    if member_count == 0:
        return []
    per_member, with_extra = divmod(partition_count, member_count)
    blocks, start = [], 0
    for index in range(member_count):
        length = per_member + (1 if index < with_extra else 0)
        blocks.append(list(range(start, start + length)))
        start += length
    return blocks
