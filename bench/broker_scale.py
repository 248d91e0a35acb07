"""Memory and restart time of a kbroker process holding many partitions with data.

    python -m bench.broker_scale [--partitions 1000] [--records-per-partition 10]

Starts `kbroker serve` as a subprocess on 127.0.0.1 with a fresh data directory, creates the
partitions (10 per topic), writes 100-byte records into every partition with
confluent-kafka, reads the broker's RSS from /proc, stops it cleanly (SIGTERM) and times a
restart until it accepts connections, then reads its RSS again.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing import BrokerProcess

PARTITIONS_PER_TOPIC = 10


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def fill(bootstrap: str, partitions: int, records: int) -> None:
    topics = [f"scale-{i:05d}" for i in range(partitions // PARTITIONS_PER_TOPIC)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS_PER_TOPIC, 1) for t in topics]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 100
    for topic in topics:
        for partition in range(PARTITIONS_PER_TOPIC):
            for _ in range(records):
                producer.produce(topic, value=value, partition=partition)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records were not acknowledged")


def run(partitions: int, records: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kbroker-scale-") as data:
        broker = BrokerProcess(Path(data)).start()
        try:
            fill(broker.bootstrap, partitions, records)
            time.sleep(1)
            loaded_rss = rss_mib(broker.process.pid)
        finally:
            broker.stop()
        started = time.monotonic()
        restarted = BrokerProcess(Path(data), port=broker.port).start()
        restart_s = time.monotonic() - started
        try:
            restarted_rss = rss_mib(restarted.process.pid)
        finally:
            restarted.stop()
    return {"partitions": partitions, "records_per_partition": records, "rss_mib_with_data": round(loaded_rss, 1),
            "clean_restart_s": round(restart_s, 2), "rss_mib_after_restart": round(restarted_rss, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records-per-partition", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(run(args.partitions, args.records_per_partition), indent=1))


if __name__ == "__main__":
    main()
