"""The brokers a benchmark talks to: kbroker under test, and the peers it is compared with.

- `kbroker(ctx)`: `kbroker serve` as a subprocess on 127.0.0.1 with its data under ctx.work_dir.
- `MockBroker`: librdkafka's built-in mock cluster, a C broker running in this process on
  127.0.0.1. It is created through librdkafka's mock API (`rd_kafka_mock_cluster_new`,
  `rd_kafka_mock_topic_create`) because the mock's Metadata names controller 0, a broker it
  does not have, so a CreateTopics request from an admin client waits for a controller forever.
  The mock keeps at most 5 MiB of batches per partition (about 4.5 MB of 100-byte values) and
  answers the Java client's ApiVersions v4 wrongly: it is a peer for librdkafka clients and for
  windows of recent data only.
- `ExternalBroker`: any broker given with `--peer host:port` (e.g. Apache Kafka); topics the
  benchmark creates there are deleted again.

`peers(ctx)` yields the mock plus the external broker when one was given, in that order.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import Context, cpu_seconds, rss_mib
from kbroker.testing import BrokerProcess

CLIENT_LOGGING = {"log_level": 3, "log.connection.close": False}  # errors only
MOCK_NAME = "librdkafka mock"
KBROKER_NAME = "kbroker"


class Broker:
    """One broker as the suites see it: where it listens, how to make topics, what it costs."""

    name: str
    bootstrap: str
    kind: str  # "kbroker", "mock" or "external"
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
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_LOGGING})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], request_timeout=timeout)
    futures[name].result(timeout)


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
    """The brokers kbroker is compared with: the mock, then `--peer` when given."""
    with contextlib.ExitStack() as stack:
        mock = MockBroker()
        stack.callback(mock.close)
        found: list[Broker] = [mock]
        if ctx.peer:
            found.append(ExternalBroker(ctx.peer))
        yield found
