"""A live broker with data for the console's tests: two topics, JSON records with keys, headers and known
timestamps, and a consumer group whose single member stays in the group with committed offsets behind the end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.console import ConsoleServer, start_console
from kbroker.testing import running_broker

ORDERS, EVENTS, GROUP = "orders", "events", "billing"
ORDERS_PER_PARTITION, COMMITTED_OFFSET = 10, 4
EARLY_MS = 1_700_000_000_000  # the first half of each partition's records
LATE_MS = EARLY_MS + 3_600_000  # the second half, an hour later


@dataclass
class LiveConsole:
    bootstrap: str
    console: ConsoleServer

    @property
    def url(self) -> str:
        return self.console.url


def order(partition: int, index: int) -> dict:
    return {"order": partition * 100 + index, "amount": index * 2.5, "items": ["a", "b"]}


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(ORDERS, 3, 1), NewTopic(EVENTS, 1, 1)])
    for future in futures.values():
        future.result(15)


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(3):
        for index in range(ORDERS_PER_PARTITION):
            timestamp = EARLY_MS if index < ORDERS_PER_PARTITION // 2 else LATE_MS
            producer.produce(ORDERS, json.dumps(order(partition, index)), key=f"customer-{index}",
                             partition=partition, timestamp=timestamp + index, headers=[("source", "checkout")])
    for index in range(3):
        producer.produce(EVENTS, f"plain event {index}", partition=0)
    producer.flush(15)


class GroupMember:
    """One consumer of GROUP that polls in a thread, so the group keeps a member; it commits COMMITTED_OFFSET."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": "billing-worker",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "session.timeout.ms": 10_000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def join_and_commit(self) -> None:
        self.consumer.subscribe([ORDERS])
        deadline = time.monotonic() + 30
        while len(self.consumer.assignment()) < 3:
            assert time.monotonic() < deadline, "the group member got no assignment"
            self.consumer.poll(0.2)
        self.consumer.commit(offsets=[TopicPartition(ORDERS, p, COMMITTED_OFFSET) for p in range(3)],
                             asynchronous=False)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()


@pytest.fixture(scope="package")
def live_console() -> Iterator[LiveConsole]:
    with running_broker() as broker:
        bootstrap = broker.bootstrap_servers
        _create_topics(bootstrap)
        _produce(bootstrap)
        member = GroupMember(bootstrap)
        member.join_and_commit()
        console = start_console(bootstrap, port=0, lag_interval_s=0.5)
        try:
            yield LiveConsole(bootstrap, console)
        finally:
            console.close()
            member.close()
