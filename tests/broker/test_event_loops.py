"""Both event loops serve produce and fetch: a few KiB of records copied into the answer, more than
kbroker.net.server._COPY_UP_TO sent from the segment file (asyncio with sendfile, uvloop by copying)."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kbroker.testing import BrokerProcess


@pytest.mark.parametrize("value_bytes", [8, 2048], ids=["copied", "from-the-file"])
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_records_produced_are_fetched_back(tmp_path, event_loop, value_bytes):
    broker = BrokerProcess(tmp_path, event_loop=event_loop).start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for number in range(200):
            producer.produce("loops", value=b"%d" % number + b"." * value_bytes, partition=0)
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "fetch.wait.max.ms": 50,
                             "enable.auto.commit": False})  # no group coordinator yet: nothing to commit to
        consumer.assign([TopicPartition("loops", 0, OFFSET_BEGINNING)])
        values = []
        while len(values) < 200:
            message = consumer.poll(10)
            assert message is not None, f"only {len(values)} records came back"
            values.append(message.value())
        consumer.close()
    finally:
        broker.stop()
    assert values == [b"%d" % n + b"." * value_bytes for n in range(200)]
