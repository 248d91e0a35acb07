"""The two ways to start the console from the command line, as real processes: `kbroker console` against a
running broker, and `kbroker serve --console-port` beside the broker it serves."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kbroker.testing import free_port


def wait_for_json(url: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.load(response)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def process(*args: str) -> Iterator[subprocess.Popen]:
    started = subprocess.Popen([sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", *args])
    try:
        yield started
    finally:
        started.send_signal(signal.SIGTERM)
        started.wait(30)


def test_console_command_serves_a_running_broker(live_console):
    port = free_port()
    with process("console", "--bootstrap-server", live_console.bootstrap, "--port", str(port)) as console:
        cluster = wait_for_json(f"http://127.0.0.1:{port}/api/cluster")
        assert cluster["bootstrap_servers"] == live_console.bootstrap
        assert [broker["id"] for broker in cluster["brokers"]] == [0]
    assert console.returncode == 0


def test_serve_with_console_port_serves_the_console_beside_the_broker(tmp_path: Path):
    broker_port, console_port = free_port(), free_port()
    with process("serve", "--console-port", str(console_port),
                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{broker_port}",
                 "--override", f"log.dirs={tmp_path}") as broker:
        cluster = wait_for_json(f"http://127.0.0.1:{console_port}/api/cluster")
        assert cluster["brokers"][0]["port"] == broker_port
    assert broker.returncode == 0

