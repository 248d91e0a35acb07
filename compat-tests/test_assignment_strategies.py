"""Client-side assignors over the classic protocol: three confluent-kafka consumers share a
10-partition topic under each `partition.assignment.strategy`.

The broker only relays: the leader gets every member's subscription in its JoinGroup answer,
computes the assignment, and SyncGroup hands each member its share. So the layout must be
exactly the one the strategy defines. librdkafka's range and roundrobin assignors order the
members by member id, as Kafka's do:

    range:      [0, 1, 2, 3], [4, 5, 6], [7, 8, 9]
    roundrobin: [0, 3, 6, 9], [1, 4, 7], [2, 5, 8]

cooperative-sticky rebalances incrementally (KIP-429): a member gives up only the partitions
that move, then everyone rejoins once more, so the group goes through two generations.
"""

from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402

from kbroker.testing import BrokerProcess  # noqa: E402

from confluent_client import produce  # noqa: E402
from settle import create_topic  # noqa: E402

pytestmark = pytest.mark.client("confluent-kafka")

PARTITIONS = 10
EXPECTED_LAYOUT = {
    "range": [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]],
    "roundrobin": [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]],
}
SETTLE_TIMEOUT = 40


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker whose first generation forms after 100 ms rather than Kafka's 3 s."""
    return own_broker("assignors", "group.initial.rebalance.delay.ms=100")


def _topic(bootstrap: str) -> str:
    return create_topic(bootstrap, f"assign-{uuid.uuid4().hex[:10]}", PARTITIONS)


def _consumer(bootstrap: str, group: str, strategy: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 50})


def _partitions(consumer: Consumer) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())


def _settle(consumers: list[Consumer], balanced: list[int], received: dict[int, list]) -> None:
    """Poll every consumer until the assignments cover each partition once in the `balanced`
    sizes, and stay so for a second (a cooperative group needs a second generation)."""
    steady_since = None
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                received[index].append(message)
        owned = [_partitions(c) for c in consumers]
        every_partition_once = sorted(p for parts in owned for p in parts) == list(range(PARTITIONS))
        settled = every_partition_once and sorted(len(p) for p in owned) == balanced
        if not settled:
            steady_since = None
        elif steady_since is None:
            steady_since = time.monotonic()
        elif time.monotonic() - steady_since > 1.0:
            return
    raise AssertionError(f"assignment did not settle: {[_partitions(c) for c in consumers]}")


def _drain(consumers: list[Consumer], received: dict[int, list], total: int) -> None:
    deadline = time.monotonic() + 30
    while sum(map(len, received.values())) < total and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                received[index].append(message)


@pytest.mark.parametrize("strategy", [
    pytest.param("range", marks=pytest.mark.scenario("Assignment strategy: range")),
    pytest.param("roundrobin", marks=pytest.mark.scenario("Assignment strategy: roundrobin")),
])
def test_eager_assignor_lays_partitions_out_by_member_id(broker: BrokerProcess, strategy: str) -> None:
    topic = _topic(broker.bootstrap)
    group = f"{strategy}-{uuid.uuid4().hex[:8]}"
    consumers = [_consumer(broker.bootstrap, group, strategy) for _ in range(3)]
    received: dict[int, list] = {i: [] for i in range(3)}
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        _settle(consumers, [3, 3, 4], received)
        by_member = {c.memberid(): _partitions(c) for c in consumers}
        assert [by_member[m] for m in sorted(by_member)] == EXPECTED_LAYOUT[strategy]

        # records produced now reach exactly the consumer that owns their partition
        already = sum(map(len, received.values()))
        produce(broker.bootstrap, topic, [{"value": f"{p}-{i}".encode(), "partition": p}
                                          for p in range(PARTITIONS) for i in range(3)])
        _drain(consumers, received, already + 3 * PARTITIONS)
        for index, consumer in enumerate(consumers):
            assert sorted({m.partition() for m in received[index]}) == _partitions(consumer)
            assert len(received[index]) == 3 * len(_partitions(consumer))
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.mark.scenario("Assignment strategy: cooperative-sticky")
def test_cooperative_sticky_balances_three_consumers_and_keeps_owned_partitions(broker: BrokerProcess) -> None:
    topic = _topic(broker.bootstrap)
    group = f"coop-{uuid.uuid4().hex[:8]}"
    consumers = [_consumer(broker.bootstrap, group, "cooperative-sticky") for _ in range(3)]
    received: dict[int, list] = {i: [] for i in range(3)}
    try:
        for consumer in consumers[:2]:
            consumer.subscribe([topic])
        _settle(consumers[:2], [5, 5], received)
        before = [set(_partitions(c)) for c in consumers[:2]]

        consumers[2].subscribe([topic])  # an incremental rebalance: the first two give up one or two each
        _settle(consumers, [3, 3, 4], received)
        after = [set(_partitions(c)) for c in consumers]
        assert after[0] <= before[0] and after[1] <= before[1]  # sticky: nothing moved between the first two
        assert after[2] == (before[0] - after[0]) | (before[1] - after[1])
        assert consumers[0].memberid() != consumers[1].memberid() != consumers[2].memberid()
    finally:
        for consumer in consumers:
            consumer.close()
