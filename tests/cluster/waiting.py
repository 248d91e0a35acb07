"""Waiting in the cluster tests, where brokers settle asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable

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
