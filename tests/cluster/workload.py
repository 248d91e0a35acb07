"""What the failover tests run and check: producers and a consumer working while a test breaks the cluster
(`Workload`), and the end-of-test check of their history against the leaders' and every replica's logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from history import History, problems, replica_log
from kafka import KafkaConsumer, TopicPartition
from kbroker_process import KbrokerCluster
from waiting import wait_until

EVERYONE = (1, 2, 3)
SECOND_LOG_DIR = "data-2"  # beside a broker's data dir, for the tests that give brokers two log dirs
RECORDS_PER_PRODUCER = 1500
TIMEOUT = 120


def create_topic(cluster: KbrokerCluster, name: str, partitions: int = 1, assignment: list[list[int]] | None = None,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    placement = {"replica_assignment": assignment} if assignment else {"replication_factor": 3}
    topic = NewTopic(name, num_partitions=partitions, config=config or {}, **placement)
    admin.create_topics([topic])[name].result(60)
    replicas = tuple(sorted(assignment[0])) if assignment else EVERYONE
    for index in range(partitions):
        wait_until(lambda i=index: cluster.in_sync(i, name, replicas), f"{name}-{index} has every replica in sync")


class Workload:
    """Producers and a consumer running against `topic` while a test breaks the cluster; all of it in `history`.
    confluent-kafka and aiokafka produce from threads here, `commands` (name -> command line) from processes.
    Use it in a `with` block: leaving it early stops everything it started."""

    def __init__(self, cluster: KbrokerCluster, topic: str, partitions: int,
                 commands: dict[str, list[str]] | None = None, count: int = RECORDS_PER_PRODUCER,
                 aiokafka: bool = True) -> None:
        self.bootstrap = cluster.bootstrap()
        self.topic, self.partitions, self.count = topic, partitions, count
        self.history = History(at_least_once={"kafkajs"})  # see compat-tests/node/history_producer.js
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.last_ack = time.monotonic()
        self.longest_wait = 0.0  # the longest time between two acknowledgements, in seconds
        self.names = ["confluent", *(["aiokafka"] if aiokafka else []), *(commands or {})]  # the values' prefixes
        self.processes = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                          for name, command in (commands or {}).items()}
        self.producing = [self._thread(self._confluent),
                          *([self._thread(lambda: asyncio.run(self._aiokafka()))] if aiokafka else []),
                          *(self._thread(self._lines, p) for p in self.processes.values())]
        self.reading = self._thread(self._read)
        for thread in [*self.producing, self.reading]:
            thread.start()

    def _thread(self, target: Callable[..., object], *args: object) -> threading.Thread:
        """A daemon thread whose exception finish() reports (a dead producer must not pass for a quiet one)."""
        def run() -> None:
            try:
                target(*args)
            except BaseException as error:
                self.errors.append(error)
        return threading.Thread(target=run, daemon=True)

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def _delivered(self, value: str, error: object, partition: int, offset: int) -> None:
        if error is None:
            self.history.ack(value, partition, offset)
            now = time.monotonic()
            self.longest_wait = max(self.longest_wait, now - self.last_ack)
            self.last_ack = now
        else:
            self.history.fail(value, str(error))

    def _confluent(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": TIMEOUT * 1000, "log_level": 0})
        for sequence in range(self.count):
            if self.stopping.is_set():
                return
            value = f"confluent-{sequence}"
            self.history.send(value)
            producer.produce(self.topic, value=value.encode(), on_delivery=lambda e, m, v=value: self._delivered(
                v, e, m.partition(), m.offset()))
            producer.poll(0.002)
        assert producer.flush(TIMEOUT) == 0, "confluent-kafka records still undelivered"

    async def _aiokafka(self) -> None:
        """Each answer is recorded when it arrives (not after the last send), so `last_ack` and `under_way` see
        aiokafka's acknowledgements as they happen."""
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                    linger_ms=5, request_timeout_ms=30_000, retry_backoff_ms=200)
        await producer.start()
        try:
            pending = []
            for sequence in range(self.count):
                value = f"aiokafka-{sequence}"
                self.history.send(value)
                try:
                    answer = await producer.send(self.topic, value.encode())
                except KafkaTimeoutError as error:  # no room for it within request_timeout_ms: never sent
                    self._delivered(value, error, -1, -1)
                    continue
                answer.add_done_callback(lambda done, v=value: self._answered(v, done))
                pending.append(answer)
                await asyncio.sleep(0.002)
            await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), TIMEOUT)
        finally:
            await producer.stop()

    def _answered(self, value: str, answer: asyncio.Future) -> None:
        """An aiokafka delivery's outcome, as the client reports it."""
        if answer.cancelled():
            self._delivered(value, "cancelled", -1, -1)
        elif answer.exception() is not None:
            self._delivered(value, answer.exception(), -1, -1)
        else:
            self._delivered(value, None, answer.result().partition, answer.result().offset)

    def _lines(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if "sent" in event:
                self.history.send(event["sent"])
            elif "value" in event:
                self._delivered(event["value"], event.get("error"), event.get("partition", -1),
                                event.get("offset", -1))

    def _read(self) -> None:
        """What a consumer sees while the cluster fails over: kafka-python, every partition from the start."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            while not self.stopping.is_set():
                for records in consumer.poll(timeout_ms=200).values():
                    for record in records:
                        self.history.observe(record.partition, record.offset, record.value.decode())
        finally:
            consumer.close()

    def acked(self, producer: str | None = None) -> int:
        """Acknowledged records (of `producer`'s, by the prefix of their values)."""
        return sum(1 for value in list(self.history.acked) if producer is None or value.startswith(f"{producer}-"))

    def under_way(self, records: int) -> bool:
        """Every producer has had `records` acknowledged."""
        return all(self.acked(name) >= records for name in self.names)

    def finish(self) -> History:
        """Waits for every producer's last answer, then stops the consumer; asserts that every thread ended
        cleanly, every record sent was answered and the consumer read something."""
        deadline = time.monotonic() + TIMEOUT + 30
        for thread in self.producing:
            thread.join(max(0.0, deadline - time.monotonic()))
        for name, process in self.processes.items():
            assert process.wait(max(1.0, deadline - time.monotonic())) == 0, f"the {name} producer failed"
        self.stopping.set()
        self.reading.join(30)
        assert not self.errors, self.errors
        assert not any(t.is_alive() for t in [*self.producing, self.reading]), "a client thread is still running"
        history = self.history
        unanswered = [v for values in history.sent.values() for v in values
                      if v not in history.acked and v not in history.failed]
        assert not unanswered, f"{len(unanswered)} records never answered, e.g. {unanswered[:5]}"
        assert history.observed, "the consumer read nothing while the cluster failed over"
        return history


def leader_log(cluster: KbrokerCluster, topic: str, partitions: int) -> dict[int, list[tuple[int, str]]]:
    """Everything the leaders serve, read from the beginning to the high watermark with kafka-python."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap().split(","), group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        ends = consumer.end_offsets(assigned)
        logs: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, "the leaders did not serve every record up to the high watermark"
            for tp, records in consumer.poll(timeout_ms=500).items():
                logs[tp.partition] += [(r.offset, r.value.decode()) for r in records]
        return logs
    finally:
        consumer.close()


def replica_dir(broker, topic: str, partition: int) -> Path:
    """The replica's directory: in the broker's data dir or, on a broker given a second log dir beside it
    (SECOND_LOG_DIR), there."""
    name = f"{topic}-{partition}"
    second = broker.data.with_name(SECOND_LOG_DIR) / name
    return second if second.is_dir() else broker.data / name


def replica_logs(cluster: KbrokerCluster, topic: str, partitions: int,
                 replicas: tuple[int, ...]) -> dict[int, dict[int, list[tuple[int, str]]]]:
    """broker -> partition -> (offset, value) of its replica, read from the broker's log files."""
    return {b: {p: replica_log(replica_dir(cluster.brokers[b], topic, p)) for p in range(partitions)}
            for b in replicas}


def check(cluster: KbrokerCluster, topic: str, partitions: int, history: History,
          replicas: tuple[int, ...] = EVERYONE) -> dict[int, list[tuple[int, str]]]:
    """Waits for every replica to be back in sync and to hold the leaders' log, then asserts the checker finds
    nothing; the leaders' logs, for further assertions."""
    for index in range(partitions):
        wait_until(lambda i=index: cluster.in_sync(i, topic, replicas), f"{topic}-{index}: every replica in sync",
                   timeout=TIMEOUT)
    final = leader_log(cluster, topic, partitions)
    with contextlib.suppress(AssertionError):  # the checker names the replica that never caught up
        wait_until(lambda: all(logs == final for logs in replica_logs(cluster, topic, partitions, replicas).values()),
                   "every follower holds the leader's log")
    history.replicas = replica_logs(cluster, topic, partitions, replicas)
    found = problems(history, final)
    assert not found, f"{len(found)} problems; by producer: {Counter(p.split('-')[0] for p in found)}\n" + \
        "\n".join(found[:30])
    return final


def produce_all(cluster: KbrokerCluster, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "log_level": 0,
                         "message.timeout.ms": 30_000})
    failed: list[object] = []
    for value in values:
        producer.produce(topic, value=value.encode(), on_delivery=lambda e, m: e and failed.append(e))
    assert producer.flush(60) == 0 and not failed, failed


