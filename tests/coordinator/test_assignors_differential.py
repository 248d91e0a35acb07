"""Our assignors against kafka-python's client-side ones, on generated group memberships.

kafka-python's assignors run as a real group leader runs them: cluster metadata is a real
`ClusterMetadata` fed a MetadataResponse that went through its own encoder and decoder, and each member's
subscription (with sticky user data) is encoded and decoded as ConsumerProtocolSubscription bytes.

- range and roundrobin must match kafka-python exactly. kafka-python 3.0.12's roundrobin crashes (KeyError)
  whenever it has to skip a member not subscribed to a topic: its skip loop rebinds the member id to an
  (instance id, member id) tuple. So it is compared on identical subscriptions, and mixed subscriptions are
  compared with aiokafka's roundrobin (kafka-python's older code, correct skip loop, no static-member order).
- sticky: equally good answers can break ties differently, so we compare properties instead: ours is never
  less balanced (sum of squared per-member counts, the measure every "more even" notion agrees with) and,
  when both end with the same counts, never moves more previously owned partitions than kafka-python does
  from the same owned state. Both must also assign every subscribed partition exactly once.

kafka-python groups static and dynamic members with an unsorted `itertools.groupby`, which drops members
when the two kinds interleave in the member list; a group has no inherent member order, so we hand it
static members first. Our own results do not depend on member order (tested in test_assignors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AiokafkaRoundRobin
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.cluster import ClusterMetadata
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.group import JoinGroupResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import MetadataResponse

from kbroker.coordinator.assignors import Assignment, MemberSubscription, get_assignor

_METADATA_VERSION = 12
DIFFERENTIAL = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


TOPIC_NAMES = [f"topic-{letter}" for letter in "abcdefg"]
TOPIC_LAYOUTS = st.dictionaries(st.sampled_from(TOPIC_NAMES), st.integers(1, 20), min_size=1, max_size=5)
SUBSCRIPTIONS = st.frozensets(st.sampled_from([*TOPIC_NAMES, "missing-topic"]), min_size=1)
MEMBER_IDS = st.lists(st.text("abcxyz-019", min_size=1, max_size=6), min_size=1, max_size=8, unique=True)
STATIC_MODES = st.sampled_from(["none", "all", "some"])
OWNER_PICKS = st.lists(st.integers(0, 8), min_size=100, max_size=100)  # one per partition (5 topics x 20 at most)


@st.composite
def groups(
    draw: st.DrawFn, with_owned: bool = False, identical: bool = False, static: bool = True
) -> tuple[list[MemberSubscription], dict[str, int]]:
    """1-8 members, 1-5 topics of 1-20 partitions, varied subscriptions (some to topics that do not exist).

    With `with_owned`, each partition is owned by one member (subscribed to its topic or not) or by nobody:
    a consistent previous state, as a real group has.
    """
    topics = draw(TOPIC_LAYOUTS)
    member_ids = draw(MEMBER_IDS)
    static_mode = draw(STATIC_MODES) if static else "none"
    shared_subscription = draw(SUBSCRIPTIONS)
    owned: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in member_ids}
    if with_owned:
        picks = iter(draw(OWNER_PICKS))
        for topic, count in sorted(topics.items()):
            for partition in range(count):
                pick = next(picks) % (len(member_ids) + 1)
                if pick:
                    owned[member_ids[pick - 1]].setdefault(topic, []).append(partition)
    members = []
    for position, member_id in enumerate(member_ids):
        subscription = shared_subscription if identical else draw(SUBSCRIPTIONS)
        is_static = static_mode == "all" or (static_mode == "some" and draw(st.booleans()))
        instance_id = f"instance-{draw(st.integers(0, 99)):02d}-{position}" if is_static else None
        members.append(MemberSubscription(member_id, subscription, owned[member_id], instance_id=instance_id))
    return members, topics


def kafka_python_cluster(topics: Mapping[str, int]) -> ClusterMetadata:
    broker = MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=9092, rack=None)
    topic_type = MetadataResponse.MetadataResponseTopic
    response = MetadataResponse(
        version=_METADATA_VERSION,
        throttle_time_ms=0,
        brokers=[broker],
        cluster_id="differential",
        controller_id=0,
        topics=[
            topic_type(
                error_code=0,
                name=name,
                topic_id=None,
                is_internal=False,
                partitions=[
                    topic_type.MetadataResponsePartition(
                        error_code=0,
                        partition_index=index,
                        leader_id=0,
                        leader_epoch=0,
                        replica_nodes=[0],
                        isr_nodes=[0],
                        offline_replicas=[],
                    )
                    for index in range(count)
                ],
            )
            for name, count in topics.items()
        ],
    )
    wire = response.encode(version=_METADATA_VERSION)
    cluster = ClusterMetadata()
    cluster.update_metadata(MetadataResponse.decode(wire, version=_METADATA_VERSION))
    return cluster


def kafka_python_members(members: Sequence[MemberSubscription], with_user_data: bool) -> list:
    """JoinGroupResponse members whose metadata went through ConsumerProtocolSubscription bytes."""
    static_first = sorted(members, key=lambda member: member.instance_id is None)
    result = []
    for member in static_first:
        user_data = b""
        if with_user_data:
            previous = [
                StickyAssignorUserData.TopicPartition(topic=topic, partitions=list(partitions))
                for topic, partitions in sorted(member.owned.items())
            ]
            user_data = StickyAssignorUserData(previous_assignment=previous, generation=1).encode()
        subscription = ConsumerProtocolSubscription(version=0, topics=sorted(member.topics), user_data=user_data)
        decoded = ConsumerProtocolSubscription.decode(subscription.encode())
        result.append(
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=member.member_id, group_instance_id=member.instance_id, metadata=decoded
            )
        )
    return result


def run_kafka_python(assignor, members: Sequence[MemberSubscription], topics: Mapping[str, int]) -> Assignment:
    with_user_data = isinstance(assignor, StickyPartitionAssignor)
    raw = assignor.assign(kafka_python_cluster(topics), kafka_python_members(members, with_user_data))
    return {
        member_id: {topic: sorted(partitions) for topic, partitions in assignment.assigned_partitions if partitions}
        for member_id, assignment in raw.items()
    }


def counts(assignment: Assignment) -> list[int]:
    return sorted(sum(len(partitions) for partitions in by_topic.values()) for by_topic in assignment.values())


def holders(assignment: Assignment) -> dict[tuple[str, int], list[str]]:
    result: dict[tuple[str, int], list[str]] = {}
    for member_id, by_topic in assignment.items():
        for topic, partitions in by_topic.items():
            for partition in partitions:
                result.setdefault((topic, partition), []).append(member_id)
    return result


def subscribed_partitions(members: Sequence[MemberSubscription], topics: Mapping[str, int]) -> set[tuple[str, int]]:
    return {(t, p) for m in members for t in m.topics if t in topics for p in range(topics[t])}


def moved(members: Sequence[MemberSubscription], assignment: Assignment) -> int:
    """Partitions whose owner still subscribes to the topic but which now sit with someone else."""
    placed = holders(assignment)
    return sum(
        1
        for member in members
        for topic, partitions in member.owned.items()
        if topic in member.topics
        for partition in partitions
        if placed.get((topic, partition)) != [member.member_id]
    )


@DIFFERENTIAL
@given(groups())
def test_range_matches_kafka_python(group: tuple[list[MemberSubscription], dict[str, int]]) -> None:
    members, topics = group
    assert get_assignor("range").assign(members, topics) == run_kafka_python(RangePartitionAssignor(), members, topics)


@DIFFERENTIAL
@given(groups(identical=True))
def test_roundrobin_matches_kafka_python_on_identical_subscriptions(
    group: tuple[list[MemberSubscription], dict[str, int]],
) -> None:
    members, topics = group
    expected = run_kafka_python(RoundRobinPartitionAssignor(), members, topics)
    assert get_assignor("roundrobin").assign(members, topics) == expected


@DIFFERENTIAL
@given(groups(static=False))
def test_roundrobin_matches_aiokafka_when_subscriptions_differ(
    group: tuple[list[MemberSubscription], dict[str, int]],
) -> None:
    members, topics = group
    metadata = {m.member_id: ConsumerProtocolMemberMetadata(0, sorted(m.topics), b"") for m in members}
    raw = AiokafkaRoundRobin.assign(kafka_python_cluster(topics), metadata)
    expected = {
        member_id: {topic: sorted(partitions) for topic, partitions in assignment.assignment if partitions}
        for member_id, assignment in raw.items()
    }
    assert get_assignor("roundrobin").assign(members, topics) == expected


@DIFFERENTIAL
@given(groups(with_owned=True))
def test_sticky_is_as_balanced_and_as_sticky_as_kafka_python(
    group: tuple[list[MemberSubscription], dict[str, int]],
) -> None:
    members, topics = group
    ours = get_assignor("sticky").assign(members, topics)
    theirs = run_kafka_python(StickyPartitionAssignor(), members, topics)

    everything = subscribed_partitions(members, topics)
    for assignment in (ours, theirs):
        placed = holders(assignment)
        assert set(placed) == everything
        assert all(len(owners) == 1 for owners in placed.values())

    assert sum(c * c for c in counts(ours)) <= sum(c * c for c in counts(theirs))
    if counts(ours) == counts(theirs):
        assert moved(members, ours) <= moved(members, theirs)
