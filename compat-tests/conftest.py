"""Target selection for the compatibility suite: a fresh kbroker by default, or any broker.

    pytest compat-tests                                  # starts kbroker in a subprocess
    pytest compat-tests --bootstrap host:port            # any running Kafka-compatible broker
    KBROKER_COMPAT_BOOTSTRAP=host:port pytest compat-tests
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bootstrap", default=os.environ.get("KBROKER_COMPAT_BOOTSTRAP"),
                     help="host:port of a running broker to test instead of a fresh kbroker")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_listening(port: int, process: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kbroker exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"kbroker did not listen on port {port} within {timeout} s")


class KbrokerProcess:
    """`kbroker serve` as a real subprocess with its own data directory."""

    def __init__(self, data_dir: Path, *overrides: str) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.overrides = [f"listeners=PLAINTEXT://127.0.0.1:{self.port}", f"log.dirs={data_dir}", *overrides]
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KbrokerProcess:
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve"]
        for override in self.overrides:
            args += ["--override", override]
        self.process = subprocess.Popen(args)
        _wait_until_listening(self.port, self.process)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broker under test, shared by the whole session."""
    given = request.config.getoption("--bootstrap")
    if given:
        yield given
        return
    broker = KbrokerProcess(tmp_path_factory.mktemp("kbroker-data")).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def topic_name() -> str:
    return f"compat-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_topic(bootstrap: str, topic_name: str):
    """A fresh 3-partition topic created through the AdminClient."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])[topic_name].result(15)
    return topic_name
