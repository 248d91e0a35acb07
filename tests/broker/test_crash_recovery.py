"""Nothing acknowledged is lost across kill -9, and a damaged log tail is cut, not served.

Real `kbroker serve` processes, real files, confluent-kafka as the client.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing import BrokerProcess

TOPIC = "crash"


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(15)


def _read_all(bootstrap: str, expected_end: int, timeout: float = 30) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected_end and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    finally:
        consumer.close()
    assert high == expected_end, f"log end {high}, expected {expected_end}"
    return values


def _produce_until_killed(broker: BrokerProcess, seconds: float) -> set[bytes]:
    """Produce with acks=all while the broker is SIGKILLed mid-stream; returns what was acked."""
    acked: set[bytes] = set()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1,
                         "message.timeout.ms": 3000, "retries": 0})

    def delivered(error, message) -> None:
        if error is None:
            acked.add(message.value())

    killer = threading.Timer(seconds, lambda: broker.stop(signal.SIGKILL))
    killer.start()
    deadline = time.monotonic() + seconds + 1
    number = 0
    while time.monotonic() < deadline:
        try:
            producer.produce(TOPIC, value=b"%08d" % number, partition=0, on_delivery=delivered)
            number += 1
        except BufferError:
            pass
        producer.poll(0.001)
    killer.join()
    producer.flush(5)
    return acked


def test_every_acknowledged_record_survives_kill_9(tmp_path: Path):
    broker = BrokerProcess(tmp_path, "log.flush.interval.messages=1").start()
    _create_topic(broker.bootstrap)
    acked = _produce_until_killed(broker, seconds=2.0)
    assert len(acked) > 100, "the producer should have been acknowledged many records before the kill"
    restarted = BrokerProcess(tmp_path, "log.flush.interval.messages=1", port=broker.port).start()
    try:
        consumer = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": "x"})
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.close()
        stored = _read_all(restarted.bootstrap, end)
    finally:
        restarted.stop()
    assert acked <= set(stored)
    assert len(stored) == len(set(stored)), "no record is stored twice"


def test_garbage_appended_to_the_log_tail_is_truncated_on_restart(tmp_path: Path):
    broker = BrokerProcess(tmp_path).start()
    _create_topic(broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for number in range(50):
        producer.produce(TOPIC, value=b"%d" % number, partition=0)
    assert producer.flush(15) == 0
    broker.stop(signal.SIGKILL)
    (segment,) = (tmp_path / f"{TOPIC}-0").glob("*.log")
    intact_size = segment.stat().st_size
    with open(segment, "ab") as log:
        log.write(b"\x00\x00\x00\x00\x00\x00\x00\x32" + b"\xde\xad" * 40)  # a torn batch header
    restarted = BrokerProcess(tmp_path, port=broker.port).start()
    try:
        assert _read_all(restarted.bootstrap, 50) == [b"%d" % n for n in range(50)]
    finally:
        restarted.stop()
    assert segment.stat().st_size == intact_size


def test_clean_shutdown_leaves_the_clean_shutdown_marker(tmp_path: Path):
    broker = BrokerProcess(tmp_path).start()
    _create_topic(broker.bootstrap)
    assert broker.stop(signal.SIGTERM) == 0
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text().startswith("0\n")
