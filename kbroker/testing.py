"""An in-process broker for your own tests: a context manager and a pytest fixture.

    from kbroker.testing import running_broker
    with running_broker() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

With kbroker installed, pytest also offers the fixture `kafka_broker` (one broker per test,
free port, temporary data directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from kbroker import config as broker_config
from kbroker.runner import RunningBroker

T = TypeVar("T")


class BrokerThread:
    """A broker on its own event loop in a daemon thread, so test code may block freely."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        raw = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir)}
        raw.update(overrides or {})
        self.config = broker_config.build(raw)
        self.data_dir = data_dir
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kbroker", daemon=True)
        self.running = RunningBroker(self.config)

    @property
    def bootstrap_servers(self) -> str:
        return self.running.bootstrap_servers

    @property
    def broker(self):
        return self.running.broker

    @property
    def faults(self):
        """Fault injection and recording (kbroker.faults.Faults): `with broker.faults.inject(...) as fault:`."""
        return self.running.faults

    @property
    def halted(self) -> bool:
        """Whether the broker stopped serving because its log dirs failed (the test process goes on)."""
        return self.running.halted

    def wait_halted(self, timeout: float = 30) -> bool:
        """Wait until a halt (see `halted`) is complete; False if there was none within `timeout`."""
        try:
            self._call(asyncio.wait_for(self.running.wait_halted(), timeout), timeout + 5)
        except TimeoutError:
            return False
        return True

    def _call(self, coroutine, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def on_loop(self, function: Callable[[], T], timeout: float = 30) -> T:
        """`function()` run on the broker's event loop, where everything touching its state runs; its result."""
        async def call() -> T:
            return function()
        return self._call(call(), timeout)

    def start(self) -> BrokerThread:
        self._thread.start()
        self._call(self.running.start())
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self.running.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@contextlib.contextmanager
def running_broker(data_dir: Path | None = None, **overrides: str) -> Iterator[BrokerThread]:
    """Start a broker (property names with dots as keyword-friendly dict: use **{"a.b": "v"})."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kbroker-")))
        broker = BrokerThread(data_dir, overrides).start()
        try:
            yield broker
        finally:
            broker.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class BrokerProcess:
    """`kbroker serve` as a real subprocess (for crash tests and cross-process clients)."""

    def __init__(self, data_dir: Path, *overrides: str, port: int | None = None,
                 event_loop: str = "auto", source_dir: Path | None = None) -> None:
        self.data_dir = data_dir
        self.event_loop = event_loop
        self.source_dir = source_dir  # run the `kbroker` package of this tree (`-m` looks in the cwd first)
        self.port = port or free_port()
        self.overrides = [f"listeners=PLAINTEXT://127.0.0.1:{self.port}", f"log.dirs={data_dir}", *overrides]
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> BrokerProcess:
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve",
                "--event-loop", self.event_loop]
        for override in self.overrides:
            args += ["--override", override]
        self.process = subprocess.Popen(args, cwd=self.source_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kbroker exited with {self.process.returncode} before listening")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"kbroker did not listen on port {self.port} within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        """Send `sig` (SIGTERM: clean shutdown; SIGKILL: a crash) and wait; returns the exit code."""
        if self.process is None:
            return None
        process, self.process = self.process, None
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode


try:
    import pytest
except ImportError:  # the context manager works without pytest; the fixture needs it
    pytest = None

if pytest is not None:

    @pytest.fixture
    def kafka_broker(tmp_path: Path) -> Iterator[BrokerThread]:
        """A fresh broker for one test: free port on 127.0.0.1, data under tmp_path."""
        with running_broker(tmp_path / "data") as broker:
            yield broker
