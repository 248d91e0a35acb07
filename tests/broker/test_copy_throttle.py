"""The throttle of moves between log dirs (replica.alter.log.dirs.io.max.bytes.per.second), on a clock of the
test's own: what it lets through and how long it makes the copies wait."""

from __future__ import annotations

from kbroker.log_dir_mover import LONGEST_THROTTLE_WAIT_S, SHORTEST_THROTTLE_WAIT_S, CopyThrottle, throttle_rate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_rate_the_copies_never_wait():
    throttle = CopyThrottle(lambda: None, Clock())
    throttle.spend(10 ** 9)
    assert throttle.wait_s() == 0


def test_a_copy_waits_once_a_second_of_the_rate_is_spent_and_as_long_as_the_overspend_takes():
    clock = Clock()
    throttle = CopyThrottle(lambda: 1000, clock)
    clock.now += 5  # idle time refills the budget to one second's worth, no more
    assert throttle.wait_s() == 0
    throttle.spend(1500)
    assert throttle.wait_s() == 0.5
    clock.now += 0.5
    assert throttle.wait_s() == SHORTEST_THROTTLE_WAIT_S  # the budget is back at zero, not above it
    clock.now += 0.1
    assert throttle.wait_s() == 0


def test_over_a_long_stretch_the_copies_average_no_more_than_the_rate():
    clock, rate, copied = Clock(), 10_000, 0
    throttle = CopyThrottle(lambda: rate, clock)
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
    throttle = CopyThrottle(lambda: 0, clock)
    clock.now += 5
    assert throttle.wait_s() == LONGEST_THROTTLE_WAIT_S


def test_this_brokers_rate_comes_before_the_cluster_default_and_a_malformed_one_means_unlimited():
    name = "replica.alter.log.dirs.io.max.bytes.per.second"
    assert throttle_rate({name: "500"}, {name: "100"}) == 500
    assert throttle_rate({}, {name: "100"}) == 100
    assert throttle_rate({}, {}) is None
    assert throttle_rate({name: "fast"}, {name: "100"}) is None
