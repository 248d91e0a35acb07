"""A start that fails once the log dirs are open shuts down what it opened, as Kafka does after
a fatal start-up error: listeners closed, logs closed cleanly (so the next start skips
recovery), then a clear error and exit code 1. Real sockets, real processes, real files."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker import config as broker_config
from kbroker.log.checkpoints import CLEAN_SHUTDOWN_FILE, LOCK_FILE
from kbroker.runner import RunningBroker, StartupError
from kbroker.testing import BrokerProcess, free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def _serve(data_dir: Path, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}"],
        capture_output=True, text=True, timeout=60)


def _fail_to_start_in_process(data_dir: Path, listeners: str, check_after) -> None:
    """Start a RunningBroker that cannot bind; `check_after` runs while its event loop still runs,
    as it would for whoever called start()."""
    async def attempt() -> None:
        running = RunningBroker(broker_config.build({"listeners": listeners, "log.dirs": str(data_dir)}))
        with pytest.raises(StartupError, match="address already in use"):
            await running.start()
        check_after()

    asyncio.run(attempt())


def _lock_is_free(data_dir: Path) -> None:
    lock = os.open(data_dir / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while a leaked broker holds it
    finally:
        os.close(lock)


def test_a_taken_port_exits_1_with_a_clear_message(tmp_path: Path, taken_port: int):
    result = _serve(tmp_path, taken_port)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("kbroker: fatal error during startup: OSError: ")
    assert "address already in use" in last_line
    assert "Traceback" not in result.stderr


def test_a_taken_port_leaves_the_logs_closed_cleanly_for_the_next_start(tmp_path: Path, taken_port: int):
    assert _serve(tmp_path, taken_port).returncode == 1
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    restarted = BrokerProcess(tmp_path).start()  # on a free port, over the same data
    assert restarted.stop() == 0


def test_a_failed_start_in_process_closes_the_logs_and_releases_the_log_dir_lock(tmp_path: Path, taken_port: int):
    def closed_cleanly_and_unlocked() -> None:
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        _lock_is_free(tmp_path)

    _fail_to_start_in_process(tmp_path, f"PLAINTEXT://127.0.0.1:{taken_port}", closed_cleanly_and_unlocked)


def test_a_failed_start_closes_the_listeners_that_did_open(tmp_path: Path, taken_port: int):
    opened = free_port()

    def nothing_listens_on_the_opened_port() -> None:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", opened), timeout=2).close()

    _fail_to_start_in_process(tmp_path, f"PLAINTEXT://127.0.0.1:{opened},SECOND://127.0.0.1:{taken_port}",
                              nothing_listens_on_the_opened_port)


def test_a_log_dir_of_another_broker_id_exits_1_and_leaves_the_dir_clean(tmp_path: Path):
    assert BrokerProcess(tmp_path).start().stop() == 0  # meta.properties now says broker.id=0
    result = subprocess.run(
        [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve", "--override", "broker.id=7",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "broker id 0, this broker is 7" in result.stderr.strip().splitlines()[-1]
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    _lock_is_free(tmp_path)
