"""A confluent-kafka group consumer in its own process, for tests that kill it without warning.

    python committing_consumer.py <bootstrap> <group> <topic> <delay seconds per record>

It prints one JSON line per event on stdout: {"assigned": [partitions]} after each rebalance,
and {"committed": [partition, offset]} after each record has been processed (the delay) and
its offset committed synchronously, so the parent knows exactly what was committed before
it sends SIGKILL.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer


def _say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(bootstrap: str, group: str, topic: str, delay: float) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "fetch.wait.max.ms": 50})
    consumer.subscribe([topic], on_assign=lambda c, parts: _say(assigned=sorted(p.partition for p in parts)))
    while True:  # runs until killed
        message = consumer.poll(0.1)
        if message is None or message.error() is not None:
            continue
        time.sleep(delay)
        consumer.commit(message=message, asynchronous=False)
        _say(committed=[message.partition(), message.offset() + 1])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
