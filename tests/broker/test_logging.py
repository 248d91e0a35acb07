"""The broker's log as operators read it: one Kafka-worded line per event (docs/logging.md), text in Kafka's
layout or JSON objects, and the request log, off unless asked for. Real `kbroker serve` processes, real clients,
their stderr read as written."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker import cli
from kbroker.logs import JsonFormatter, parse_levels
from kbroker.testing import free_port

TIMEOUT = 20
RETENTION_CHECK_MS = 500


@dataclass
class ServedBroker:
    """A `kbroker serve` process whose stderr goes to `log_path`."""

    process: subprocess.Popen
    bootstrap: str
    log_path: Path
    data: Path

    def text(self) -> str:
        return self.log_path.read_text()

    def wait_for_line(self, pattern: str, timeout: float = TIMEOUT) -> str:
        """The first log line matching the regular expression `pattern`, once it is written."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.text().splitlines():
                if regex.search(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line matches {pattern!r}; the log:\n{self.text()[-4000:]}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def start_broker(workdir: Path, *options: str, log_name: str = "stderr.txt") -> ServedBroker:
    """`kbroker <options> serve` on a free loopback port with its data in workdir/data, once it listens."""
    port = free_port()
    data = workdir / "data"
    log_path = workdir / log_name
    with open(log_path, "ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbroker.cli", *options, "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
             "--override", f"log.retention.check.interval.ms={RETENTION_CHECK_MS}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    broker = ServedBroker(process, f"127.0.0.1:{port}", log_path, data)
    _wait_for_listener(port, broker)
    return broker


def _wait_for_listener(port: int, broker: ServedBroker) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if broker.process.poll() is not None:
            raise AssertionError(f"kbroker exited with {broker.process.returncode}:\n{broker.text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise AssertionError(f"kbroker did not listen on {port}:\n{broker.text()}")


@contextlib.contextmanager
def served(workdir: Path, *options: str, log_name: str = "stderr.txt") -> Iterator[ServedBroker]:
    broker = start_broker(workdir, *options, log_name=log_name)
    try:
        yield broker
    finally:
        broker.stop(signal.SIGKILL)


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)])[name] \
        .result(TIMEOUT)


def produce(bootstrap: str, topic: str, count: int, size: int = 100, **settings: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **settings})
    for _ in range(count):
        producer.produce(topic, value=b"x" * size, partition=0)
        producer.flush(TIMEOUT)  # one batch per record: small segments fill batch by batch
    assert producer.flush(TIMEOUT) == 0


KAFKA_TIMESTAMP = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedBroker]:
    """One broker in text format for the events that do not need a restart."""
    with served(tmp_path_factory.mktemp("text-log")) as running:
        yield running


# --- the text layout ------------------------------------------------------------------------------------


def test_a_started_broker_logs_kafkas_started_line_in_kafkas_layout(broker: ServedBroker):
    line = broker.wait_for_line(r"\[KafkaServer id=0\] started")
    assert re.match(KAFKA_TIMESTAMP + r" INFO \[KafkaServer id=0\] started, listening on .* \(kbroker\.runner\)$",
                    line), line


def test_creating_a_topic_logs_created_log_for_each_partition(broker: ServedBroker):
    create_topic(broker.bootstrap, "created", partitions=2)
    for partition in (0, 1):
        line = broker.wait_for_line(rf"Created log for partition created-{partition} in ")
        assert " INFO " in line


def test_deleting_a_topic_logs_deleted_log_for_its_partition(broker: ServedBroker):
    create_topic(broker.bootstrap, "doomed")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(TIMEOUT)
    line = broker.wait_for_line(r"Deleted log for partition doomed-0 in .*doomed-0\.\w+-delete\.")
    assert " INFO " in line


def test_a_rolled_segment_logs_rolled_new_log_segment(broker: ServedBroker):
    create_topic(broker.bootstrap, "rolling", **{"segment.bytes": "1024"})
    produce(broker.bootstrap, "rolling", 15)
    line = broker.wait_for_line(r"\[LocalLog partition=rolling-0, dir=.*\] Rolled new log segment at offset \d+ in "
                                r"\d+ ms\.")
    assert f"dir={broker.data}]" in line and " INFO " in line


def test_a_segment_past_retention_time_logs_deleting_segment_with_the_reason(broker: ServedBroker):
    create_topic(broker.bootstrap, "retained", **{"segment.bytes": "1024", "retention.ms": "1000"})
    produce(broker.bootstrap, "retained", 15)
    line = broker.wait_for_line(r"\[UnifiedLog partition=retained-0, dir=.*\] Deleting segment "
                                r"LogSegment\(baseOffset=0, size=\d+, largestRecordTimestamp=\d+\) due to log "
                                r"retention time 1000ms breach based on the largest record timestamp in the segment")
    assert " INFO " in line


def test_the_request_log_is_silent_by_default(broker: ServedBroker):
    create_topic(broker.bootstrap, "unlogged-requests")
    produce(broker.bootstrap, "unlogged-requests", 3)
    assert "Completed request" not in broker.text()
    assert "kbroker.request" not in broker.text()


# --- events around a restart ----------------------------------------------------------------------------


def test_a_clean_shutdown_logs_shutting_down_and_shut_down_completed(tmp_path: Path):
    broker = start_broker(tmp_path)
    assert broker.stop(signal.SIGTERM) == 0
    text = broker.text()
    assert re.search(r" INFO \[KafkaServer id=0\] shutting down \(kbroker\.runner\)", text), text
    assert re.search(r" INFO \[KafkaServer id=0\] shut down completed \(kbroker\.runner\)", text), text


def test_a_restart_after_a_clean_shutdown_skips_recovery(tmp_path: Path):
    first = start_broker(tmp_path)
    create_topic(first.bootstrap, "clean")
    produce(first.bootstrap, "clean", 3)
    assert first.stop(signal.SIGTERM) == 0
    with served(tmp_path, log_name="restarted.txt") as restarted:
        restarted.wait_for_line(rf"Skipping recovery of 1 logs from {re.escape(str(restarted.data))} since clean "
                                r"shutdown file was found")
        assert "Recovering unflushed segment" not in restarted.text()


def test_a_restart_after_kill_9_recovers_the_unflushed_segment(tmp_path: Path):
    first = start_broker(tmp_path)
    create_topic(first.bootstrap, "crashed")
    produce(first.bootstrap, "crashed", 3)
    first.stop(signal.SIGKILL)
    with served(tmp_path, log_name="restarted.txt") as restarted:
        restarted.wait_for_line(rf"Attempting recovery of 1 logs from {re.escape(str(restarted.data))} since no "
                                r"clean shutdown file was found")
        line = restarted.wait_for_line(r"\[LogLoader partition=crashed-0, dir=.*\] Recovering unflushed segment 0")
        assert " INFO " in line
        restarted.wait_for_line(r"\[UnifiedLog partition=crashed-0, dir=.*\] Loading producer state till offset 3")


# --- JSON -----------------------------------------------------------------------------------------------


def test_json_output_is_one_object_per_line_with_the_events_fields(tmp_path: Path):
    with served(tmp_path, "--log-format", "json") as broker:
        create_topic(broker.bootstrap, "json-rolling", **{"segment.bytes": "1024"})
        produce(broker.bootstrap, "json-rolling", 15)
        broker.wait_for_line(r"Rolled new log segment")
        entries = [json.loads(line) for line in broker.text().splitlines()]
    roll = next(e for e in entries if "Rolled new log segment" in e["message"])
    assert roll["level"] == "INFO" and roll["logger"] == "kbroker.log.partition_log"
    assert (roll["topic"], roll["partition"], roll["dir"]) == ("json-rolling", 0, str(tmp_path / "data"))
    assert roll["offset"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", roll["time"]), roll["time"]


def test_the_log_format_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KBROKER_LOG_FORMAT", "json")
    with served(tmp_path) as broker:
        broker.wait_for_line(r"\[KafkaServer id=0\] started")
        entries = [json.loads(line) for line in broker.text().splitlines()]
    assert any(e["message"].startswith("[KafkaServer id=0] started") for e in entries)


def test_json_lines_carry_the_exception_text():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.Logger("kbroker.test-json")
    logger.addHandler(handler)
    try:
        raise OSError("disk gone")
    except OSError:
        logger.exception("Error while writing", extra={"topic": "t", "partition": 3, "isr": frozenset({2, 1})})
    entry = json.loads(out.getvalue())
    assert (entry["level"], entry["message"], entry["topic"], entry["partition"], entry["isr"]) == \
        ("ERROR", "Error while writing", "t", 3, [1, 2])
    assert "OSError: disk gone" in entry["exception"]


# --- the request log ------------------------------------------------------------------------------------


def test_the_request_log_at_debug_logs_one_line_per_request(tmp_path: Path):
    with served(tmp_path, "--log-level", "INFO,kbroker.request=DEBUG") as broker:
        create_topic(broker.bootstrap, "logged-requests")
        produce(broker.bootstrap, "logged-requests", 1, **{"client.id": "the-producer"})
        line = broker.wait_for_line(r"Completed request: Produce v\d+, clientId=the-producer, correlationId=\d+ "
                                    r"from connection /127\.0\.0\.1; totalTime=\d+\.\d{3} ms \(kbroker\.request\)")
        assert " DEBUG " in line


def test_the_request_log_does_not_turn_on_other_loggers_debug_lines(tmp_path: Path):
    with served(tmp_path, "--log-level", "INFO,kbroker.request=DEBUG") as broker:
        create_topic(broker.bootstrap, "only-requests")
        broker.wait_for_line(r"Completed request: CreateTopics")
        debug_loggers = {m.group(1) for m in re.finditer(r" DEBUG .* \(([\w.]+)\)$", broker.text(), re.MULTILINE)}
    assert debug_loggers == {"kbroker.request"}


# --- levels ---------------------------------------------------------------------------------------------


def test_log_levels_are_a_root_level_and_per_logger_items():
    assert parse_levels("warning,kbroker.request=DEBUG, kbroker.log=error") == \
        (logging.WARNING, {"kbroker.request": logging.DEBUG, "kbroker.log": logging.ERROR})


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--log-level", "INFO,kbroker.request=LOUD", "serve"])
    assert exited.value.code == 2
    assert "unknown log level 'LOUD'" in capsys.readouterr().err
