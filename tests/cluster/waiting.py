"""Waiting in the cluster tests, where brokers settle asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable

from kazoo.client import KazooClient

TIMEOUT = 60


def wait_until(condition: Callable[[], object], what: str, timeout: float = TIMEOUT, every: float = 0.2) -> object:
    """`condition()`'s first truthy value, asked every `every` seconds; an exception counts as not yet (a broker
    that is starting or moving refuses); AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
        except Exception:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


def wait_for_zookeeper(connect: str, timeout: float = 90) -> None:
    """The port opens before ZooKeeper serves sessions; on a loaded machine the gap is seconds."""
    deadline = time.monotonic() + timeout
    while True:
        client = KazooClient(hosts=connect, timeout=10)
        try:
            client.start(timeout=10)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
        finally:
            client.stop()
            client.close()
