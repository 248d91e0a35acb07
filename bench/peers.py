"""The brokers a benchmark talks to: kbroker under test, and the peers it is compared with.

- `kbroker(ctx)`: `kbroker serve` as a subprocess on 127.0.0.1 with its data under ctx.work_dir.
- `MockBroker`: librdkafka's built-in mock cluster, a C broker running in this process on
  127.0.0.1. It is created through librdkafka's mock API (`rd_kafka_mock_cluster_new`,
  `rd_kafka_mock_topic_create`) because the mock's Metadata names controller 0, a broker it
  does not have, so a CreateTopics request from an admin client waits for a controller forever.
  The mock keeps at most 5 MiB of batches per partition (about 4.5 MB of 100-byte values) and
  answers the Java client's ApiVersions v4 wrongly: it is a peer for librdkafka clients and for
  windows of recent data only.
- `KafkaBroker`: Apache Kafka (KRaft, one node, 1 GiB heap) from Maven's jars, started by the
  harness itself (bench.kafka) once per run when a suite first asks for it (`KafkaPeer`), and
  stopped at the end of the run. A local process, so its CPU and RSS are read like kbroker's. It
  holds everything written (no 5 MiB window); its topics are created through the admin client and
  each new partition gets a first successful write before a measurement uses it (a new leader may
  answer NOT_LEADER_OR_FOLLOWER for a moment after CreateTopics returns).
- `ExternalBroker`: any broker given with `--peer host:port`; topics the benchmark creates there
  are deleted again.

`peers(ctx)` yields the mock, Apache Kafka (unless --no-kafka, or it is unavailable) and the
external broker when one was given, in that order.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import glob
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import kafka
from bench.harness import Context, cpu_seconds, rss_mib
from kbroker.testing import BrokerProcess

CLIENT_LOGGING = {"log_level": 3, "log.connection.close": False}  # errors only
MOCK_NAME = "librdkafka mock"
KBROKER_NAME = "kbroker"
KAFKA_NAME = "Apache Kafka"  # the column is "Apache Kafka <version>"


class Broker:
    """One broker as the suites see it: where it listens, how to make topics, what it costs."""

    name: str
    bootstrap: str
    kind: str  # "kbroker", "mock", "kafka" or "external"
    pid: int | None = None  # a local process whose CPU and memory can be read

    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
        _admin_create(self.bootstrap, name, partitions, config)

    def delete_topic(self, name: str) -> None:
        _admin_delete(self.bootstrap, name)

    @contextlib.contextmanager
    def scratch_topic(self, key: str, partitions: int, config: dict[str, str] | None = None) -> Iterator[str]:
        """A fresh topic for one measurement, deleted afterwards so disk use stays bounded."""
        name = f"bench-{key}-{uuid.uuid4().hex[:8]}"
        self.create_topic(name, partitions, config)
        try:
            yield name
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                self.delete_topic(name)

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.pid) if self.pid is not None else None

    def rss_mib(self) -> float | None:
        return rss_mib(self.pid) if self.pid is not None else None

    def close(self) -> None:
        """Nothing to release by default."""

    def __str__(self) -> str:
        return self.name


class KbrokerBroker(Broker):
    kind = "kbroker"

    def __init__(self, process: BrokerProcess, name: str = KBROKER_NAME) -> None:
        self.process = process
        self.name = name
        self.bootstrap = process.bootstrap

    @property
    def pid(self) -> int | None:
        return self.process.process.pid if self.process.process is not None else None

    def close(self) -> None:
        self.process.stop()


class KafkaBroker(Broker):
    """Apache Kafka started by the harness; the topics it is given are deleted by `delete_created`."""

    kind = "kafka"

    def __init__(self, process: kafka.KafkaProcess) -> None:
        self.process = process
        self.version = process.full_version
        self.name = f"{KAFKA_NAME} {self.version}"
        self.bootstrap = process.bootstrap
        self.created: list[str] = []

    @property
    def pid(self) -> int | None:
        return self.process.process.pid if self.process.process is not None else None

    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
        self.create_topics({name: partitions}, config=config)

    def create_topics(self, partitions_by_topic: dict[str, int], timeout: float = 120,
                      config: dict[str, str] | None = None) -> None:
        """CreateTopics, then one record into every new partition: back when each leader has taken a write."""
        create_topics(self.bootstrap, partitions_by_topic, timeout, config)
        self.created += partitions_by_topic
        first_writes(self.bootstrap, partitions_by_topic, timeout)

    def delete_topic(self, name: str) -> None:
        super().delete_topic(name)
        if name in self.created:
            self.created.remove(name)

    def delete_created(self) -> None:
        """Delete what a suite created, so one Kafka serves the whole run without piling up partitions."""
        names, self.created = self.created, []
        delete_topics(self.bootstrap, names)

class KafkaPeer:
    """One Apache Kafka for a whole run, started when a suite first asks for it and stopped by `close`.

    When it cannot start, `get` returns None from then on and `problem` says why; suites note it."""

    def __init__(self, work_dir: Path, version: str = kafka.DEFAULT_VERSION) -> None:
        self.work_dir = work_dir
        self.version = version
        self.process: kafka.KafkaProcess | None = None
        self.broker: KafkaBroker | None = None
        self.problem: str | None = None

    def get(self) -> KafkaBroker | None:
        if self.process is None and self.problem is None:
            self.process = kafka.KafkaProcess(self.work_dir, self.version)  # kept first: close() stops a half start
            try:
                self.process.start()
            except Exception as error:
                self.close()
                self.problem = f"Apache Kafka {self.version} did not start: {error}"
                return None
            self.broker = KafkaBroker(self.process)
        return self.broker

    def close(self) -> None:
        process, self.process, self.broker = self.process, None, None
        if process is not None:
            process.stop()

    @classmethod
    def for_run(cls, work_dir: Path, version: str | None) -> tuple[KafkaPeer | None, str | None]:
        """(the run's Kafka, None) when `version` is asked for and can run here; (None, why not) otherwise."""
        if version is None:
            return None, "left out with --no-kafka"
        problem = kafka.unavailable(version)
        if problem is not None:
            return None, f"Apache Kafka {version} is unavailable: {problem}"
        return cls(work_dir, version), None

    def describe(self) -> str:
        """What the run JSON and the docs say about Kafka."""
        if self.broker is not None:
            return f"{self.broker.name} on {self.broker.bootstrap} (KRaft, one node, {kafka.kafka_process.HEAP})"
        return self.problem or f"Apache Kafka {self.version}: not started (no suite asked for it)"


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """--no-kafka and --kafka-version, for `python -m bench` and `python -m bench.suites.<name>`."""
    parser.add_argument("--no-kafka", action="store_true",
                        help="leave Apache Kafka out (by default it is started when a JDK and the jars are there)")
    parser.add_argument("--kafka-version", choices=sorted(kafka.VERSIONS), default=kafka.DEFAULT_VERSION,
                        help="the Apache Kafka to compare with: a jar set of compat-tests/java/pom.xml (default 4)")


class ExternalBroker(Broker):
    kind = "external"

    def __init__(self, address: str) -> None:
        self.name = address
        self.bootstrap = address


class MockBroker(Broker):
    """librdkafka's mock cluster with one broker; topics are created through its C API."""

    kind = "mock"
    name = MOCK_NAME

    def __init__(self) -> None:
        self._lib = _librdkafka()
        error = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"3", error, len(error))
        self._handle = self._lib.rd_kafka_new(0, conf, error, len(error))  # 0: a producer handle
        if not self._handle:
            raise RuntimeError(f"rd_kafka_new failed: {error.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._handle, 1)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._handle)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        if not self.bootstrap.startswith(("127.0.0.1:", "localhost:")):
            self.close()
            raise RuntimeError(f"the mock cluster listens on {self.bootstrap}, not on loopback")
        self._topics: dict[str, int] = {}

    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if code:
            raise RuntimeError(f"mock: creating {name} failed with error {code}")
        self._topics[name] = partitions

    @contextlib.contextmanager
    def scratch_topic(self, key: str, partitions: int, config: dict[str, str] | None = None) -> Iterator[str]:
        """The mock cannot delete topics; it bounds each partition to 5 MiB, so one topic per key is reused."""
        name = f"bench-{key}-p{partitions}"
        if name not in self._topics:
            self.create_topic(name, partitions, config)
        yield name

    def delete_topic(self, name: str) -> None:
        """The mock's C API has no topic deletion; its memory is bounded per partition anyway."""

    def close(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster:
            self._lib.rd_kafka_mock_cluster_destroy(cluster)
        handle, self._handle = self._handle, None
        if handle:
            self._lib.rd_kafka_destroy(handle)


def _librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka itself loaded (its wheel bundles one), with the mock API typed."""
    package = os.path.dirname(confluent_kafka.__file__)
    candidates = sorted(glob.glob(os.path.join(package, os.pardir, "confluent_kafka.libs", "librdkafka*.so*")))
    path = candidates[0] if candidates else ctypes.util.find_library("rdkafka")
    if not path:
        raise RuntimeError("librdkafka not found next to confluent-kafka nor on the library path")
    lib = ctypes.CDLL(path)
    pointer, text, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    signatures = {
        "rd_kafka_conf_new": (pointer, []),
        "rd_kafka_conf_set": (ctypes.c_int, [pointer, text, text, text, size]),
        "rd_kafka_new": (pointer, [ctypes.c_int, pointer, text, size]),
        "rd_kafka_destroy": (None, [pointer]),
        "rd_kafka_mock_cluster_new": (pointer, [pointer, ctypes.c_int]),
        "rd_kafka_mock_cluster_bootstraps": (text, [pointer]),
        "rd_kafka_mock_cluster_destroy": (None, [pointer]),
        "rd_kafka_mock_topic_create": (ctypes.c_int, [pointer, text, ctypes.c_int, ctypes.c_int]),
    }
    for function, (restype, argtypes) in signatures.items():
        getattr(lib, function).restype = restype
        getattr(lib, function).argtypes = argtypes
    return lib


def _admin_create(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None,
                  timeout: float = 60) -> None:
    create_topics(bootstrap, {name: partitions}, timeout, config)


def create_topics(bootstrap: str, partitions_by_topic: dict[str, int], timeout: float = 120,
                  config: dict[str, str] | None = None, per_request: int = 50) -> None:
    """Create topics (replication factor 1) a few dozen per CreateTopics request."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGGING})
    ends = time.monotonic() + timeout
    names = list(partitions_by_topic)
    for start in range(0, len(names), per_request):
        if time.monotonic() > ends:
            raise TimeoutError(f"creating topics on {bootstrap}: out of time")
        batch = [NewTopic(name, partitions_by_topic[name], 1, config=config or {})
                 for name in names[start:start + per_request]]
        left = max(1.0, ends - time.monotonic())
        for future in admin.create_topics(batch, request_timeout=left).values():
            future.result(left)


def delete_topics(bootstrap: str, names: list[str], timeout: float = 60) -> None:
    """Best effort: used to leave a peer as it was found."""
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGGING})
    for future in admin.delete_topics(names, request_timeout=timeout).values():
        with contextlib.suppress(KafkaException):
            future.result(timeout)


def first_writes(bootstrap: str, partitions_by_topic: dict[str, int], timeout: float = 120) -> None:
    """One small record into every partition, acks=all, and wait until each is acknowledged (the client
    retries NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION meanwhile)."""
    errors: list[str] = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": int(timeout * 1000), "on_delivery": delivered, **CLIENT_LOGGING})
    for topic, partitions in partitions_by_topic.items():
        for partition in range(partitions):
            producer.produce(topic, b"ready", partition=partition)
            producer.poll(0)
    left = producer.flush(timeout)
    if left or errors:
        raise RuntimeError(f"{bootstrap}: first writes failed ({left} unacknowledged): {errors[:5]}")


def _admin_delete(bootstrap: str, name: str, timeout: float = 60) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGGING})
    admin.delete_topics([name], request_timeout=timeout)[name].result(timeout)


_instances = itertools.count()


@contextlib.contextmanager
def kbroker(ctx: Context, *overrides: str, name: str = KBROKER_NAME) -> Iterator[KbrokerBroker]:
    """A fresh `kbroker serve` subprocess with its own data directory; stopped (SIGTERM) on exit."""
    data_dir = Path(ctx.work_dir) / f"{name}-{next(_instances)}"
    data_dir.mkdir(parents=True, exist_ok=True)
    process = BrokerProcess(data_dir, *overrides, event_loop=ctx.event_loop)
    broker = KbrokerBroker(process.start(), name)
    try:
        yield broker
    finally:
        broker.close()


@contextlib.contextmanager
def peers(ctx: Context) -> Iterator[list[Broker]]:
    """The brokers kbroker is compared with: the mock, Apache Kafka (when the run has it), then `--peer`."""
    with contextlib.ExitStack() as stack:
        mock = MockBroker()
        stack.callback(mock.close)
        found: list[Broker] = [mock, *run_kafka(ctx, stack)]
        if ctx.peer:
            found.append(ExternalBroker(ctx.peer))
        yield found


def run_kafka(ctx: Context, stack: contextlib.ExitStack) -> list[KafkaBroker]:
    """The run's Apache Kafka (started on first use) as a one-item list, or [] with a note saying why not.
    What a suite creates on it is deleted when `stack` closes."""
    if ctx.kafka is None:
        return []
    broker = ctx.kafka.get()
    if broker is None:
        ctx.notes.append(ctx.kafka.problem or "Apache Kafka is unavailable")
        return []
    stack.callback(broker.delete_created)
    return [broker]
