"""`kbroker healthcheck`: exit 0 only when a broker answers ApiVersions with error 0 (the container/k8s probe)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

from kbroker.testing import BrokerThread, free_port


def _healthcheck(bootstrap: str, timeout: float = 5) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "healthcheck", "--bootstrap-server", bootstrap,
                           "--timeout", str(timeout)], capture_output=True, text=True, timeout=60)


def test_a_running_broker_is_healthy(kafka_broker: BrokerThread) -> None:
    result = _healthcheck(kafka_broker.bootstrap_servers)
    assert result.returncode == 0, result.stderr


def test_nothing_listening_is_unhealthy() -> None:
    result = _healthcheck(f"127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert "healthcheck" in result.stderr


def test_a_listener_that_never_answers_is_unhealthy_after_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        result = _healthcheck(f"127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
    assert result.returncode == 1


def test_a_peer_that_hangs_up_is_unhealthy() -> None:
    with socket.socket() as rude:
        rude.bind(("127.0.0.1", 0))
        rude.listen()
        threading.Thread(target=lambda: rude.accept()[0].close(), daemon=True).start()
        result = _healthcheck(f"127.0.0.1:{rude.getsockname()[1]}")
    assert result.returncode == 1
