"""Transactions through broker kills, and a checker over their whole history.

Any Kafka-compatible cluster (kbroker's or Apache Kafka's, from cluster_processes.py) can be put through it:

- Writers: one confluent-kafka transactional producer per transactional id, running transactions one after
  another (every third aborted on purpose), each of `records` records spread over the topic's partitions. Each
  transaction's end is noted as the producer learnt it: committed, aborted, or unknown (the producer failed on
  the way; a new producer with the same id then takes over, which ends the old transaction one way or the other).
- A live read_committed consumer reads the topic all along.
- The nemesis kill -9s brokers in turn (a transactional id's coordinator, a partition's leader, the controller),
  waits until the writers commit again without the victim, restarts it and waits for every ISR to be whole.

`check` then proves over the full history, from a final read_committed read of the whole topic: each committed
transaction's records once each, in the order sent; none of an aborted one; an unknown one whole or not at all;
no record nobody sent; and every record the live consumer saw still there at the same offset.

Used by tests/cluster/test_transaction_history.py (bounded, in CI) and bench/suites/cluster_transactions.py (long).
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from cluster_processes import BrokerExited, ClusterBroker, check_running, wait_until
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kbroker.coordinator.hashing import partition_for

STATE_TOPIC = "__transaction_state"
ROLES = ("coordinator", "leader", "controller")
CALL_TIMEOUT_S = 30
JOIN_S = 240  # the writers' last transactions end, or a new producer of each id ends them
PARTITION_EOF = -191
QUIET = {"log_level": 0}


def record_value(transactional_id: str, number: int, index: int) -> bytes:
    return f"{transactional_id}/{number}/{index}".encode()


def parse_value(value: bytes) -> tuple[str, int, int] | None:
    parts = value.decode(errors="replace").rsplit("/", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


# --- writers ----------------------------------------------------------------------------------------------------


class Writer(threading.Thread):
    """One transactional id's transactions, one after another, until told to stop; `outcomes` maps each
    transaction's number to committed, aborted or unknown."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str, records: int = 6,
                 pause_s: float = 0.0, transaction_timeout_ms: int = 20_000) -> None:
        super().__init__(name=f"writer-{transactional_id}", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.transactional_id = transactional_id
        self.records = records
        self.pause_s = pause_s
        self.transaction_timeout_ms = transaction_timeout_ms
        self.outcomes: dict[int, str] = {}
        self.commit_times: list[float] = []  # monotonic time of each commit's return
        self.producers = 0
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def partition_of(self, index: int) -> int:
        return index % self.partitions

    def committed(self) -> int:
        return len(self.commit_times)

    def run(self) -> None:
        try:
            self._transactions()
        except BaseException as error:  # reported by the caller through `failure`
            self.failure = error

    def _transactions(self) -> None:
        producer = self._new_producer()
        number = 0
        while not self.stop.is_set():
            commit = number % 3 != 2
            try:
                producer.begin_transaction()
                for index in range(self.records):
                    producer.produce(self.topic, record_value(self.transactional_id, number, index),
                                     partition=self.partition_of(index))
                self.outcomes[number] = self._end(producer, commit)
                if self.outcomes[number] == "committed":
                    self.commit_times.append(time.monotonic())
            except KafkaException:
                self.outcomes[number] = "unknown"
                producer = self._new_producer()  # its InitProducerId ends the old transaction, whichever way
            number += 1
            if self.pause_s:
                self.stop.wait(self.pause_s)

    def _end(self, producer: Producer, commit: bool) -> str:
        """Commit or abort, retrying what librdkafka calls retriable; an abortable error aborts."""
        if commit:
            try:
                _retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S), self.stop)
                return "committed"
            except KafkaException as error:
                if not error.args[0].txn_requires_abort():
                    raise
        _retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S), self.stop)
        return "aborted"

    def _new_producer(self, give_up_s: float = 180) -> Producer:
        """A producer that got through InitProducerId (brokers may be down or failing over meanwhile). Also after
        `stop`: its InitProducerId is what ends a transaction left unknown, so that the final read finds it ended."""
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                                 "transaction.timeout.ms": self.transaction_timeout_ms, "linger.ms": 1, **QUIET})
            self.producers += 1
            try:
                _retrying(lambda p=producer: p.init_transactions(CALL_TIMEOUT_S), threading.Event(),
                          deadline - time.monotonic())
                return producer
            except KafkaException:
                time.sleep(0.5)
        raise TimeoutError(f"{self.transactional_id}: no producer got through InitProducerId in {give_up_s} s")


def _retrying(call: Callable[[], None], stop: threading.Event, give_up_s: float = 150) -> None:
    """`call` again while librdkafka calls its error retriable, until it succeeds, `give_up_s` pass, or `stop` is set
    (then the last error is raised: the transaction's end is unknown)."""
    deadline = time.monotonic() + give_up_s
    while True:
        try:
            call()
            return
        except KafkaException as error:
            if not error.args[0].retriable() or time.monotonic() > deadline or stop.is_set():
                raise
            time.sleep(0.2)


# --- readers ----------------------------------------------------------------------------------------------------


class LiveReader(threading.Thread):
    """A read_committed consumer over the whole topic while the history runs: (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="live-reader", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "history-live-reader",
                                  "isolation.level": "read_committed", "enable.auto.commit": False, **QUIET})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.seen: dict[tuple[int, int], bytes] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for message in self.consumer.consume(500, timeout=0.2):
                    if message.error() is None:
                        self.seen[(message.partition(), message.offset())] = message.value()
        finally:
            self.consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "history-ends", "isolation.level": isolation,
                         **QUIET})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def stable(bootstrap: str, topic: str, partitions: int) -> bool:
    """No transaction open in the topic: each partition's last stable offset is its high watermark."""
    try:
        return end_offsets(bootstrap, topic, partitions, "read_committed") == \
            end_offsets(bootstrap, topic, partitions, "read_uncommitted")
    except KafkaException:
        return False


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> dict[tuple[int, int], bytes]:
    """The whole topic as a read_committed consumer reads it, once no transaction is open in it."""
    wait_until(lambda: stable(bootstrap, topic, partitions), f"every transaction in {topic} ended (LSO = HW)",
               timeout)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "history-final-reader",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, **QUIET})
    seen: dict[tuple[int, int], bytes] = {}
    at_end: set[int] = set()

    def poll() -> bool:
        for message in consumer.consume(1000, timeout=0.5):
            if message.error() is None:
                seen[(message.partition(), message.offset())] = message.value()
            elif message.error().code() == PARTITION_EOF:
                at_end.add(message.partition())
        return len(at_end) == partitions

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        wait_until(poll, f"a read_committed consumer reached the end of every partition of {topic}", timeout, 0)
    finally:
        consumer.close()
    return seen


# --- the checker ------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    outcomes: Counter = field(default_factory=Counter)
    records_read: int = 0
    live_records: int = 0
    violations: list[str] = field(default_factory=list)


def check(writers: Iterable[Writer], final: dict[tuple[int, int], bytes],
          live: dict[tuple[int, int], bytes]) -> Verdict:
    """Every rule of the module docstring over the full history; a violation is one line each."""
    writers = {w.transactional_id: w for w in writers}
    verdict = Verdict(records_read=len(final), live_records=len(live))
    found: dict[tuple[str, int], list[tuple[int, int, int]]] = defaultdict(list)  # (id, n) -> (index, part, offset)
    order: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), value in sorted(final.items()):
        parsed = parse_value(value)
        if parsed is None or parsed[0] not in writers or parsed[1] not in writers[parsed[0]].outcomes:
            verdict.violations.append(f"{partition}@{offset}: {value!r} is no transaction's record")
            continue
        transactional_id, number, index = parsed
        found[(transactional_id, number)].append((index, partition, offset))
        order[(partition, transactional_id)].append((number, index))
    for writer in writers.values():
        for number, outcome in writer.outcomes.items():
            verdict.outcomes[outcome] += 1
            got = found.get((writer.transactional_id, number), [])
            verdict.violations += _transaction_violations(writer, number, outcome, got)
    for (partition, transactional_id), sequence in order.items():
        if sequence != sorted(set(sequence)):
            verdict.violations.append(f"{transactional_id}'s records in partition {partition} are out of send order")
    for (partition, offset), value in sorted(live.items()):
        if final.get((partition, offset)) != value:
            verdict.violations.append(f"{partition}@{offset}: the live reader saw {value!r}, the final read "
                                      f"{final.get((partition, offset))!r}")
    return verdict


def _transaction_violations(writer: Writer, number: int, outcome: str, got: list[tuple[int, int, int]]) -> list[str]:
    name = f"{writer.transactional_id} transaction {number} ({outcome})"
    if not got:
        return [f"{name}: none of its {writer.records} records read"] if outcome == "committed" else []
    if outcome == "aborted":
        return [f"{name}: {len(got)} of its records read"]
    indexes = Counter(index for index, _, _ in got)
    problems = [f"{name}: record {i} read {n} times" for i, n in sorted(indexes.items()) if n > 1]
    if set(indexes) != set(range(writer.records)):
        problems.append(f"{name}: read records {sorted(indexes)}, not all {writer.records}")
    problems += [f"{name}: record {index} in partition {partition}, sent to {writer.partition_of(index)}"
                 for index, partition, _ in got if partition != writer.partition_of(index)]
    return problems


# --- the nemesis ------------------------------------------------------------------------------------------------


@dataclass
class Kill:
    role: str
    broker_id: int
    stall_s: float  # from the kill until every writer has committed twice after it
    restored_s: float  # from the restart to every ISR whole again


class Nemesis:
    """Kills brokers of a cluster one at a time, by role, and brings them back."""

    def __init__(self, brokers: dict[int, ClusterBroker], topic: str, partitions: int, state_partitions: int,
                 writers: Collection[Writer], failover_s: float = 90) -> None:
        self.brokers = brokers
        self.topic = topic
        self.partitions = partitions
        self.state_partitions = state_partitions
        self.writers = list(writers)
        self.failover_s = failover_s
        self.kills: list[Kill] = []

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.pid is not None)

    def _metadata(self, via: str | None = None):
        return AdminClient({"bootstrap.servers": via or self.bootstrap(), **QUIET}).list_topics(timeout=10)

    def victim(self, role: str, turn: int) -> int:
        metadata = self._metadata()
        if role == "controller":
            return metadata.controller_id
        if role == "coordinator":
            writer = self.writers[turn % len(self.writers)]
            state = metadata.topics[STATE_TOPIC].partitions
            return state[partition_for(writer.transactional_id, len(state))].leader
        return metadata.topics[self.topic].partitions[turn % self.partitions].leader

    def committed(self) -> int:
        return sum(w.committed() for w in self.writers)

    def wait_for_commits(self, after: float, what: str, each: int = 1) -> float:
        """The moment every writer has committed `each` transactions after `after` (a writer's failure ends the
        wait)."""
        def last_of_firsts() -> float | None:
            self._check_writers()
            firsts = []
            for writer in self.writers:
                times = [t for t in list(writer.commit_times) if t > after]
                if len(times) < each:
                    return None
                firsts.append(times[each - 1])
            return max(firsts)
        return wait_until(last_of_firsts, what, self.failover_s, give_up=(AssertionError,))

    def _check_writers(self) -> None:
        for writer in self.writers:
            if writer.failure is not None:
                raise AssertionError(f"writer {writer.transactional_id} failed") from writer.failure

    def whole(self) -> bool:
        """Every live broker's Metadata shows every partition of the topic and of the state log with all brokers
        in its ISR (BrokerExited if one has died by itself)."""
        check_running(self.brokers.values())
        everyone = len(self.brokers)
        try:
            for broker in self.brokers.values():
                metadata = self._metadata(broker.bootstrap)
                for name, count in ((self.topic, self.partitions), (STATE_TOPIC, self.state_partitions)):
                    topic = metadata.topics.get(name)
                    if topic is None or len(topic.partitions) != count or any(
                            p.leader < 0 or len(p.isrs) != everyone for p in topic.partitions.values()):
                        return False
        except KafkaException:
            return False
        return True

    def round(self, turn: int, commits_before: int = 2) -> Kill:
        """One kill: of ROLES[turn % 3]'s broker, once the writers have just committed; back when they commit
        again without it."""
        role = ROLES[turn % len(ROLES)]
        self.wait_for_commits(time.monotonic(), "every writer commits before the kill", commits_before)
        broker_id = self.victim(role, turn)
        killed_at = time.monotonic()
        self.brokers[broker_id].stop(signal.SIGKILL)
        resumed = self.wait_for_commits(killed_at, f"every writer commits again after the kill of the {role}, "
                                                   f"broker {broker_id}", 2)
        # its ZooKeeper session must have expired (the cluster forgot it) before it registers again
        wait_until(lambda: broker_id not in self._metadata().brokers, f"the cluster forgets broker {broker_id}",
                   self.failover_s)
        restarted_at = time.monotonic()
        self.brokers[broker_id].start()
        wait_until(self.whole, f"broker {broker_id} is back in every ISR", self.failover_s, 0.5,
                   give_up=(BrokerExited,))
        kill = Kill(role, broker_id, resumed - killed_at, time.monotonic() - restarted_at)
        self.kills.append(kill)
        return kill


@dataclass
class History:
    writers: list[Writer]
    reader: LiveReader
    nemesis: Nemesis
    seconds: float = 0.0


def run_history(brokers: dict[int, ClusterBroker], topic: str, partitions: int, state_partitions: int,
                transactional_ids: list[str], kills: int, failover_s: float = 90, pause_s: float = 0.0,
                records: int = 6) -> tuple[History, Verdict]:
    """Writers and a live reader through `kills` rounds of the nemesis, then the final read and the check. The
    topic and every broker must exist already; the brokers are all live at the end."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    writers = [Writer(bootstrap, topic, partitions, t, records, pause_s) for t in transactional_ids]
    reader = LiveReader(bootstrap, topic, partitions)
    nemesis = Nemesis(brokers, topic, partitions, state_partitions, writers, failover_s)
    history = History(writers, reader, nemesis)
    started = time.monotonic()
    reader.start()
    for writer in writers:
        writer.start()
    try:
        wait_until(nemesis.whole, "the transaction state log and the topic are whole", failover_s, 0.5)
        for turn in range(kills):
            nemesis.round(turn)
        nemesis.wait_for_commits(time.monotonic(), "every writer commits after the last restart")
    finally:
        for writer in writers:
            writer.stop.set()
        _join(writers, JOIN_S)
    history.seconds = time.monotonic() - started
    nemesis._check_writers()
    final = read_committed(nemesis.bootstrap(), topic, partitions)
    reader.stop.set()
    _join([reader], 30)
    return history, check(writers, final, reader.seen)


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Every thread ended within `seconds` in all, or AssertionError (one still running would change the history
    under the checker)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = [t.name for t in threads if t.is_alive()]
    assert not running, f"still running {seconds:g} s after being told to stop: {running}"
