"""A checker of what producers were told and what consumers and replicas saw, for failover tests.

Every record a test sends carries a unique value "<producer>-<sequence>". The history holds each producer's sends
in order, every acknowledgement (partition, offset) or delivery error, every record a consumer read while the
cluster was failing over, and at the end the log of each replica. `problems(history)` lists every way the
history breaks Kafka's promise for acks=all with idempotence on (for the producers named `at_least_once`, without
it: a retry may write a record twice, but nothing acknowledged may be missing); an empty list is a pass.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from wire.records import iter_batches, iter_records

Placed = tuple[int, int]  # (partition, offset)
_VALUE = re.compile(r"^(?P<producer>.+)-(?P<sequence>\d+)$")


@dataclass
class History:
    sent: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # producer -> values, in order
    acked: dict[str, Placed] = field(default_factory=dict)  # value -> where the broker said it is
    failed: dict[str, str] = field(default_factory=dict)  # value -> delivery error
    observed: list[tuple[int, int, str]] = field(default_factory=list)  # consumers' (partition, offset, value)
    replicas: dict[int, dict[int, list[tuple[int, str]]]] = field(default_factory=dict)  # broker -> partition -> log
    at_least_once: set[str] = field(default_factory=set)  # producers without idempotence: duplicates allowed
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def send(self, value: str) -> None:
        assert _VALUE.match(value), f"a history value is <producer>-<sequence>, not {value!r}"
        with self._lock:
            self.sent[_producer(value)].append(value)

    def ack(self, value: str, partition: int, offset: int) -> None:
        with self._lock:
            assert value not in self.acked, f"{value} acknowledged twice"
            self.acked[value] = (partition, offset)

    def fail(self, value: str, error: str) -> None:
        with self._lock:
            self.failed[value] = error

    def observe(self, partition: int, offset: int, value: str) -> None:
        with self._lock:
            self.observed.append((partition, offset, value))


def problems(history: History, leader_log: dict[int, list[tuple[int, str]]]) -> list[str]:
    """Every broken promise: `leader_log` is what a consumer read from the leaders at the end (partition ->
    [(offset, value)]), and every replica in history.replicas must hold exactly that."""
    found: list[str] = []
    final: dict[str, list[Placed]] = defaultdict(list)
    for partition, records in leader_log.items():
        for offset, value in records:
            final[value].append((partition, offset))
    found += [f"{value} is in the log {len(places)} times: {places}" for value, places in final.items()
              if len(places) > 1 and _producer(value) not in history.at_least_once]
    for value, place in sorted(history.acked.items()):
        if place not in final.get(value, []):
            found.append(f"{value} acknowledged at {place} but the log has it at {final.get(value) or 'no offset'}")
    found += _order_problems(history, final)
    by_place = {(p, o): v for p, records in leader_log.items() for o, v in records}
    for partition, offset, value in history.observed:
        if by_place.get((partition, offset)) != value:
            found.append(f"a consumer read {value} at {(partition, offset)}; the log ends with "
                         f"{by_place.get((partition, offset))!r} there")
    unsent = set(final) - {v for values in history.sent.values() for v in values}
    found += [f"{value} is in the log but was never sent" for value in sorted(unsent)]
    for broker, logs in sorted(history.replicas.items()):
        for partition, records in sorted(leader_log.items()):
            if logs.get(partition, []) != records:
                found.append(f"broker {broker}'s replica of partition {partition} differs from the leader's log: "
                             f"{_first_difference(logs.get(partition, []), records)}")
    return found


def _producer(value: str) -> str:
    found = _VALUE.match(value)
    return found["producer"] if found else ""


def _order_problems(history: History, final: dict[str, list[Placed]]) -> list[str]:
    """One producer's records land in each partition in the order it sent them (idempotence keeps order across
    retries)."""
    found = []
    for producer, values in history.sent.items():
        last: dict[int, tuple[int, str]] = {}
        for value in values:
            for partition, offset in final.get(value, [])[:1]:
                before = last.get(partition)
                if before is not None and before[0] > offset:
                    found.append(f"{producer}: {value} (offset {offset}) follows {before[1]} (offset {before[0]}) "
                                 f"in partition {partition}")
                last[partition] = (offset, value)
    return found


def _first_difference(replica: list[tuple[int, str]], leader: list[tuple[int, str]]) -> str:
    for index, (mine, theirs) in enumerate(zip(replica, leader, strict=False)):
        if mine != theirs:
            return f"record {index}: {mine} where the leader has {theirs}"
    return f"{len(replica)} records where the leader has {len(leader)}"


def replica_log(partition_dir: Path) -> list[tuple[int, str]]:
    """(offset, value) of every data record in a partition directory's segments, read from the files (Kafka's
    on-disk format), control batches left out."""
    records: list[tuple[int, str]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for position, header in iter_batches(data):
            if not header.is_control:
                records += [(r.offset, (r.value or b"").decode()) for r in iter_records(data, position)]
    return records
