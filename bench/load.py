"""Load generators with confluent-kafka: time-boxed produce, window re-reads, fixed-rate latency.

Every loop here ends by itself: by a time box, a byte cap or a drain deadline, whichever
comes first, and a broker that stops answering raises instead of hanging the run.
"""

from __future__ import annotations

import contextlib
import math
import random
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.harness import percentile
from bench.peers import CLIENT_LOGGING, Broker

POOL_BYTES = 256 * 1024  # distinct values cycled through: more than lz4's 64 KiB window
QUEUE_KBYTES = 64 * 1024  # the producer's buffer (Kafka's buffer.memory is 32 MB): bounds the final flush


def value_pool(size: int, seed: int = 1) -> list[bytes]:
    """Values half random and half repeated, so lz4 compresses them about 2:1 as it would real data."""
    rng = random.Random(seed * 1_000_003 + size)
    count = max(16, POOL_BYTES // max(1, size))
    half = size // 2
    return [rng.randbytes(half) + b"k" * (size - half) for _ in range(count)]


@dataclass
class ProduceRun:
    records: int
    seconds: float            # first produce() to the last acknowledgement
    client_cpu_seconds: float  # this process (for the mock, the mock's work too)
    broker_cpu_seconds: float | None
    started_at: float = 0.0   # time.monotonic() at the first produce(): one clock for every process on the machine

    @property
    def msgs_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def broker_cpu_per_million(self) -> float | None:
        """The broker process's CPU seconds (user + system) per million records; None for the in-process mock."""
        return None if self.broker_cpu_seconds is None else 1e6 * self.broker_cpu_seconds / self.records


def produce_for(broker: Broker, topic: str, partitions: int, values: list[bytes], seconds: float,
                max_bytes: int, acks: str = "1", compression: str = "none", drain_s: float = 30,
                ready: Callable[[], object] | None = None, first: int = 0) -> ProduceRun:
    """Produce round-robin over the partitions for `seconds` (or `max_bytes` of values), then wait for every ack.

    `ready` is called once connected, right before the clock starts (producer processes line up on a barrier);
    `first` is the record the round-robin starts at, so producers side by side begin on different partitions."""
    errors: list[str] = []

    def failed(error, _message) -> None:
        if error is not None and len(errors) < 5:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "compression.type": compression,
                         "linger.ms": 5, "queue.buffering.max.kbytes": QUEUE_KBYTES,
                         "delivery.report.only.error": True, "on_delivery": failed, **CLIENT_LOGGING})
    producer.list_topics(topic, timeout=10)  # connected and the leaders known before the clock starts
    if ready is not None:
        ready()
    produce, poll, perf_counter = producer.produce, producer.poll, time.perf_counter
    pool = len(values)
    cap = first + max(1, max_bytes // len(values[0]))
    cpu_before, client_before = broker.cpu_seconds(), time.process_time()
    started_at, started = time.monotonic(), perf_counter()
    ends = started + seconds
    sent = first
    while sent < cap:
        try:
            produce(topic, values[sent % pool], partition=sent % partitions)
        except BufferError:  # the client's buffer is full: let it drain
            poll(0.001)
            if perf_counter() > ends:
                break
            continue
        sent += 1
        if not sent & 0x3FF:
            poll(0)
            if perf_counter() > ends:
                break
    left = producer.flush(drain_s)
    elapsed = perf_counter() - started
    cpu_after = broker.cpu_seconds()
    records = sent - first
    if left:
        raise TimeoutError(f"{broker}: {left} of {records} records unacknowledged {drain_s} s after the last send")
    if errors:
        raise RuntimeError(f"{broker}: delivery failed: {errors}")
    return ProduceRun(records, elapsed, time.process_time() - client_before,
                      None if cpu_before is None else cpu_after - cpu_before, started_at)


def client_produce_ceiling(values: list[bytes], seconds: float) -> float:
    """produce() calls per second into a client with no broker to talk to: the client's own cost per record."""
    with _socket_nobody_listens_on() as port:
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "queue.buffering.max.messages": 10_000_000,
                             "queue.buffering.max.kbytes": 2_097_151, "log_level": 0,
                             "reconnect.backoff.ms": 1000})
        produce, perf_counter = producer.produce, time.perf_counter
        pool = len(values)
        started = perf_counter()
        ends = started + seconds
        sent = 0
        try:
            while perf_counter() < ends:
                for _ in range(256):
                    produce("ceiling", values[sent % pool], partition=0)
                    sent += 1
        except BufferError:
            pass
        elapsed = perf_counter() - started
        producer.purge()
        producer.flush(1)
    return sent / elapsed


class _socket_nobody_listens_on:
    """A bound, never-listening port: connections to it are refused, and nobody else can take it meanwhile."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        return self._socket.getsockname()[1]

    def __exit__(self, *exc_info: object) -> None:
        self._socket.close()


# --- consume: re-read the newest window -----------------------------------------------------


def fill(broker: Broker, topic: str, partitions: int, values: list[bytes], per_partition: int,
         compression: str, timeout: float = 120) -> None:
    """Write `per_partition` records into every partition (acks=1) and wait until all are acknowledged."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "compression.type": compression,
                         "linger.ms": 5, "queue.buffering.max.kbytes": QUEUE_KBYTES, **CLIENT_LOGGING})
    deadline = time.monotonic() + timeout
    pool = len(values)
    for index in range(per_partition * partitions):
        while True:
            try:
                producer.produce(topic, values[index % pool], partition=index % partitions)
                break
            except BufferError:
                producer.poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{broker}: filling {topic} stalled") from None
    if producer.flush(max(1.0, deadline - time.monotonic())):
        raise TimeoutError(f"{broker}: filling {topic} was not acknowledged in {timeout} s")


def watermarks(consumer: Consumer, topic: str, partitions: int) -> list[tuple[int, int]]:
    return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in range(partitions)]


def reader(broker: Broker, **config: Any) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": False, **CLIENT_LOGGING, **config})


def read_window(consumer: Consumer, topic: str, windows: list[tuple[int, int]], time_limit: float = 60
                ) -> tuple[int, int, float]:
    """Read offsets [start, end) of every partition; returns (records, value bytes, seconds)."""
    started = time.perf_counter()
    deadline = started + time_limit
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in enumerate(windows)])
    remaining = {p: end for p, (start, end) in enumerate(windows) if end > start}
    expected = sum(end - start for start, end in windows)
    records = value_bytes = 0
    while remaining:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{topic}: {len(remaining)} partitions unfinished after {time_limit} s")
        # consume(n, timeout) waits until n records are there or the timeout passes: ask for no more than are left
        for message in consumer.consume(max(1, min(10_000, expected - records)), 0.2):
            if message.error() is not None:
                raise RuntimeError(f"{topic}: consume error {message.error()}")
            partition, offset = message.partition(), message.offset()
            end = remaining.get(partition)
            if end is None or offset >= end:
                continue
            records += 1
            value_bytes += len(message.value())
            if offset == end - 1:
                del remaining[partition]
    elapsed = time.perf_counter() - started
    consumer.unassign()
    return records, value_bytes, elapsed


# --- latency at a fixed rate ------------------------------------------------------------------

PURGED = (KafkaError._PURGE_INFLIGHT, KafkaError._PURGE_QUEUE)
STAMP = struct.Struct("<dq")  # scheduled send time (time.perf_counter, this process) and sequence number


def latency_run(broker: Broker, topic: str, rate: int, seconds: float, warmup_s: float, drain_s: float,
                read_back: bool, value_size: int = 100, acks: str = "1", linger_ms: int = 0,
                **consumer_config: Any) -> dict[str, Any]:
    """Produce at `rate` on a fixed schedule; with `read_back`, read the records back in a second thread.

    Record i is due at t0 + i / rate and carries that time in its payload. Its produce-ack
    latency runs from then to its delivery callback, its end-to-end latency from then to the
    moment the consumer hands it over; so a stalled client or broker is charged for every record
    it held up (no coordinated omission). A record still unacknowledged or unread when the run
    gives up counts with the time it had waited by then, a lower bound."""
    total = int((warmup_s + seconds) * rate)
    warm = int(warmup_s * rate)
    acked = [math.nan] * total
    read = [math.nan] * total
    counts = {"acked": 0, "read": 0}
    errors: list[str] = []
    perf_counter = time.perf_counter

    def delivered(error, message) -> None:
        now = perf_counter()
        scheduled, index = STAMP.unpack_from(message.value())
        if error is not None:
            # records purged when the run gives up are counted as missing below, not as failures
            if error.code() not in PURGED and len(errors) < 5:
                errors.append(str(error))
            return
        if index >= 0:
            acked[index] = now - scheduled
            counts["acked"] += 1

    def on_read(scheduled: float, index: int, now: float) -> None:
        if 0 <= index < total and math.isnan(read[index]):
            read[index] = now - scheduled
            counts["read"] += 1

    padding = b"p" * max(0, value_size - STAMP.size)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": linger_ms,
                         "on_delivery": delivered, **CLIENT_LOGGING})
    with contextlib.ExitStack() as stack:
        stack.callback(producer.flush, 1)
        stack.callback(producer.purge)
        if read_back:
            tail = stack.enter_context(_Tail(broker, topic, on_read, consumer_config))
        producer.produce(topic, STAMP.pack(perf_counter(), -1) + padding, partition=0)
        if producer.flush(10):
            raise TimeoutError(f"{broker}: the warm-up record was not acknowledged in 10 s")
        if read_back and not tail.first_read.wait(15):
            raise TimeoutError(f"{broker}: the warm-up record was not read back in 15 s")
        cpu_before = broker.cpu_seconds()
        t0, sent_until = _send_on_schedule(producer, topic, padding, rate, total)
        drain_until = perf_counter() + drain_s
        while (counts["acked"] < total or (read_back and counts["read"] < total)) and perf_counter() < drain_until:
            producer.poll(0.05)
        gave_up = perf_counter()
        cpu_after = broker.cpu_seconds()
    if errors:
        raise RuntimeError(f"{broker}: {len(errors)}+ delivery errors: {errors}")
    interval = 1.0 / rate

    def summary(latencies: list[float]) -> dict[str, Any]:
        measured = latencies[warm:]
        missing = sum(1 for x in measured if math.isnan(x))
        ordered = sorted(1000 * (gave_up - (t0 + (warm + i) * interval)) if math.isnan(x) else 1000 * x
                         for i, x in enumerate(measured))
        return {"p50_ms": percentile(ordered, 0.50), "p99_ms": percentile(ordered, 0.99),
                "p999_ms": percentile(ordered, 0.999), "max_ms": ordered[-1], "missing": missing,
                "records": len(ordered)}

    elapsed = gave_up - t0
    return {"rate": rate, "seconds": seconds, "ack": summary(acked), "e2e": summary(read) if read_back else None,
            "send_behind_ms": 1000 * max(0.0, sent_until - (t0 + total * interval)),
            "broker_cpu_percent": None if cpu_before is None else 100 * (cpu_after - cpu_before) / elapsed}


class _Tail:
    """A consumer in its own thread, from the current end of partition 0, reporting each record's stamp."""

    def __init__(self, broker: Broker, topic: str, on_read, config: dict[str, Any]) -> None:
        self.consumer = reader(broker, **config)
        _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        self.consumer.assign([TopicPartition(topic, 0, high)])  # not OFFSET_END: its lookup could come too late
        self.on_read = on_read
        self.first_read = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="bench-latency-reader", daemon=True)

    def __enter__(self) -> _Tail:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.consumer.close()

    def _loop(self) -> None:
        # poll() hands over the first record as soon as it arrives; consume(n, 0) then takes what else is
        # there without waiting (consume(n, timeout) would wait for n records or the whole timeout)
        consumer, perf_counter, unpack = self.consumer, time.perf_counter, STAMP.unpack_from
        while not self.stop.is_set():
            first = consumer.poll(0.05)
            if first is None:
                continue
            now = perf_counter()
            for message in [first, *consumer.consume(1000, 0)]:
                if message.error() is not None:
                    continue
                scheduled, index = unpack(message.value())
                if index < 0:
                    self.first_read.set()
                else:
                    self.on_read(scheduled, index, now)


def _send_on_schedule(producer: Producer, topic: str, padding: bytes, rate: int, total: int) -> tuple[float, float]:
    """Send record i at t0 + i / rate; returns (t0, when the last record was handed to the client)."""
    produce, poll, perf_counter, pack = producer.produce, producer.poll, time.perf_counter, STAMP.pack
    interval = 1.0 / rate
    t0 = perf_counter() + 0.01
    give_up = t0 + total * interval + 10  # a client that cannot keep up at all must not hold the run
    sent = 0
    while sent < total:
        now = perf_counter()
        if now > give_up:
            break
        while sent < total and t0 + sent * interval <= now:
            try:
                produce(topic, pack(t0 + sent * interval, sent) + padding, partition=0)
            except BufferError:
                poll(0.0005)
                break
            sent += 1
        poll(0)
        wait = t0 + sent * interval - perf_counter()
        if wait > 0:
            time.sleep(wait)
    return t0, perf_counter()
