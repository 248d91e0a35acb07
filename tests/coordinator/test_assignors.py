"""The partition assignors give Kafka's layouts and keep Kafka's guarantees (coverage, balance, stickiness)."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.coordinator.assignors import ASSIGNORS, Assignment, MemberSubscription, get_assignor
from kbroker.coordinator.assignors.sticky import StickyProblem, constrained_assign
from kbroker.coordinator.assignors.sticky_general import general_assign

Group = tuple[list[MemberSubscription], dict[str, int]]
PROPERTIES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPLETE_ASSIGNORS = ["range", "roundrobin", "sticky", "uniform"]  # cooperative-sticky may hold partitions back


def member(member_id: str, *topics: str, owned: Mapping[str, Sequence[int]] | None = None, **kw) -> MemberSubscription:
    return MemberSubscription(member_id, frozenset(topics), owned or {}, **kw)


def with_owned(members: Sequence[MemberSubscription], assignment: Assignment) -> list[MemberSubscription]:
    """The next rebalance's input: same members, each now owning what it was given."""
    return [MemberSubscription(m.member_id, m.topics, assignment[m.member_id], m.instance_id, m.rack) for m in members]


def counts(assignment: Assignment) -> dict[str, int]:
    return {member_id: sum(map(len, by_topic.values())) for member_id, by_topic in assignment.items()}


def holders(assignment: Assignment) -> dict[tuple[str, int], list[str]]:
    result: dict[tuple[str, int], list[str]] = {}
    for member_id, by_topic in assignment.items():
        for topic, partitions in by_topic.items():
            for partition in partitions:
                result.setdefault((topic, partition), []).append(member_id)
    return result


def valid_owner(members: Sequence[MemberSubscription], topics: Mapping[str, int]) -> dict[tuple[str, int], str]:
    """Partitions claimed by exactly one member that still subscribes to an existing topic holding them."""
    claims: dict[tuple[str, int], set[str]] = {}
    for m in members:
        for topic, partitions in m.owned.items():
            if topic in m.topics and topic in topics:
                for partition in partitions:
                    if 0 <= partition < topics[topic]:
                        claims.setdefault((topic, partition), set()).add(m.member_id)
    return {tp: next(iter(owners)) for tp, owners in claims.items() if len(owners) == 1}


def moved(members: Sequence[MemberSubscription], topics: Mapping[str, int], assignment: Assignment) -> int:
    placed = holders(assignment)
    return sum(1 for tp, owner in valid_owner(members, topics).items() if placed.get(tp) != [owner])


def square_sum(assignment: Assignment) -> int:
    return sum(count * count for count in counts(assignment).values())


TEN_PARTITIONS = {"t": 10}
THREE_CONSUMERS = [member("c1", "t"), member("c2", "t"), member("c3", "t")]


# --- textbook layouts ---------------------------------------------------------------------------------------


def test_range_textbook_layout() -> None:
    assert get_assignor("range").assign(THREE_CONSUMERS, TEN_PARTITIONS) == {
        "c1": {"t": [0, 1, 2, 3]},
        "c2": {"t": [4, 5, 6]},
        "c3": {"t": [7, 8, 9]},
    }


def test_roundrobin_textbook_layout() -> None:
    assert get_assignor("roundrobin").assign(THREE_CONSUMERS, TEN_PARTITIONS) == {
        "c1": {"t": [0, 3, 6, 9]},
        "c2": {"t": [1, 4, 7]},
        "c3": {"t": [2, 5, 8]},
    }


@pytest.mark.parametrize("name", ["sticky", "uniform", "cooperative-sticky"])
def test_sticky_after_c3_leaves_range_layout_keeps_owned_and_tops_up(name: str) -> None:
    survivors = [member("c1", "t", owned={"t": [0, 1, 2, 3]}), member("c2", "t", owned={"t": [4, 5, 6]})]
    assert get_assignor(name).assign(survivors, TEN_PARTITIONS) == {
        "c1": {"t": [0, 1, 2, 3, 7]},
        "c2": {"t": [4, 5, 6, 8, 9]},
    }


# --- range -----------------------------------------------------------------------------------------------------


def test_range_gives_the_extras_of_every_topic_to_the_first_members() -> None:
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    assert get_assignor("range").assign(members, {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 1], "t1": [0, 1]},
        "C1": {"t0": [2], "t1": [2]},
    }


def test_range_orders_static_members_by_instance_id_before_dynamic_members() -> None:
    members = [
        member("a-dynamic", "t"),
        member("b-static", "t", instance_id="i2"),
        member("c-static", "t", instance_id="i1"),
    ]
    assert get_assignor("range").assign(members, {"t": 4}) == {
        "c-static": {"t": [0, 1]},
        "b-static": {"t": [2]},
        "a-dynamic": {"t": [3]},
    }


def test_range_splits_each_topic_among_its_own_subscribers_only() -> None:
    members = [member("a", "t0"), member("b", "t0", "t1"), member("c", "t1")]
    assert get_assignor("range").assign(members, {"t0": 3, "t1": 3}) == {
        "a": {"t0": [0, 1]},
        "b": {"t0": [2], "t1": [0, 1]},
        "c": {"t1": [2]},
    }


def test_member_ids_sort_in_java_utf16_order() -> None:
    # Java compares UTF-16 code units: U+1F600 is 0xD83D 0xDE00, which sorts before U+FF5E; Python's order is reversed.
    members = [member("\uff5e", "t"), member("\U0001f600", "t")]
    assert get_assignor("range").assign(members, {"t": 3}) == {"\U0001f600": {"t": [0, 1]}, "\uff5e": {"t": [2]}}


# --- roundrobin ----------------------------------------------------------------------------------------------


def test_roundrobin_deals_across_topics_in_topic_then_partition_order() -> None:
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    assert get_assignor("roundrobin").assign(members, {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 2], "t1": [1]},
        "C1": {"t0": [1], "t1": [0, 2]},
    }


def test_roundrobin_skips_members_not_subscribed_to_the_topic() -> None:
    members = [member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")]
    assert get_assignor("roundrobin").assign(members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": {"t0": [0]},
        "C1": {"t1": [0]},
        "C2": {"t1": [1], "t2": [0, 1, 2]},
    }


def test_roundrobin_deals_to_static_members_first() -> None:
    members = [member("a", "t"), member("z", "t", instance_id="only-static")]
    assert get_assignor("roundrobin").assign(members, {"t": 3}) == {"z": {"t": [0, 2]}, "a": {"t": [1]}}


# --- sticky ----------------------------------------------------------------------------------------------------


def test_sticky_keeps_every_partition_of_the_survivors_when_a_member_leaves() -> None:
    topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    everyone = ("t0", "t1", "t2", "t3")
    survivors = [
        member("C0", *everyone, owned={"t0": [0], "t1": [1], "t3": [0]}),
        member("C2", *everyone, owned={"t1": [0], "t2": [1]}),
    ]
    result = get_assignor("sticky").assign(survivors, topics)
    assert counts(result) == {"C0": 4, "C2": 4}
    assert moved(survivors, topics, result) == 0


def test_sticky_balances_mixed_subscriptions_better_than_roundrobin() -> None:
    members = [member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")]
    topics = {"t0": 1, "t1": 2, "t2": 3}
    first = get_assignor("sticky").assign(members, topics)
    assert first == {"C0": {"t0": [0]}, "C1": {"t1": [0, 1]}, "C2": {"t2": [0, 1, 2]}}

    survivors = with_owned(members[1:], first)
    assert get_assignor("sticky").assign(survivors, topics) == {
        "C1": {"t0": [0], "t1": [0, 1]},
        "C2": {"t2": [0, 1, 2]},
    }


def test_sticky_moves_partitions_of_a_topic_the_owner_unsubscribed_from() -> None:
    members = [member("a", "t0", owned={"t0": [0, 1], "t1": [0, 1]}), member("b", "t0", "t1", owned={"t0": [2, 3]})]
    result = get_assignor("sticky").assign(members, {"t0": 4, "t1": 2})
    assert result["b"]["t1"] == [0, 1]
    assert "t1" not in result["a"]


def test_sticky_treats_a_partition_claimed_by_two_members_as_unowned() -> None:
    # Kafka drops a partition claimed twice in one generation from both claimants; it is then dealt like any other
    members = [member("a", "t", owned={"t": [2]}), member("b", "t", owned={"t": [2]}), member("c", "t")]
    assert get_assignor("sticky").assign(members, {"t": 3}) == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [2]}}


def test_sticky_ignores_owned_partitions_that_no_longer_exist() -> None:
    members = [member("a", "t", owned={"t": [5, 6]}), member("b", "t")]
    assert get_assignor("sticky").assign(members, {"t": 2}) == {"a": {"t": [0]}, "b": {"t": [1]}}


# --- cooperative-sticky --------------------------------------------------------------------------------------


JOINING = [
    member("c1", "t", owned={"t": [0, 1, 2, 3, 4]}),
    member("c2", "t", owned={"t": [5, 6, 7, 8, 9]}),
    member("c3", "t"),
]


def test_cooperative_withholds_partitions_another_member_still_owns() -> None:
    assert get_assignor("cooperative-sticky").assign(JOINING, TEN_PARTITIONS) == {
        "c1": {"t": [0, 1, 2, 3]},
        "c2": {"t": [5, 6, 7]},
        "c3": {},
    }


def test_cooperative_second_round_hands_revoked_partitions_to_their_new_owner() -> None:
    cooperative = get_assignor("cooperative-sticky")
    first = cooperative.assign(JOINING, TEN_PARTITIONS)
    second = cooperative.assign(with_owned(JOINING, first), TEN_PARTITIONS)
    assert second == get_assignor("sticky").assign(JOINING, TEN_PARTITIONS)
    assert second["c3"] == {"t": [4, 8, 9]}


def test_cooperative_gives_partitions_of_departed_members_in_the_first_round() -> None:
    survivors = [member("c1", "t", owned={"t": [0, 1, 2, 3]}), member("c2", "t", owned={"t": [4, 5, 6]})]
    assert get_assignor("cooperative-sticky").assign(survivors, TEN_PARTITIONS) == get_assignor("sticky").assign(
        survivors, TEN_PARTITIONS
    )


def test_cooperative_waits_for_an_unsubscribed_owner_to_revoke() -> None:
    members = [member("a", "t0", owned={"t0": [0], "t1": [0]}), member("b", "t0", "t1", owned={"t0": [1]})]
    first = get_assignor("cooperative-sticky").assign(members, {"t0": 2, "t1": 1})
    assert first == {"a": {"t0": [0]}, "b": {"t0": [1]}}
    second = get_assignor("cooperative-sticky").assign(with_owned(members, first), {"t0": 2, "t1": 1})
    assert second == {"a": {"t0": [0]}, "b": {"t0": [1], "t1": [0]}}


# --- registry and input handling -----------------------------------------------------------------------------


def test_assignors_are_registered_under_kafka_names() -> None:
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky", "uniform"}
    assert all(get_assignor(name).name == name for name in ASSIGNORS)


def test_unknown_assignor_name_raises_value_error_listing_known_ones() -> None:
    with pytest.raises(ValueError, match="cooperative-sticky, range, roundrobin, sticky, uniform"):
        get_assignor("Range")


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_subscriptions_to_missing_topics_are_ignored(name: str) -> None:
    members = [member("a", "t", "gone"), member("b", "gone")]
    assert get_assignor(name).assign(members, {"t": 2, "empty": 0}) == {"a": {"t": [0, 1]}, "b": {}}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_duplicate_member_ids_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="more than once"):
        get_assignor(name).assign([member("a", "t"), member("a", "t")], {"t": 1})


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_no_members_means_an_empty_assignment(name: str) -> None:
    assert get_assignor(name).assign([], {"t": 3}) == {}


def test_member_subscription_accepts_any_collection_of_topics() -> None:
    assert MemberSubscription("a", {"t"}) == MemberSubscription("a", frozenset({"t"}))  # type: ignore[arg-type]


def test_member_subscription_stays_hashable_with_an_owned_mapping() -> None:
    owning = MemberSubscription("a", frozenset({"t"}), {"t": [0]})
    assert owning in {owning}


# --- properties on generated groups --------------------------------------------------------------------------


TOPIC_NAMES = ["a", "b", "c", "d", "e"]
SUBSCRIPTIONS = st.frozensets(st.sampled_from([*TOPIC_NAMES, "missing"]), min_size=1)
MEMBER_IDS = st.lists(st.sampled_from("ABCDEFGH"), min_size=1, unique=True)
INSTANCE_IDS = st.none() | st.just("instance")


@st.composite
def groups(
    draw: st.DrawFn, max_members: int = 8, max_partitions: int = 20, max_topics: int = 5, identical: bool = False
) -> Group:
    """Members with varied (or shared) subscriptions and an arbitrary, possibly conflicting, previous ownership.

    Strategies are built once, outside the draw, because building them per example dominated the run time.
    Subscriptions and owned partitions may name topics (and partitions) that do not exist.
    """
    topics = draw(_topic_layouts(max_partitions, max_topics))
    shared = draw(SUBSCRIPTIONS) if identical else draw(st.none() | SUBSCRIPTIONS)
    members = []
    for member_id in draw(MEMBER_IDS)[:max_members]:
        owned: dict[str, list[int]] = {}
        for topic, partition in draw(_owned_pairs(max_partitions)):
            owned.setdefault(topic, []).append(partition)
        instance_id = draw(INSTANCE_IDS)
        instance_id = instance_id and f"{instance_id}-{member_id}"
        members.append(MemberSubscription(member_id, shared or draw(SUBSCRIPTIONS), owned, instance_id))
    return members, topics


@functools.cache
def _topic_layouts(max_partitions: int, max_topics: int) -> st.SearchStrategy[dict[str, int]]:
    counts = st.integers(1, max_partitions)
    return st.dictionaries(st.sampled_from(TOPIC_NAMES), counts, min_size=1, max_size=max_topics)


@functools.cache
def _owned_pairs(max_partitions: int) -> st.SearchStrategy[list[tuple[str, int]]]:
    return st.lists(st.tuples(st.sampled_from(TOPIC_NAMES), st.integers(0, max_partitions)), max_size=8)


def subscribed_partitions(members: Sequence[MemberSubscription], topics: Mapping[str, int]) -> set[tuple[str, int]]:
    return {(t, p) for m in members for t in m.topics if t in topics for p in range(topics[t])}


def assert_well_formed(members: Sequence[MemberSubscription], result: Assignment) -> None:
    assert set(result) == {m.member_id for m in members}
    subscriptions = {m.member_id: m.topics for m in members}
    for member_id, by_topic in result.items():
        for topic, partitions in by_topic.items():
            assert topic in subscriptions[member_id]
            assert partitions and partitions == sorted(partitions)


@PROPERTIES
@given(group=groups())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(group: Group) -> None:
    members, topics = group
    for name in COMPLETE_ASSIGNORS:
        result = get_assignor(name).assign(members, topics)
        assert_well_formed(members, result)
        placed = holders(result)
        assert set(placed) == subscribed_partitions(members, topics), name
        assert all(len(owners) == 1 for owners in placed.values()), name


@PROPERTIES
@given(group=groups(), data=st.data())
def test_result_does_not_depend_on_member_order(group: Group, data: st.DataObject) -> None:
    members, topics = group
    shuffled = data.draw(st.permutations(members))
    for name, assignor in ASSIGNORS.items():
        assert assignor.assign(shuffled, topics) == assignor.assign(members, topics), name


@PROPERTIES
@given(group=groups())
def test_range_splits_each_topic_evenly_among_its_subscribers(group: Group) -> None:
    members, topics = group
    result = get_assignor("range").assign(members, topics)
    for topic in topics:
        shares = [len(result[m.member_id].get(topic, [])) for m in members if topic in m.topics]
        if shares:
            assert max(shares) - min(shares) <= 1


@PROPERTIES
@given(group=groups(identical=True))
def test_roundrobin_counts_differ_by_at_most_one_when_subscriptions_are_identical(group: Group) -> None:
    members, topics = group
    shares = counts(get_assignor("roundrobin").assign(members, topics)).values()
    assert max(shares) - min(shares) <= 1


@PROPERTIES
@given(group=groups())
def test_sticky_counts_differ_by_at_most_one_among_members_with_the_same_subscription(group: Group) -> None:
    members, topics = group
    load = counts(get_assignor("sticky").assign(members, topics))
    by_subscription: dict[frozenset[str], list[int]] = {}
    for m in members:
        by_subscription.setdefault(frozenset(m.topics & topics.keys()), []).append(load[m.member_id])
    for shares in by_subscription.values():
        assert max(shares) - min(shares) <= 1


@PROPERTIES
@given(group=groups())
def test_sticky_leaves_no_member_able_to_take_from_one_with_two_more(group: Group) -> None:
    """Kafka's balance definition: a member 2+ below another cannot take any of that member's partitions."""
    members, topics = group
    result = get_assignor("sticky").assign(members, topics)
    load = counts(result)
    for light, heavy in itertools.permutations(members, 2):
        if load[heavy.member_id] - load[light.member_id] >= 2:
            assert not light.topics & result[heavy.member_id].keys()


@PROPERTIES
@given(group=groups())
def test_sticky_reassigning_its_own_result_changes_nothing(group: Group) -> None:
    members, topics = group
    first = get_assignor("sticky").assign(members, topics)
    assert get_assignor("sticky").assign(with_owned(members, first), topics) == first


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(max_members=4, max_partitions=3, max_topics=2))
def test_sticky_is_the_most_balanced_then_least_moving_assignment(group: Group) -> None:
    """Exhaustive check on small groups: no assignment beats ours on (sum of squared counts, moved partitions)."""
    members, topics = group
    ours = get_assignor("sticky").assign(members, topics)
    partitions = sorted(subscribed_partitions(members, topics))
    owners = valid_owner(members, topics)
    previous = [owners.get(tp) for tp in partitions]
    takers = [[m.member_id for m in members if tp[0] in m.topics] for tp in partitions]
    best = min(
        (
            sum(n * n for n in Counter(choice).values()),
            sum(1 for was, now in zip(previous, choice, strict=True) if was is not None and was != now),
        )
        for choice in itertools.product(*takers)
    )
    assert (square_sum(ours), moved(members, topics, ours)) == best


@PROPERTIES
@given(group=groups())
def test_sticky_fast_path_is_as_good_as_the_general_optimiser(group: Group) -> None:
    members, topics = group
    same_topics = [MemberSubscription(m.member_id, members[0].topics, m.owned, m.instance_id) for m in members]
    problem = StickyProblem.build(same_topics, topics)
    fast, exact = constrained_assign(problem), general_assign(problem)
    assert sorted(map(len, fast.values())) == sorted(map(len, exact.values()))
    kept = sum(1 for tp, owner in problem.owner.items() if tp in fast[owner])
    assert kept == sum(1 for tp, owner in problem.owner.items() if tp in exact[owner])


@PROPERTIES
@given(group=groups())
def test_cooperative_never_gives_a_partition_another_member_still_owns(group: Group) -> None:
    members, topics = group
    result = get_assignor("cooperative-sticky").assign(members, topics)
    target = holders(get_assignor("sticky").assign(members, topics))
    assert_well_formed(members, result)
    for tp, owners in holders(result).items():
        assert owners == target[tp]
        claimants = {m.member_id for m in members if tp[1] in m.owned.get(tp[0], ())}
        assert claimants <= set(owners)


@PROPERTIES
@given(group=groups())
def test_cooperative_second_round_completes_the_assignment_without_moving_anything(group: Group) -> None:
    members, topics = group
    cooperative = get_assignor("cooperative-sticky")
    first = cooperative.assign(members, topics)
    second_input = with_owned(members, first)
    second = cooperative.assign(second_input, topics)
    assert set(holders(second)) == subscribed_partitions(members, topics)
    assert moved(second_input, topics, second) == 0
    assert square_sum(second) == square_sum(get_assignor("sticky").assign(members, topics))
