"""The sticky assignment for groups whose members subscribe to different topics, computed exactly.

Objective: minimise `BIG * sum(count^2) + moved`, where `moved` counts partitions not with their valid previous
owner and BIG is larger than any change in `moved` a single cycle of hand-overs can make. That is "most balanced
first, then fewest moves" (see sticky.py). The assignment is a flow (partition -> member -> counts), so it is
optimal exactly when no cycle of hand-overs lowers the objective; we reach that in three steps:

1. everyone keeps what it validly owns, and each unowned partition goes to its least-loaded subscriber;
2. direct hand-overs from a member to one with two or more fewer partitions, in bulk (cheap, gets close);
3. Bellman-Ford finds any remaining negative cycle in the member graph (including chains that shift load
   through intermediaries, and pure swaps that send partitions home); each is cancelled, repeatedly while it
   stays negative, until none is left.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.coordinator.assignors.model import TopicPartition

if TYPE_CHECKING:
    from kbroker.coordinator.assignors.sticky import StickyProblem


def general_assign(problem: StickyProblem) -> dict[str, set[TopicPartition]]:
    state = _Holdings(problem)
    for tp, member in problem.owner.items():
        state.give(tp, member)
    _give_unowned_to_least_loaded(state)
    _balance_by_direct_handovers(state)
    _cancel_negative_cycles(state)
    return state.held


@dataclass(frozen=True)
class _Handover:
    cost: int  # change in `moved`: -1 sends the partition home, +1 takes it away from home
    partition: TopicPartition


class _Holdings:
    """Who holds what, indexed so the cheapest hand-over between two members is found without scanning."""

    def __init__(self, problem: StickyProblem) -> None:
        self.problem = problem
        self.rank = {member: index for index, member in enumerate(problem.members)}
        self.held: dict[str, set[TopicPartition]] = {member: set() for member in problem.members}
        # member -> topic -> partitions of that topic it holds and did / did not own before; no empty entries
        self.at_home: dict[str, dict[str, set[int]]] = {member: defaultdict(set) for member in problem.members}
        self.away: dict[str, dict[str, set[int]]] = {member: defaultdict(set) for member in problem.members}
        # member -> previous owner -> partitions it holds that belong to that owner
        self.borrowed: dict[str, dict[str, set[TopicPartition]]] = {m: defaultdict(set) for m in problem.members}

    def count(self, member: str) -> int:
        return len(self.held[member])

    def give(self, tp: TopicPartition, member: str) -> None:
        self.held[member].add(tp)
        original = self.problem.owner.get(tp)
        bucket = self.at_home if original == member else self.away
        bucket[member][tp[0]].add(tp[1])
        if original is not None and original != member:
            self.borrowed[member][original].add(tp)

    def take(self, tp: TopicPartition, member: str) -> None:
        self.held[member].remove(tp)
        original = self.problem.owner.get(tp)
        bucket = (self.at_home if original == member else self.away)[member]
        bucket[tp[0]].discard(tp[1])
        if not bucket[tp[0]]:
            del bucket[tp[0]]
        if original is not None and original != member:
            self.borrowed[member][original].discard(tp)
            if not self.borrowed[member][original]:
                del self.borrowed[member][original]

    def hand_over(self, tp: TopicPartition, source: str, target: str) -> None:
        self.take(tp, source)
        self.give(tp, target)

    def cheapest_handover(self, source: str, target: str) -> _Handover | None:
        """The partition `source` should hand `target` if it hands one over: home first, never-owned next."""
        going_home = self.borrowed[source].get(target)
        if going_home:
            return _Handover(-1, min(going_home))
        wanted = self.problem.eligible[target]
        for cost, bucket in ((0, self.away[source]), (1, self.at_home[source])):
            if not wanted.isdisjoint(bucket):
                topic = min(topic for topic in bucket if topic in wanted)
                return _Handover(cost, (topic, min(bucket[topic])))
        return None


def _give_unowned_to_least_loaded(state: _Holdings) -> None:
    """Partitions with the fewest possible takers first, each to its least-loaded subscriber."""
    problem = state.problem
    unowned = [tp for tp in problem.partitions if tp not in problem.owner]
    unowned.sort(key=lambda tp: (len(problem.subscribers[tp[0]]), tp))
    for tp in unowned:
        taker = min(problem.subscribers[tp[0]], key=lambda member: (state.count(member), state.rank[member]))
        state.give(tp, taker)


def _balance_by_direct_handovers(state: _Holdings) -> None:
    """Move load straight from heavy members to light ones that can take it, until no direct move helps."""
    members = state.problem.members
    while True:
        by_load = sorted(members, key=lambda member: (state.count(member), state.rank[member]))
        pair = next(
            (
                (heavy, light)
                for light in by_load
                for heavy in reversed(by_load)
                if state.count(heavy) - state.count(light) >= 2 and state.cheapest_handover(heavy, light)
            ),
            None,
        )
        if pair is None:
            return
        heavy, light = pair
        while state.count(heavy) - state.count(light) >= 2 and (move := state.cheapest_handover(heavy, light)):
            state.hand_over(move.partition, heavy, light)


def _cancel_negative_cycles(state: _Holdings) -> None:
    graph = _CycleGraph(state)
    while (cycle := graph.find_negative_cycle()) is not None:
        while True:
            for source, target, handover in cycle:
                if handover is not None:
                    state.hand_over(handover.partition, state.problem.members[source], state.problem.members[target])
            graph.refresh({source for source, _, handover in cycle if handover is not None})
            cycle = graph.same_cycle_if_still_negative(cycle)
            if cycle is None:
                break


_Arc = tuple[int, int, "_Handover | None"]  # source node, target node, the hand-over (None: an arc of the load node)


class _CycleGraph:
    """Members as nodes 0..n-1 plus a load node n; hand-over arcs cost their change in `moved`.

    Closing a chain s -> ... -> t through the load node costs BIG * (change in sum(count^2)) for count(s) - 1 and
    count(t) + 1, so a negative cycle through it is a chain that evens out load (or swaps equal load for fewer moves).
    """

    def __init__(self, state: _Holdings) -> None:
        self.state = state
        self.members = state.problem.members
        self.load_node = len(self.members)
        self.big = len(self.members) + 1  # a simple cycle changes `moved` by at most len(members)
        self.handovers: list[dict[int, _Handover]] = [{} for _ in self.members]
        self.refresh(set(range(len(self.members))))

    def refresh(self, sources: set[int]) -> None:
        """Recompute hand-over arcs out of members whose holdings changed."""
        for source in sources:
            source_member = self.members[source]
            arcs = {}
            for target, target_member in enumerate(self.members):
                if target != source and (handover := self.state.cheapest_handover(source_member, target_member)):
                    arcs[target] = handover
            self.handovers[source] = arcs

    def arcs(self) -> list[_Arc]:
        result: list[_Arc] = []
        for source, arcs in enumerate(self.handovers):
            result.extend((source, target, handover) for target, handover in arcs.items())
        for node in range(len(self.members)):
            result.append((node, self.load_node, None))
            if self.state.count(self.members[node]):
                result.append((self.load_node, node, None))
        return result

    def cost(self, arc: _Arc) -> int:
        source, target, handover = arc
        if handover is not None:
            return handover.cost
        if target == self.load_node:  # the chain ends here: this member gains one
            return self.big * (2 * self.state.count(self.members[source]) + 1)
        return -self.big * (2 * self.state.count(self.members[target]) - 1)  # the chain starts here: it loses one

    def same_cycle_if_still_negative(self, cycle: list[_Arc]) -> list[_Arc] | None:
        """The cycle just cancelled, with fresh hand-overs, if cancelling it again still pays."""
        renewed: list[_Arc] = []
        for source, target, handover in cycle:
            if handover is not None:
                fresh = self.handovers[source].get(target)
                if fresh is None:
                    return None
                renewed.append((source, target, fresh))
            else:
                if target != self.load_node and not self.state.count(self.members[target]):
                    return None
                renewed.append((source, target, None))
        return renewed if sum(self.cost(arc) for arc in renewed) < 0 else None

    def find_negative_cycle(self) -> list[_Arc] | None:
        """Bellman-Ford from a virtual source; after each pass, any cycle among the predecessors is negative."""
        node_count = self.load_node + 1
        arcs = [(arc, self.cost(arc)) for arc in self.arcs()]
        distance = [0] * node_count
        reached_by: list[_Arc | None] = [None] * node_count
        for _ in range(node_count):
            relaxed = False
            for arc, cost in arcs:
                source, target, _handover = arc
                if distance[source] + cost < distance[target]:
                    distance[target] = distance[source] + cost
                    reached_by[target] = arc
                    relaxed = True
            if not relaxed:
                return None
            if (cycle := _predecessor_cycle(reached_by)) is not None:
                return cycle
        return _predecessor_cycle(reached_by)


def _predecessor_cycle(reached_by: list[_Arc | None]) -> list[_Arc] | None:
    """A cycle in the predecessor graph, as arcs in forward order, or None."""
    walk_of = [-1] * len(reached_by)
    for start in range(len(reached_by)):
        node: int | None = start
        while node is not None and walk_of[node] == -1:
            walk_of[node] = start
            arc = reached_by[node]
            node = arc[0] if arc is not None else None
        if node is not None and walk_of[node] == start:
            cycle, current = [], node
            while True:
                arc = reached_by[current]
                assert arc is not None
                cycle.append(arc)
                current = arc[0]
                if current == node:
                    return cycle[::-1]
    return None
