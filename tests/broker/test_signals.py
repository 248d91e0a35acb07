"""SIGHUP shuts the broker down cleanly, as SIGTERM does: Kafka's launcher logs TERM, INT and HUP
and lets the JVM run its shutdown hooks. Real `kbroker serve` processes and real files."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.log.checkpoints import CLEAN_SHUTDOWN_FILE
from kbroker.testing import BrokerProcess, free_port, running_broker

TOPIC = "hung-up"
RECORDS = 20


def _create_topic_and_produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(RECORDS):
        producer.produce(TOPIC, value=b"%d" % number, partition=0)
    assert producer.flush(15) == 0


def test_sighup_shuts_down_cleanly_with_exit_code_0(tmp_path: Path):
    broker = BrokerProcess(tmp_path).start()
    _create_topic_and_produce(broker.bootstrap)
    assert broker.stop(signal.SIGHUP) == 0
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_restart_after_sighup_opens_the_log_without_recovery(tmp_path: Path):
    broker = BrokerProcess(tmp_path).start()
    _create_topic_and_produce(broker.bootstrap)
    broker.stop(signal.SIGHUP)
    with running_broker(tmp_path) as restarted:
        log = restarted.broker.logs.get(TOPIC, 0)
        # a clean open trusts the files up to the log end; recovery would start from the checkpoint
        # (this topic has none before a clean shutdown, so 0)
        assert (log.log_end_offset, log.recovery_point) == (RECORDS, RECORDS)


def test_sighup_is_logged_by_name(tmp_path: Path):
    port = free_port()
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbroker.cli", "--log-level", "INFO", "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 'data'}"],
            stderr=stderr)
        try:
            _wait_for_listener(port, process)
            process.send_signal(signal.SIGHUP)
            assert process.wait(20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert "Terminating process due to signal SIGHUP" in stderr_path.read_text()


def _wait_for_listener(port: int, process: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"kbroker exited with {process.returncode} before listening"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"kbroker did not listen on port {port} within {timeout} s")


def test_sigterm_the_moment_the_port_accepts_is_a_clean_shutdown(tmp_path: Path):
    """Signals are handled from the moment clients can connect, not from the end of the start."""
    for attempt in range(3):
        port = free_port()
        data = tmp_path / f"data-{attempt}"
        process = subprocess.Popen(
            [sys.executable, "-m", "kbroker.cli", "--log-level", "WARNING", "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}"])
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                assert process.poll() is None, f"kbroker exited with {process.returncode} before listening"
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
            process.send_signal(signal.SIGTERM)
            assert process.wait(20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert (data / CLEAN_SHUTDOWN_FILE).exists()
