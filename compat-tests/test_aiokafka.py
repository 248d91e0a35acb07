"""aiokafka against the broker under test."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from matrix import codec_params

pytestmark = pytest.mark.client("aiokafka")
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


async def _round_trip(bootstrap: str, topic: str, codec: str | None) -> list:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
    await producer.start()
    try:
        for i in range(20):
            await producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=1,
                                headers=[("h", b"1")], timestamp_ms=1_600_000_000_000 + i)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 1)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        received = []
        while len(received) < 20:
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=500), 15)
            received += batch.get(tp, [])
        return received
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", codec_params(CODECS, "Headers", "Explicit timestamps"))
def test_records_round_trip(bootstrap, new_topic, codec):
    received = asyncio.run(_round_trip(bootstrap, new_topic, codec))
    assert [(m.key, m.value, list(m.headers), m.timestamp) for m in received] == [
        (f"k{i}".encode(), f"v{i}".encode(), [("h", b"1")], 1_600_000_000_000 + i) for i in range(20)]
