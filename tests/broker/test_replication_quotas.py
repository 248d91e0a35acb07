"""The byte-rate budget of the replication quotas and of moves between log dirs (kbroker.replication_quotas), on a
clock of the test's own: what it lets through and how long it makes the throttled work wait; and which replicas
the topic configs name."""

from __future__ import annotations

from kbroker.config import BrokerConfig
from kbroker.replication_quotas import (
    LONGEST_WAIT_S,
    SHORTEST_WAIT_S,
    ByteRateLimit,
    dynamic_rate,
    names_replica,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_rate_the_copies_never_wait():
    throttle = ByteRateLimit(lambda: None, Clock())
    throttle.spend(10 ** 9)
    assert throttle.wait_s() == 0


def test_a_copy_waits_once_a_second_of_the_rate_is_spent_and_as_long_as_the_overspend_takes():
    clock = Clock()
    throttle = ByteRateLimit(lambda: 1000, clock)
    clock.now += 5  # idle time refills the budget to one second's worth, no more
    assert throttle.wait_s() == 0
    throttle.spend(1500)
    assert throttle.wait_s() == 0.5
    clock.now += 0.5
    assert throttle.wait_s() == SHORTEST_WAIT_S  # the budget is back at zero, not above it
    clock.now += 0.1
    assert throttle.wait_s() == 0


def test_over_a_long_stretch_the_copies_average_no_more_than_the_rate():
    clock, rate, copied = Clock(), 10_000, 0
    throttle = ByteRateLimit(lambda: rate, clock)
    end = clock.now + 30
    while clock.now < end:
        if wait := throttle.wait_s():
            clock.now += wait
            continue
        throttle.spend(4096)
        copied += 4096
        clock.now += 0.001
    assert rate * 29 <= copied <= rate * 31 + 4096


def test_a_rate_of_zero_holds_the_copies_and_looks_again_every_second():
    clock = Clock()
    throttle = ByteRateLimit(lambda: 0, clock)
    clock.now += 5
    assert throttle.wait_s() == LONGEST_WAIT_S


def test_this_brokers_rate_comes_before_the_cluster_default_and_a_malformed_one_means_unlimited():
    name = "leader.replication.throttled.rate"

    def config(this_broker: dict[str, str], cluster_default: dict[str, str]) -> BrokerConfig:
        return BrokerConfig(dynamic_broker=this_broker, dynamic_default=cluster_default)

    assert dynamic_rate(config({name: "500"}, {name: "100"}), name) == 500
    assert dynamic_rate(config({}, {name: "100"}), name) == 100
    assert dynamic_rate(config({}, {}), name) is None
    assert dynamic_rate(config({name: "fast"}, {name: "100"}), name) is None


def test_a_throttled_replicas_list_names_a_replica_by_partition_and_broker_or_all_with_a_star():
    assert names_replica("0:1,1:2", 1, 2) and not names_replica("0:1,1:2", 1, 1)
    assert names_replica(" 0:1 , 1:2 ", 0, 1)
    assert names_replica("*", 7, 3) and names_replica(["*"], 7, 3)
    assert not names_replica(None, 0, 1) and not names_replica("", 0, 1)
