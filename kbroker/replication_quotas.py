"""Kafka's replication quotas (KIP-73): byte rates that throttle chosen replicas while they catch up.

`kafka-reassign-partitions --throttle` sets them for a reassignment: the dynamic broker configs
leader.replication.throttled.rate and follower.replication.throttled.rate (bytes per second, unset: no limit), and
the topic configs leader.replication.throttled.replicas and follower.replication.throttled.replicas ("*", or
partition:broker pairs naming the replicas each broker throttles). A leader leaves a throttled replica's records
out of its fetch answer while its leader rate is spent; a follower leaves throttled partitions out of its fetches
while its follower rate is spent. Replicas in the ISR are never throttled, as in Kafka. The same budget, with the
dynamic config replica.alter.log.dirs.io.max.bytes.per.second, throttles copies between log dirs
(kbroker.log_dir_mover).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LONGEST_WAIT_S = 1.0  # a throttled copy looks at the (dynamic) rate again at least this often
SHORTEST_WAIT_S = 0.001


def dynamic_rate(config, name: str) -> float | None:
    """The rate `name` this broker's dynamic configs give, else the cluster default's; None when neither sets it,
    or its value is not a whole number (Kafka's default: unlimited)."""
    for layer in (config.dynamic_broker, config.dynamic_default):
        if name in layer:
            try:
                return max(0, int(layer[name]))
            except ValueError:
                return None
    return None


def names_replica(throttled: object, partition: int, broker_id: int) -> bool:
    """Whether a *.replication.throttled.replicas value ("*" or partition:broker pairs, as text or a list) names
    this replica."""
    if not throttled:
        return False
    items = [str(item).strip() for item in (throttled.split(",") if isinstance(throttled, str) else throttled)]
    return items == ["*"] or f"{partition}:{broker_id}" in items


class ByteRateLimit:
    """A byte budget refilled at a rate and holding at most one second of it: while it is spent the throttled work
    waits, so over any stretch longer than a second it averages no more than the rate. `rate` is read again on
    every call (a dynamic config); None means no limit."""

    def __init__(self, rate: Callable[[], float | None], clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = rate, clock
        self._budget = 0.0
        self._refilled = clock()

    def wait_s(self) -> float:
        """How long to wait before the next throttled bytes (0: go on)."""
        rate, now = self.rate(), self.clock()
        elapsed, self._refilled = now - self._refilled, now
        if rate is None:
            self._budget = 0.0
            return 0.0
        self._budget = min(float(rate), self._budget + elapsed * rate)
        if self._budget > 0:
            return 0.0
        if rate == 0:
            return LONGEST_WAIT_S
        return min(max(-self._budget / rate, SHORTEST_WAIT_S), LONGEST_WAIT_S)

    def exceeded(self) -> bool:
        return self.wait_s() > 0

    def spend(self, size: int) -> None:
        if size and self.rate() is not None:
            self._budget -= size


class ReplicationQuotas:
    """This broker's leader and follower replication throttles, and which of its replicas they apply to."""

    def __init__(self, broker_id: Callable[[], int], config: Callable[[], object],
                 topic_configs: Callable[[str], Mapping[str, object] | None]) -> None:
        self.broker_id, self.topic_configs = broker_id, topic_configs
        self.leader = ByteRateLimit(lambda: dynamic_rate(config(), LEADER_RATE))
        self.follower = ByteRateLimit(lambda: dynamic_rate(config(), FOLLOWER_RATE))

    def _named(self, which: str, topic: str, partition: int) -> bool:
        configs = self.topic_configs(topic)
        return configs is not None and names_replica(configs.get(which), partition, self.broker_id())

    def leader_throttles(self, topic: str, partition: int, isr: frozenset[int], replica_id: int) -> bool:
        """Whether this leader throttles what it sends follower `replica_id` of the partition (never an ISR
        member's, as Kafka's shouldLeaderThrottle)."""
        return replica_id not in isr and self._named(LEADER_REPLICAS, topic, partition)

    def follower_throttles(self, topic: str, partition: int, isr: frozenset[int]) -> bool:
        """Whether this follower throttles its fetches of the partition (not once it is in the ISR)."""
        return self.broker_id() not in isr and self._named(FOLLOWER_REPLICAS, topic, partition)
