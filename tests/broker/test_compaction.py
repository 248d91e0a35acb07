"""Log compaction end to end: a real client produces keyed records to a compacted topic, the
broker's cleaner thread compacts it, and a real consumer reads only each key's latest record,
at the offset it was first given."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing import running_broker

TOPIC = "compacted-end-to-end"
KEYS = 8
ROUNDS = 20


def _produce(bootstrap: str) -> dict[int, tuple[bytes, bytes | None]]:
    """ROUNDS passes over KEYS keys (the last pass deletes key-0); returns offset -> (key, value)."""
    written: dict[int, tuple[bytes, bytes | None]] = {}
    failures: list[object] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(error)
        else:
            written[message.offset()] = (message.key(), message.value())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for round_number in range(ROUNDS):
        for k in range(KEYS):
            tombstone = round_number == ROUNDS - 1 and k == 0
            value = None if tombstone else b"value-%d-%d-" % (k, round_number) + b"x" * 40
            producer.produce(TOPIC, key=b"key-%d" % k, value=value, partition=0, on_delivery=delivered)
        assert producer.flush(10) == 0
    assert not failures
    return written


def _consume(bootstrap: str, end_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    seen: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 20
    try:
        while (not seen or seen[-1][0] < end_offset - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def test_a_consumer_reads_only_the_latest_value_of_each_key_at_its_original_offset(tmp_path) -> None:
    with running_broker(tmp_path, **{"log.cleaner.backoff.ms": "50"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        config = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(10)
        written = _produce(broker.bootstrap_servers)

        log = broker.broker.logs.get(TOPIC, 0)
        active_base = log.active_segment.base_offset
        assert active_base > 0 and len(log.segments) > 2
        assert broker.broker.logs.cleaner.await_cleaned((TOPIC, 0), active_base, timeout=30)

        latest: dict[bytes, int] = {}
        for offset, (key, _) in sorted(written.items()):
            if offset < active_base:
                latest[key] = offset
        expected = sorted({*latest.values(), *(o for o in written if o >= active_base)})
        consumed = _consume(broker.bootstrap_servers, log.log_end_offset)
        assert [offset for offset, _, _ in consumed] == expected
        assert all(written[offset] == (key, value) for offset, key, value in consumed)
        assert (max(written) + 1, len(consumed)) == (log.log_end_offset, len(expected))
        assert len(expected) < len(written)
