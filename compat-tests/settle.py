"""Waiting for what Kafka makes visible a moment after it answered.

In KRaft a CreateTopics, CreatePartitions or AlterConfigs answer means the controller committed the
change to the metadata log; each broker applies it to its own metadata image a moment later, so a
Metadata or DescribeConfigs request right after the answer may still see the old state (eventual
consistency; kbroker, a single process, shows it at once). A client application waits for the change
to show, and so do these tests, on the condition itself rather than a sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
TIMEOUT = 15.0


def eventually(read: Callable[[], T], holds: Callable[[T], bool], timeout: float = TIMEOUT) -> T:
    """`read()` again until `holds(value)`; the last value read, so the caller's assertion on it fails with the
    broker's real answer if the condition never held."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if holds(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def partition_count(admin, topic: str) -> int:
    """Partitions of `topic` in the broker's metadata (0 while the broker does not know the topic)."""
    found = admin.list_topics(topic, timeout=TIMEOUT).topics.get(topic)
    return len(found.partitions) if found is not None and found.error is None else 0


def wait_for_partitions(admin, topic: str, count: int) -> None:
    """Until the broker's metadata shows `topic` with `count` partitions (a confluent-kafka AdminClient)."""
    assert eventually(lambda: partition_count(admin, topic), lambda found: found == count) == count, topic


def create_topic(bootstrap: str, name: str, partitions: int = 3, **config: str) -> str:
    """Creates `name` with confluent-kafka's AdminClient (replication factor 1) and waits until the broker's
    metadata shows every partition, so produce, commit and describe find it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
                        )[name].result(TIMEOUT)
    wait_for_partitions(admin, name, partitions)
    return name
