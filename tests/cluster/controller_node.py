"""A kbroker broker that is a ZooKeeper-mode controller, for tests with real Kafka 3.9 brokers.

kbroker's RunningBroker in cluster mode joins ZooKeeper and starts its controller by itself
(kbroker/cluster/member.py). This harness runs it in the test's process, on an event loop of its own thread, so
tests can reach the controller object directly; started before any Kafka broker, it takes /controller first.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kbroker.cluster.controller import KafkaController
from kbroker.cluster.zk import ZkClient
from kbroker.config import build
from kbroker.runner import RunningBroker

T = TypeVar("T")
START_TIMEOUT_S = 60


class ControllerNode:
    """One kbroker broker id, registered with its `listener` endpoint only, running a KafkaController."""

    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, listener: str = "INTERNAL",
                 session_timeout_ms: int = 6000, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.listener = listener
        self.config = build({
            "broker.id": str(broker_id), "zookeeper.connect": zookeeper,
            "zookeeper.session.timeout.ms": str(session_timeout_ms), "listeners": f"{listener}://127.0.0.1:0",
            "inter.broker.listener.name": listener, "log.dirs": str(workdir / "data"), **(overrides or {}),
        })
        self.running: RunningBroker | None = None
        self.zk: ZkClient | None = None
        self.controller: KafkaController | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"kbroker-{broker_id}", daemon=True)

    def run(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = START_TIMEOUT_S) -> T:
        """Run a coroutine on the node's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)

    def start(self) -> ControllerNode:
        self._thread.start()
        self.run(self._start)
        return self

    async def _start(self) -> None:
        self.running = RunningBroker(self.config)
        await self.running.start()
        member = self.running.member
        self.zk = member.zk
        self.controller = member.controller

    def is_active(self) -> bool:
        return self.controller is not None and self.controller.is_active

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.run(self._stop)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _stop(self) -> None:
        """Kafka's order: the broker's controlled shutdown (to this very controller), then the controller."""
        if self.running is not None:
            await self.running.stop()
        if self.controller is not None:
            await self.controller.stop()
