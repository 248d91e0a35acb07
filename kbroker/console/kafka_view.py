"""What the console shows, read from a broker through the Kafka protocol with confluent-kafka."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import uuid
from collections import deque
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
    ResourceType,
)

from kbroker.console import log_dirs

try:  # newer confluent-kafka only
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover - confluent-kafka>=2.4 has it
    from confluent_kafka.admin import ConsumerGroupTopicPartitions

TIMEOUT_S = 10.0
MAX_MESSAGES = 500
SEARCH_SCAN_LIMIT = 10_000  # records read at most when searching by key
LAG_SAMPLES_KEPT = 360  # 30 minutes at one sample every 5 s


class ConsoleError(Exception):
    """A request the console cannot answer; `status` is the HTTP status to reply with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _result(future: Any) -> Any:
    try:
        return future.result(timeout=TIMEOUT_S)
    except KafkaException as error:
        raise ConsoleError(str(error.args[0] if error.args else error), 502) from error


def _node(node: Any) -> dict[str, Any] | None:
    if node is None:
        return None
    return {"id": node.id, "host": node.host, "port": node.port, "rack": node.rack}


def _text_or_base64(data: bytes | None) -> dict[str, Any] | None:
    """UTF-8 text as is; anything else as base64, so the browser can still show it."""
    if data is None:
        return None
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


class KafkaView:
    """One AdminClient and Producer shared by all requests; a short-lived Consumer per message read."""

    def __init__(self, bootstrap_servers: str, client_config: dict[str, Any] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = {"bootstrap.servers": bootstrap_servers, "client.id": "kbroker-console",
                              "log.connection.close": False, **(client_config or {})}
        self.admin = AdminClient(self.client_config)
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()

    def close(self) -> None:
        """Flush and drop the clients, so none of them keeps reconnecting to a broker that went away."""
        if self._producer is not None:
            self._producer.flush(TIMEOUT_S)
        self._producer = None
        self.admin = None

    # --- cluster and topics -------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        described = _result(self.admin.describe_cluster())
        controller_id = described.controller.id if described.controller else None
        brokers = [{**_node(node), "controller": node.id == controller_id}
                   for node in sorted(described.nodes, key=lambda n: n.id)]
        return {"cluster_id": described.cluster_id, "controller": _node(described.controller), "brokers": brokers,
                "bootstrap_servers": self.bootstrap_servers}

    def topics(self) -> list[dict[str, Any]]:
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        names = sorted(name for name in metadata.topics if not name.startswith("__"))
        offsets = self._offsets([TopicPartition(name, p) for name in names for p in metadata.topics[name].partitions])
        listing = []
        for name in names:
            partitions = metadata.topics[name].partitions
            messages = sum(offsets.get((name, p), (0, 0))[1] - offsets.get((name, p), (0, 0))[0] for p in partitions)
            replication = max((len(part.replicas) for part in partitions.values()), default=0)
            under_replicated = sum(1 for part in partitions.values() if len(part.isrs) < len(part.replicas))
            listing.append({"name": name, "partitions": len(partitions), "replication_factor": replication,
                            "messages": messages, "under_replicated": under_replicated})
        return listing

    def topic(self, name: str) -> dict[str, Any]:
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)  # all topics: asking for one may auto-create it
        topic = metadata.topics.get(name)
        if topic is None:
            raise ConsoleError(f"no topic {name!r}", 404)
        offsets = self._offsets([TopicPartition(name, p) for p in topic.partitions])
        sizes, sizes_note = self._leader_sizes(metadata, name)
        partitions = []
        for index in sorted(topic.partitions):
            part = topic.partitions[index]
            earliest, latest = offsets.get((name, index), (None, None))
            partitions.append({"partition": index, "leader": part.leader, "replicas": list(part.replicas),
                               "isr": list(part.isrs), "earliest_offset": earliest, "latest_offset": latest,
                               "size_bytes": sizes.get(index)})
        return {"name": name, "partitions": partitions, "configs": self.topic_configs(name),
                "sizes_note": sizes_note}

    @staticmethod
    def _leader_sizes(metadata: Any, name: str) -> tuple[dict[int, int], str | None]:
        """Each partition's size on its leader, by DescribeLogDirs to every leader; a note when some are missing."""
        by_leader: dict[int, list[int]] = {}
        for index, part in metadata.topics[name].partitions.items():
            by_leader.setdefault(part.leader, []).append(index)
        sizes: dict[int, int] = {}
        failures = []
        for leader, indexes in by_leader.items():
            broker = metadata.brokers.get(leader)
            if broker is None:
                failures.append(f"broker {leader} is unknown")
                continue
            try:
                found = log_dirs.partition_sizes(broker.host, broker.port, name, sorted(indexes), TIMEOUT_S)
            except Exception as error:  # refused, not allowed, an old broker: only the Size column is lost
                failures.append(f"broker {leader}: {error}")
                continue
            sizes.update({index: found[index] for index in indexes if index in found})
        return sizes, ("DescribeLogDirs failed: " + "; ".join(failures)) if failures else None

    def topic_configs(self, name: str) -> list[dict[str, Any]]:
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = _result(self.admin.describe_configs([resource])[resource])
        return [{"name": entry.name, "value": None if entry.is_sensitive else entry.value,
                 "default": bool(entry.is_default), "read_only": bool(entry.is_read_only),
                 "source": _config_source(entry.source)}
                for entry in sorted(entries.values(), key=lambda e: e.name)]

    def _offsets(self, partitions: list[TopicPartition]) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, latest) offset of each partition, by ListOffsets."""
        if not partitions:
            return {}
        earliest = self.admin.list_offsets({tp: OffsetSpec.earliest() for tp in partitions})
        latest = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions})
        found: dict[tuple[str, int], tuple[int, int]] = {}
        for tp in partitions:
            low, high = earliest[tp], latest[tp]
            try:
                found[(tp.topic, tp.partition)] = (_result(low).offset, _result(high).offset)
            except ConsoleError:
                continue  # a partition without a leader right now: leave it out
        return found

    # --- messages -------------------------------------------------------------------------

    def messages(self, topic: str, partition: int, offset: int | None = None, timestamp_ms: int | None = None,
                 limit: int = 50, key_contains: str | None = None) -> dict[str, Any]:
        """Records of one partition from `offset` (default: the earliest) or the first at or after `timestamp_ms`;
        with `key_contains`, only those whose key contains it (scanning at most SEARCH_SCAN_LIMIT records)."""
        limit = max(1, min(limit, MAX_MESSAGES))
        earliest, latest = self._offsets([TopicPartition(topic, partition)]).get((topic, partition), (None, None))
        if earliest is None:
            raise ConsoleError(f"no partition {topic}-{partition}", 404)
        start = self._start_offset(topic, partition, offset, timestamp_ms, earliest, latest)
        found = self._read(topic, partition, start, latest, limit, key_contains)
        return {"topic": topic, "partition": partition, "earliest_offset": earliest, "latest_offset": latest,
                "start_offset": start, "messages": found}

    def _start_offset(self, topic: str, partition: int, offset: int | None, timestamp_ms: int | None,
                      earliest: int, latest: int) -> int:
        if timestamp_ms is not None:
            tp = TopicPartition(topic, partition)
            answer = _result(self.admin.list_offsets({tp: OffsetSpec.for_timestamp(timestamp_ms)})[tp])
            return latest if answer.offset < 0 else answer.offset
        if offset is None:
            return earliest
        return min(max(offset, earliest), latest)

    def _read(self, topic: str, partition: int, start: int, end: int, limit: int,
              key_contains: str | None) -> list[dict[str, Any]]:
        if start >= end:
            return []
        consumer = Consumer({**self.client_config, "group.id": f"kbroker-console-{uuid.uuid4()}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": "read_uncommitted"})
        found: list[dict[str, Any]] = []
        scanned = 0
        deadline = time.monotonic() + TIMEOUT_S
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            while len(found) < limit and scanned < SEARCH_SCAN_LIMIT and time.monotonic() < deadline:
                wanted = limit - len(found) if not key_contains else 500
                batch = consumer.consume(min(wanted, SEARCH_SCAN_LIMIT - scanned), timeout=0.1)
                reached_end = False
                for message in batch:
                    if message.error() is not None:
                        if message.error().code() == KafkaError._PARTITION_EOF:
                            reached_end = True
                            continue
                        raise ConsoleError(str(message.error()), 502)
                    scanned += 1
                    reached_end = reached_end or message.offset() + 1 >= end
                    if self._key_matches(message.key(), key_contains) and len(found) < limit:
                        found.append(self._describe(message))
                if reached_end:
                    break
        finally:
            consumer.close()
        return found

    @staticmethod
    def _key_matches(key: bytes | None, key_contains: str | None) -> bool:
        if not key_contains:
            return True
        return key is not None and key_contains.encode("utf-8") in key

    @staticmethod
    def _describe(message: Any) -> dict[str, Any]:
        kind, timestamp = message.timestamp()
        return {"partition": message.partition(), "offset": message.offset(), "timestamp": timestamp,
                "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(kind, "none"),
                "key": _text_or_base64(message.key()), "value": _text_or_base64(message.value()),
                "headers": [{"key": name, "value": _text_or_base64(value)}
                            for name, value in (message.headers() or [])]}

    def produce(self, topic: str, value: str | None, key: str | None = None, partition: int | None = None,
                headers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """Produce one record and wait for its acknowledgement: the test message of the console."""
        outcome: dict[str, Any] = {}

        def delivered(error: KafkaError | None, message: Any) -> None:
            outcome["error"] = error
            outcome["message"] = message

        with self._producer_lock:
            if self._producer is None:
                self._producer = Producer({**self.client_config, "linger.ms": 0})
            options: dict[str, Any] = {"value": value, "key": key, "headers": headers or None,
                                       "on_delivery": delivered}
            if partition is not None:
                options["partition"] = partition
            try:
                self._producer.produce(topic, **options)
            except KafkaException as error:
                raise ConsoleError(str(error), 400) from error
            self._producer.flush(TIMEOUT_S)
        if "message" not in outcome:
            raise ConsoleError("no acknowledgement in time", 504)
        if outcome["error"] is not None:
            raise ConsoleError(outcome["error"].str(), 502)
        message = outcome["message"]
        return {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()}

    # --- consumer groups ------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        listed = _result(self.admin.list_consumer_groups())
        return sorted(group.group_id for group in listed.valid)

    def groups(self) -> list[dict[str, Any]]:
        ids = self.group_ids()
        if not ids:
            return []
        described = self.admin.describe_consumer_groups(ids)
        listing = []
        for group_id in ids:
            description = _result(described[group_id])
            lag = self.group_lag(group_id)
            listing.append({"group_id": group_id, "state": _enum_name(description.state),
                            "members": len(description.members), "protocol": description.partition_assignor,
                            "coordinator": _node(description.coordinator),
                            "lag": sum(row["lag"] for row in lag if row["lag"] is not None)})
        return listing

    def group(self, group_id: str) -> dict[str, Any]:
        if group_id not in self.group_ids():
            raise ConsoleError(f"no consumer group {group_id!r}", 404)
        description = _result(self.admin.describe_consumer_groups([group_id])[group_id])
        members = [{"member_id": member.member_id, "client_id": member.client_id, "host": member.host,
                    "group_instance_id": member.group_instance_id,
                    "assignment": [{"topic": tp.topic, "partition": tp.partition}
                                   for tp in (member.assignment.topic_partitions if member.assignment else [])]}
                   for member in description.members]
        return {"group_id": group_id, "state": _enum_name(description.state),
                "protocol": description.partition_assignor, "coordinator": _node(description.coordinator),
                "members": members, "offsets": self.group_lag(group_id)}

    def group_lag(self, group_id: str) -> list[dict[str, Any]]:
        """Committed offset, log end offset and lag of each partition the group has committed."""
        request = [ConsumerGroupTopicPartitions(group_id)]
        committed = _result(self.admin.list_consumer_group_offsets(request)[group_id]).topic_partitions or []
        committed = [tp for tp in committed if tp.offset >= 0]
        ends = self._offsets([TopicPartition(tp.topic, tp.partition) for tp in committed])
        rows = []
        for tp in sorted(committed, key=lambda t: (t.topic, t.partition)):
            end = ends.get((tp.topic, tp.partition), (None, None))[1]
            rows.append({"topic": tp.topic, "partition": tp.partition, "committed_offset": tp.offset,
                         "log_end_offset": end, "lag": None if end is None else max(0, end - tp.offset)})
        return rows


def _config_source(source: Any) -> str:
    """Kafka's name for where a config's value comes from (confluent-kafka hands over the number)."""
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def _enum_name(value: Any) -> str:
    return getattr(value, "name", str(value))


class LagSampler:
    """Samples every group's total lag every `interval_s`, so the console can chart lag over time."""

    def __init__(self, view: KafkaView, interval_s: float = 5.0) -> None:
        self.view = view
        self.interval_s = interval_s
        self._history: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbroker-console-lag", daemon=True)

    def start(self) -> LagSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # a console closed before it served never started sampling
            self._thread.join(TIMEOUT_S + 5)

    def history(self, group_id: str) -> list[list[float]]:
        with self._lock:
            return [[at, lag] for at, lag in self._history.get(group_id, ())]

    def sample_once(self) -> None:
        now = time.time()
        for group_id in self.view.group_ids():
            rows = self.view.group_lag(group_id)
            total = sum(row["lag"] for row in rows if row["lag"] is not None)
            with self._lock:
                self._history.setdefault(group_id, deque(maxlen=LAG_SAMPLES_KEPT)).append((now, total))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):  # the first sample after one interval: the broker is up by then
            with contextlib.suppress(ConsoleError, KafkaException):  # the broker is away: the chart shows a gap
                self.sample_once()
