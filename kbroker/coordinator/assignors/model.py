"""The data every assignor shares: who subscribes to what, and the helpers all of them need.

Kept apart from the package `__init__` so the algorithm modules can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

TopicPartition = tuple[str, int]
Assignment = dict[str, dict[str, list[int]]]
"""member_id -> topic -> sorted partitions. Every member is present; topics it got nothing of are left out."""


@dataclass(frozen=True)
class MemberSubscription:
    """One group member as an assignor sees it.

    `owned` is the member's current assignment (sticky assignors keep as much of it as they can);
    `instance_id` is group.instance.id, which Kafka sorts static members by; `rack` is accepted for
    completeness but unused, because Kafka's rack-aware placement also needs replica racks per partition,
    which assignors here are not given (Kafka then falls back to the plain algorithms, as we do).
    """

    member_id: str
    topics: frozenset[str]
    owned: Mapping[str, Sequence[int]] = field(default_factory=dict, hash=False)
    instance_id: str | None = None
    rack: str | None = None

    def __post_init__(self) -> None:
        # Callers often hold a list or set; normalising keeps the instance hashable and comparisons exact.
        if not isinstance(self.topics, frozenset):
            object.__setattr__(self, "topics", frozenset(self.topics))


class Assignor(Protocol):
    name: str

    def assign(self, members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment: ...


def java_order_key(text: str) -> bytes:
    """Sort key giving Java's String.compareTo order (UTF-16 code units), which Kafka's assignors use."""
    return text.encode("utf-16-be", errors="surrogatepass")


def kafka_member_order(members: Iterable[MemberSubscription]) -> list[MemberSubscription]:
    """Kafka's MemberInfo order: static members by group.instance.id first, then dynamic ones by member id."""

    def key(member: MemberSubscription) -> tuple[int, bytes, bytes]:
        if member.instance_id is not None:
            return (0, java_order_key(member.instance_id), java_order_key(member.member_id))
        return (1, java_order_key(member.member_id), b"")

    return sorted(members, key=key)


def check_unique_members(members: Sequence[MemberSubscription]) -> None:
    """A member id appearing twice means the caller's group state is broken; fail loudly instead of guessing."""
    seen: set[str] = set()
    for member in members:
        if member.member_id in seen:
            raise ValueError(f"member {member.member_id!r} appears more than once")
        seen.add(member.member_id)


def existing_topics(partitions_per_topic: Mapping[str, int]) -> dict[str, int]:
    """Topics that have at least one partition; subscriptions to anything else are ignored."""
    return {topic: count for topic, count in partitions_per_topic.items() if count > 0}


def assignable_topics(member: MemberSubscription, topics: Mapping[str, int]) -> frozenset[str]:
    return member.topics.intersection(topics)


def empty_assignment(members: Iterable[MemberSubscription]) -> Assignment:
    return {member.member_id: {} for member in members}


def to_assignment(members: Iterable[MemberSubscription], held: Mapping[str, Iterable[TopicPartition]]) -> Assignment:
    """Turns per-member partition sets into the public shape: sorted lists, no empty topics."""
    result = empty_assignment(members)
    for member_id, partitions in held.items():
        by_topic = result[member_id]
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        for partition_list in by_topic.values():
            partition_list.sort()
    return {member_id: dict(sorted(by_topic.items())) for member_id, by_topic in result.items()}
