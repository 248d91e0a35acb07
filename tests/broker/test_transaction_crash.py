"""A kill -9 of kbroker in the middle of transactions: after the restart a read_committed consumer reads each
committed transaction's records exactly once and no aborted one, and a transaction whose end the producer never
heard of is there whole or not at all. Real `kbroker serve` processes and files, confluent-kafka as the client."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing import BrokerProcess

TOPIC = "txn-crash"
PARTITIONS = 2
RECORDS_PER_TRANSACTION = 4
TIMEOUT_S = 30


class TransactionLoop(threading.Thread):
    """Transactions one after another, every third aborted; each one's outcome as the producer learnt it."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.outcomes: dict[int, str] = {}  # transaction -> committed | aborted | unknown
        self.stop = threading.Event()

    def _producer(self) -> Producer:
        while True:
            producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "crash-loop",
                                 "transaction.timeout.ms": 10_000, "linger.ms": 2, "log_level": 0})
            try:
                producer.init_transactions(TIMEOUT_S)
                return producer
            except KafkaException:
                time.sleep(0.2)  # the broker is down or the old transaction is still being aborted

    def run(self) -> None:
        producer = self._producer()
        n = 0
        while not self.stop.is_set():
            commit = n % 3 != 2
            try:
                producer.begin_transaction()
                for i in range(RECORDS_PER_TRANSACTION):
                    producer.produce(TOPIC, f"{n}-{i}".encode(), partition=i % PARTITIONS)
                if commit:
                    producer.commit_transaction(TIMEOUT_S)
                else:
                    producer.flush(TIMEOUT_S)
                    producer.abort_transaction(TIMEOUT_S)
                self.outcomes[n] = "committed" if commit else "aborted"
            except KafkaException:
                self.outcomes[n] = "unknown"
                producer = self._producer()  # a new epoch: whatever the last transaction was, it ends now
            n += 1


def _read_committed(bootstrap: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values, ended = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    ended.add(message.partition())
                continue
            values.append(message.value().decode())
    finally:
        consumer.close()
    assert len(ended) == PARTITIONS, "a read_committed consumer never reached the end of a partition"
    return values


def test_after_a_kill_9_committed_transactions_are_read_once_and_aborted_ones_never(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(15)
        loop = TransactionLoop(broker.bootstrap)
        loop.start()
        for wanted in (15, 30):
            deadline = time.monotonic() + 60
            while len(loop.outcomes) < wanted:
                assert time.monotonic() < deadline, f"only {len(loop.outcomes)} transactions ended"
                time.sleep(0.05)
            if wanted == 15:
                broker.stop(signal.SIGKILL)
                broker.start()
        loop.stop.set()
        loop.join(TIMEOUT_S * 3)
        counts = Counter(value.split("-")[0] for value in _read_committed(broker.bootstrap))
    finally:
        broker.stop()
    outcomes = loop.outcomes
    ended = Counter(outcomes.values())
    assert ended["committed"] >= 10 and ended["aborted"] >= 5, ended
    for n, outcome in outcomes.items():
        seen = counts.pop(str(n), 0)
        if outcome == "committed":
            assert seen == RECORDS_PER_TRANSACTION, f"committed transaction {n}: {seen} records read"
        elif outcome == "aborted":
            assert seen == 0, f"aborted transaction {n}: {seen} records read"
        else:
            assert seen in (0, RECORDS_PER_TRANSACTION), f"transaction {n} of unknown end: {seen} records read"
    assert not counts, f"records of transactions the producer never ended: {counts}"
