"""The Prometheus endpoint: `http://<prometheus.host>:<prometheus.port>/metrics`, off unless prometheus.port is set.

Names follow the conventions of the Prometheus JMX exporter's Kafka rules (docs/metrics.md maps each one to its
MBean). Two kinds of figures, kept apart so that the request path stays cheap:

- events (messages and bytes per topic, requests and their times per API, ISR shrinks and expands, log flushes)
  are plain integer and list updates made only while metrics are on: `broker.metrics` is None otherwise, and every
  call site checks that first;
- state (purgatory sizes, under-replicated and offline partitions, leaders, active controller, log sizes, groups,
  lag, connections) is read from the broker when /metrics is scraped, by `BrokerCollector`.

/metrics is answered on the broker's own event loop (a small asyncio HTTP responder), so the collector reads
broker state on the thread that changes it; prometheus_client only formats the text.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from time import perf_counter

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from kbroker.net.http import HttpAnswer, HttpRequest, plain, serve_http
from wire import messages

log = logging.getLogger(__name__)

# upper bounds in milliseconds: fine below 10 ms, where a healthy broker answers, coarse above
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                   10000.0, 30000.0)


def _api_name(api_key: int) -> str:
    """Kafka's request label: the request message name without 'Request' (Produce, Fetch, ApiVersions...)."""
    try:
        return messages.api(api_key).request.name.removesuffix("Request")
    except Exception:
        return f"Unknown{api_key}"


class TimeHistogram:
    """Observations in milliseconds: one bisect and two additions each; cumulative buckets only at scrape time."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(TIME_BUCKETS_MS) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, millis: float) -> None:
        self.counts[bisect.bisect_left(TIME_BUCKETS_MS, millis)] += 1
        self.total += millis

    def buckets(self) -> list[tuple[str, int]]:
        cumulative, out = 0, []
        for bound, count in zip((*map(str, TIME_BUCKETS_MS), "+Inf"), self.counts, strict=True):
            cumulative += count
            out.append((bound, cumulative))
        return out


class RequestTimes:
    """One API's request count and time histograms (Kafka's RequestMetrics)."""

    __slots__ = ("count", "local", "request_queue", "response_queue", "total")

    def __init__(self) -> None:
        self.count = 0
        self.request_queue = TimeHistogram()
        self.local = TimeHistogram()
        self.response_queue = TimeHistogram()
        self.total = TimeHistogram()


class RequestTiming:
    """One request's clock readings (perf_counter seconds), carried by the connection until its answer is written."""

    __slots__ = ("answered", "api_key", "arrived", "started")

    def __init__(self, api_key: int, arrived: float, started: float) -> None:
        self.api_key, self.arrived, self.started, self.answered = api_key, arrived, started, started


class BrokerMetrics:
    """The event counters of one broker; `running` (a kbroker.runner.RunningBroker) is read at scrape time."""

    def __init__(self, running) -> None:
        self.running = running
        self.messages_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_out: defaultdict[str, int] = defaultdict(int)
        self.requests: dict[int, RequestTimes] = {}
        self.log_flush = TimeHistogram()
        self.failed_authentications: defaultdict[str, int] = defaultdict(int)  # by listener
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(self))
        self._flush_observers = running.broker.logs.flusher.flush_observers  # this broker's logs only
        self._flush_observers.append(self.flushed)

    def close(self) -> None:
        """Stop observing log flushes (the endpoint is gone)."""
        with contextlib.suppress(ValueError):
            self._flush_observers.remove(self.flushed)

    # --- the request path (called only while metrics are on) -----------------------------

    def produced(self, topic: str, messages_appended: int, size: int) -> None:
        self.messages_in[topic] += messages_appended
        self.bytes_in[topic] += size

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] += size

    def flushed(self, seconds: float) -> None:
        self.log_flush.observe(seconds * 1000)

    def request_started(self, api_key: int, arrived: float) -> RequestTiming:
        return RequestTiming(api_key, arrived, perf_counter())

    def requests_written(self, timings: Iterable[RequestTiming]) -> None:
        """The answers of `timings` were just handed to the socket (or there was none: acks=0)."""
        now = perf_counter()
        for timing in timings:
            times = self.requests.get(timing.api_key)
            if times is None:
                times = self.requests[timing.api_key] = RequestTimes()
            times.count += 1
            times.request_queue.observe((timing.started - timing.arrived) * 1000)
            times.local.observe((timing.answered - timing.started) * 1000)
            times.response_queue.observe((now - timing.answered) * 1000)
            times.total.observe((now - timing.arrived) * 1000)

    # --- the endpoint ---------------------------------------------------------------------

    def scrape(self) -> bytes:
        return generate_latest(self.registry)


def _counter(name: str, doc: str, labels: list[str], values: dict) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerCollector:
    """Every figure of docs/metrics.md, built at scrape time from the counters and from broker state."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        yield from self._topic_counters(metrics)
        yield from self._request_metrics(metrics)
        broker = metrics.running.broker
        if broker is None:
            return  # stopping: only the counters are left
        yield from self._replica_state(broker)
        yield from self._controller_state(metrics.running, broker)
        yield from self._logs(broker, metrics)
        yield from self._groups(broker)
        yield from self._connections(metrics)

    def _topic_counters(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        yield _counter("kafka_server_brokertopicmetrics_messagesin", "Messages appended, by topic",
                       ["topic"], metrics.messages_in)
        yield _counter("kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers, by topic",
                       ["topic"], metrics.bytes_in)
        yield _counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to consumers, by topic",
                       ["topic"], metrics.bytes_out)

    def _request_metrics(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        count = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered, by API",
                                    labels=["request"])
        families = {
            "request_queue": HistogramMetricFamily("kafka_network_requestmetrics_requestqueuetimems",
                                                   "From the request read whole to its handling, ms",
                                                   labels=["request"]),
            "local": HistogramMetricFamily("kafka_network_requestmetrics_localtimems",
                                           "Handling, waits in purgatory included, ms", labels=["request"]),
            "response_queue": HistogramMetricFamily("kafka_network_requestmetrics_responsequeuetimems",
                                                    "From the answer ready to its write to the socket, ms",
                                                    labels=["request"]),
            "total": HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                           "From the request read whole to its answer written, ms",
                                           labels=["request"]),
        }
        for api_key, times in sorted(metrics.requests.items()):
            name = _api_name(api_key)
            count.add_metric([name], times.count)
            for attribute, family in families.items():
                histogram: TimeHistogram = getattr(times, attribute)
                family.add_metric([name], histogram.buckets(), histogram.total)
        yield count
        yield from families.values()

    def _replica_state(self, broker) -> Iterator[Metric]:
        replicas = broker.replicas
        hosted = replicas.partitions()
        led = [p for p in hosted if p.is_leader]
        yield _gauge("kafka_server_replicamanager_leadercount", "Partitions led by this broker", len(led))
        yield _gauge("kafka_server_replicamanager_partitioncount", "Partitions hosted by this broker", len(hosted))
        yield _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                     "Partitions led here whose ISR is smaller than their replica set",
                     sum(1 for p in led if len(p.isr) < len(p.replicas)))
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks committed by the controller",
                                  value=replicas.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expands committed by the controller",
                                  value=replicas.isr_expands)
        purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                      "Requests waiting in a purgatory", labels=["delayedOperation"])
        purgatory.add_metric(["Produce"], replicas.purgatory.size())
        purgatory.add_metric(["Fetch"], broker.fetch_waiters.watched())
        yield purgatory

    def _controller_state(self, running, broker) -> Iterator[Metric]:
        member = running.member
        if member is None:  # a single node is its own controller
            active = 1
            offline = sum(1 for topic in list(broker.topics.values()) for index in range(topic.partitions)
                          if broker.partition_log(topic.name, index) is None)
        else:
            controller = member.controller
            active = 1 if controller is not None and controller.is_active else 0
            offline = controller.core.context.offline_partition_count if active else 0
        yield _gauge("kafka_controller_kafkacontroller_activecontrollercount",
                     "1 on the active controller, else 0", active)
        yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                     "Partitions without a leader (reported by the active controller)", offline)

    def _logs(self, broker, metrics: BrokerMetrics) -> Iterator[Metric]:
        sizes = GaugeMetricFamily("kafka_log_log_size", "Bytes in a partition's segments",
                                  labels=["topic", "partition"])
        for (topic, index), partition_log in sorted(broker.logs.items()):
            with contextlib.suppress(ValueError, OSError):  # a log closed meanwhile (its dir failed) is left out
                sizes.add_metric([topic, str(index)], partition_log.size)
        yield sizes
        flush = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems", "Log flushes (fsync), ms")
        flush.add_metric([], metrics.log_flush.buckets(), metrics.log_flush.total)
        yield flush

    def _groups(self, broker) -> Iterator[Metric]:
        coordinator = broker._coordinator
        if coordinator is None:
            groups: set[str] = set()
            committed: dict = {}
        else:
            committed = coordinator.offsets.offsets
            groups = {*coordinator.groups.groups, *coordinator.consumer_groups.groups, *committed}
        yield _gauge("kafka_coordinator_group_groupmetadatamanager_numgroups", "Consumer groups coordinated here",
                     len(groups))
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed offset",
                                labels=["consumergroup", "topic", "partition"])
        for group, offsets in sorted(committed.items()):
            for (topic, index), offset in sorted(offsets.items()):
                partition_log = broker.partition_log(topic, index)
                if partition_log is not None and offset.offset >= 0:
                    lag.add_metric([group, topic, str(index)], max(0, partition_log.high_watermark - offset.offset))
        yield lag

    def _connections(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open client connections, by listener", labels=["listener"])
        failed = CounterMetricFamily("kafka_server_socket_server_metrics_failed_authentication",
                                     "Failed authentications, by listener", labels=["listener"])
        for server in metrics.running.servers:
            connections.add_metric([server.listener], len(server.connections))
            failed.add_metric([server.listener], metrics.failed_authentications[server.listener])
        yield connections
        yield failed


class MetricsEndpoint:
    """/metrics over HTTP, answered on the broker's event loop (kbroker.net.http)."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await serve_http(self._answer, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def _answer(self, request: HttpRequest) -> HttpAnswer:
        if request.method not in ("GET", "HEAD"):
            return plain(405, "only GET\n")
        if request.path not in ("/metrics", "/"):
            return plain(404, "try /metrics\n")
        return HttpAnswer(200, CONTENT_TYPE_LATEST, self.metrics.scrape())


def endpoint_address(config) -> tuple[str, int] | None:
    """(host, port) of the endpoint, or None when prometheus.port is not set."""
    port = config["prometheus.port"]
    if port is None:
        return None
    host = config["prometheus.host"]
    if host is None:
        listeners = config.listeners
        host = (listeners[0].host if listeners else "") or "127.0.0.1"
    return str(host), int(port)
