"""Kafka Streams 4.x with processing.guarantee=exactly_once_v2 against the broker under test: a word count
(compat-tests/java/StreamsWordCount.java) whose output holds the exact counts, also when the Streams process is
killed with kill -9 in the middle and started again, and (on a kbroker of its own) when kbroker is killed with
kill -9 and restarted under it. Without a JDK or the jars it skips locally and fails in CI."""

from __future__ import annotations

import json
import queue
import shutil
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kbroker.testing import BrokerProcess

import java_harness
import kafka_process
import maven_jars
import settle

pytestmark = [pytest.mark.client("kafka-streams"), pytest.mark.scenario("Transactions: Kafka Streams exactly-once")]
SOURCE = Path(__file__).parent / "java" / "StreamsWordCount.java"
JAR_SET = "kafka-4"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def streams_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("streams-word-count")
    javac = shutil.which("javac")
    if javac is None:
        java_harness.unavailable("no JDK on PATH (javac): install openjdk-17-jdk-headless (scripts/test.sh does)")
    try:
        classpath = maven_jars.classpath(JAR_SET)
    except maven_jars.JarsUnavailable as error:
        java_harness.unavailable(f"Kafka Streams needs the {JAR_SET} jars: {error}")
    compiled = subprocess.run([javac, "-nowarn", "-d", str(workdir), "-cp", classpath, str(SOURCE)],
                              capture_output=True, text=True, timeout=120, check=False)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return maven_jars.classpath(JAR_SET, workdir)


class WordCountApp:
    """One StreamsWordCount JVM; its state changes arrive on `states`."""

    def __init__(self, classpath: str, bootstrap: str, application_id: str, source: str, sink: str,
                 state_dir: Path) -> None:
        self.states: queue.Queue[str] = queue.Queue()
        self.process = subprocess.Popen(
            [kafka_process.java(), *java_harness.JVM_OPTIONS, "-cp", classpath, "StreamsWordCount", bootstrap,
             application_id, source, sink, str(state_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self.states.put(json.loads(line)["state"])

    def wait_running(self) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if self.states.get(timeout=1) == "RUNNING":
                    return
            except queue.Empty:
                assert self.process.poll() is None, f"Kafka Streams exited with {self.process.returncode}"
        raise AssertionError("Kafka Streams never reached RUNNING")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # a clean close
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def _lines(start: int, count: int) -> list[str]:
    return [" ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(3)) for i in range(start, start + count)]


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index, line in enumerate(lines):
        producer.produce(topic, line.encode(), key=str(index).encode())
    assert producer.flush(30) == 0


class CountReader:
    """A read_committed consumer of the output: the newest count of each word."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.latest: dict[str, int] = {}
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"counts-{uuid.uuid4().hex[:8]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def until(self, expected: dict[str, int]) -> dict[str, int]:
        deadline = time.monotonic() + TIMEOUT_S
        while self.latest != expected and time.monotonic() < deadline:
            for message in self.consumer.consume(500, 0.5):
                if message.error() is None:
                    self.latest[message.key().decode()] = struct.unpack(">q", message.value())[0]
        return self.latest

    def close(self) -> None:
        self.consumer.close()


def test_a_word_count_with_exactly_once_v2_holds_the_exact_counts_across_a_kill_9_of_streams(
        streams_classpath: str, bootstrap: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source, sink = settle.create_topic(bootstrap, f"lines-{run}", 3), settle.create_topic(bootstrap, f"counts-{run}", 3)
    application_id = f"word-count-{run}"
    expected: Counter[str] = Counter()
    reader = CountReader(bootstrap, sink, 3)
    app = WordCountApp(streams_classpath, bootstrap, application_id, source, sink, tmp_path / "state")
    try:
        app.wait_running()
        first = _lines(0, 200)
        _produce(bootstrap, source, first)
        expected.update(word for line in first for word in line.split())
        assert reader.until(dict(expected)) == dict(expected)
        second = _lines(200, 200)
        _produce(bootstrap, source, second)
        expected.update(word for line in second for word in line.split())
        time.sleep(0.5)  # the app is in the middle of the second batch
        app.kill()
        app = WordCountApp(streams_classpath, bootstrap, application_id, source, sink, tmp_path / "state")
        app.wait_running()
        third = _lines(400, 100)
        _produce(bootstrap, source, third)
        expected.update(word for line in third for word in line.split())
        assert reader.until(dict(expected)) == dict(expected)
    finally:
        app.close()
        reader.close()


def test_the_exact_counts_survive_a_kill_9_and_restart_of_kbroker_under_a_running_word_count(
        streams_classpath: str, tmp_path: Path) -> None:
    """A kbroker of its own (it is killed): Streams rides over the broker's absence and the counts stay exact."""
    broker = BrokerProcess(tmp_path / "data").start()
    app = reader = None
    try:
        bootstrap = broker.bootstrap
        source, sink = settle.create_topic(bootstrap, "lines", 3), settle.create_topic(bootstrap, "counts", 3)
        expected: Counter[str] = Counter()
        app = WordCountApp(streams_classpath, bootstrap, "word-count-restart", source, sink, tmp_path / "state")
        app.wait_running()
        for start in (0, 200):
            lines = _lines(start, 200)
            _produce(bootstrap, source, lines)
            expected.update(word for line in lines for word in line.split())
            if start == 0:
                time.sleep(0.5)  # the app is in the middle of the first batch
                broker.stop(signal.SIGKILL)
                broker.start()
        reader = CountReader(bootstrap, sink, 3)
        assert reader.until(dict(expected)) == dict(expected)
    finally:
        if app is not None:
            app.close()
        if reader is not None:
            reader.close()
        broker.stop()
