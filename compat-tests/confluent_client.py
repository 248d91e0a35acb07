"""Produce and consume with confluent-kafka, shared by the scenarios that use it as the
reference client (its own tests and the cross-client checks)."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

# Explicit record timestamps for tests: an hour ago, on a whole second. Within Kafka's default 7-day
# retention, so its periodic retention check cannot delete a test's records mid-test (it did, with 2023 ones).
RECENT_TIMESTAMP = (int(time.time()) - 3600) * 1000


def produce(bootstrap: str, topic: str, records: list[dict], **config) -> None:
    """Produce `records` (keyword arguments of Producer.produce) and require every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures = []
    for record in records:
        producer.produce(topic, on_delivery=lambda err, msg: err and failures.append(err), **record)
    assert producer.flush(20) == 0
    assert failures == []


def consume(bootstrap: str, topic: str, partition: int, count: int, offset: int = OFFSET_BEGINNING,
            timeout: float = 20) -> list:
    """Up to `count` messages of one partition from `offset`, read with assign()."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, partition, offset)])
    received = []
    deadline = time.monotonic() + timeout
    try:
        while len(received) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise AssertionError(message.error())
            received.append(message)
    finally:
        consumer.close()
    return received
