"""The broker's state: its configuration, its topics and their partition logs.

APIs act on this object; it knows nothing of sockets. Topic names, ids, partition counts
and per-topic configs are kept in `kbroker-topics.json` at the root of the first log dir
(Kafka keeps them in its metadata log or ZooKeeper; a single node needs only a file),
written atomically so a crash never leaves it half written. A data dir without that file (one Apache
Kafka wrote) has its topics adopted from the partition dirs and Kafka's metadata log (log/kraft_metadata.py).

A log dir that fails goes offline (kbroker.log.manager): its partitions answer
KAFKA_STORAGE_ERROR (`partition_error`) until a restart. As Kafka halts when all its log dirs
have failed, or when its metadata log dir (by default the first of log.dirs) has, this broker
must stop when none is left or when the first one, holding the topics file, fails;
`on_log_dir_failure` (the runner's) is told which.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.cluster.partition import DEFAULT_REPLICA_LAG_TIME_MAX_MS
from kbroker.cluster.replica_manager import SINGLE_NODE_LEADER_EPOCH, ReplicaManager
from kbroker.config import BrokerConfig, ConfigError
from kbroker.dynamic_config import DEFAULT_ENTITY, DynamicConfigStore, reconfigured, usable
from kbroker.log.checkpoints import (
    CheckpointError,
    fsync_dir,
    read_partition_metadata,
    uuid_text,
    write_partition_metadata,
)
from kbroker.log.config import LogConfig
from kbroker.log.errors import LogDirOfflineError
from kbroker.log.kraft_metadata import topics_on_disk
from kbroker.log.manager import LogManager
from kbroker.log.partition_log import PartitionLog
from kbroker.log_dir_mover import LogDirMover
from kbroker.replication_quotas import ALTER_LOG_DIRS_RATE, ReplicationQuotas, dynamic_rate
from wire.errors import ErrorCode

logger = logging.getLogger(__name__)
TOPICS_FILE = "kbroker-topics.json"
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_TOPIC_NAME_LENGTH = 249


class TopicError(Exception):
    """A topic operation Kafka would refuse; `error_code` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


# A single node leads every partition from its creation, so every leader epoch is Kafka's first, 0
# (the replica manager hosts each partition at it). Metadata and DescribeTopicPartitions report it.
LEADER_EPOCH = SINGLE_NODE_LEADER_EPOCH


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def topic_name_problem(name: str) -> str | None:
    """Kafka's topic-name rules (Topic.validate); None when the name is legal."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not set(name) <= _LEGAL_TOPIC_CHARS:
        return (f"Topic name {name!r} is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


class FetchWaiters:
    """Long-polling fetches parked by partition, as in Kafka's fetch purgatory: an append wakes
    only the fetches that wait on its partition, not every fetch of every idle consumer.

    Followers read up to the log end, consumers up to the high watermark, so on a replicated
    partition an append wakes only the followers and a HW move only the consumers (as Kafka's
    DelayedFetch completes on bytes it may return); each would otherwise wake, find nothing new
    and park again, a few times per produce."""

    def __init__(self) -> None:
        self._consumers: dict[tuple[str, int], set[asyncio.Future]] = {}
        self._followers: dict[tuple[str, int], set[asyncio.Future]] = {}

    def park(self, partitions: list[tuple[str, int]], follower: bool = False) -> asyncio.Future:
        """A future resolved when any of `partitions` may have more for this fetch; `unpark` it when done."""
        future = asyncio.get_running_loop().create_future()
        parked = self._followers if follower else self._consumers
        for key in partitions:
            parked.setdefault(key, set()).add(future)
        return future

    def unpark(self, future: asyncio.Future, partitions: list[tuple[str, int]], follower: bool = False) -> None:
        parked = self._followers if follower else self._consumers
        for key in partitions:
            waiting = parked.get(key)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del parked[key]

    def wake(self, topic: str, partition: int) -> None:
        """Every fetch parked on the partition: its data, leadership or existence changed."""
        self.wake_followers(topic, partition)
        self.wake_consumers(topic, partition)

    def wake_followers(self, topic: str, partition: int) -> None:
        """The partition's log end moved but not its high watermark: only followers can read more."""
        _resolve(self._followers.pop((topic, partition), None))

    def wake_consumers(self, topic: str, partition: int) -> None:
        """The partition's high watermark moved: consumers can read more, followers cannot."""
        _resolve(self._consumers.pop((topic, partition), None))

    def watched(self) -> int:
        """Kafka's fetch PurgatorySize: fetches still waiting, counted once per partition they watch."""
        return sum(1 for parked in (self._consumers, self._followers) for waiting in parked.values()
                   for future in waiting if not future.done())

    def wake_all(self) -> None:
        """Shutdown: every parked fetch answers now."""
        for topic, partition in list(self._consumers) + list(self._followers):
            self.wake(topic, partition)


def _resolve(futures: set[asyncio.Future] | None) -> None:
    for future in futures or ():
        if not future.done():
            future.set_result(None)


def _layered_or_static(static: BrokerConfig, cluster_default: dict[str, str],
                       this_broker: dict[str, str]) -> BrokerConfig:
    """The static config under stored dynamic configs (each already usable alone), or alone if together they
    cannot apply (logged, as Kafka does)."""
    try:
        return static.with_dynamic(cluster_default, this_broker)
    except ConfigError as error:
        logger.error("Dynamic broker configs could not be applied: %s", error)
        return static.with_dynamic({}, {})


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.node_id = config.broker_id
        self.log_dirs = config.log_dirs
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        # dynamic broker configs (kbroker.dynamic_config): `config` is the one in effect, static under dynamic;
        # a single node keeps them in a file, a cluster in ZooKeeper's /config/brokers (applied by its member)
        self.dynamic_configs = None if config.cluster_mode else DynamicConfigStore(self.log_dirs[0])
        self.config = self._with_stored_dynamic_configs(config)
        # called with (old, new) after a dynamic change takes effect, as Kafka's BrokerReconfigurables
        self.config_observers: list[Callable[[BrokerConfig, BrokerConfig], None]] = []
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        saved = self._read_topics_file()
        if not self._topics_path().exists():  # a data dir kbroker never served (Apache Kafka's): adopt its topics
            saved = [Topic(*found) for found in topics_on_disk(self.log_dirs)]
        topic_configs = {t.name: self.log_config_for(t) for t in saved}
        self.logs = LogManager(self.log_dirs, self.default_log_config(), topic_configs=topic_configs)
        # (failed log dir, whether the broker must stop); set by the runner, called from any thread
        self.on_log_dir_failure: Callable[[Path, bool], object] | None = None
        self.logs.on_dir_failure = self._log_dir_failed
        self.fetch_waiters = FetchWaiters()  # long-polling fetches, woken by appends to their partitions
        # this broker's view of its partitions (leadership, ISR, HW): a cluster of one, every partition led here
        self.replicas = ReplicaManager(self.node_id, min_insync_replicas=self._min_insync_replicas,
                                       replica_lag_time_max_ms=int(self.config.values.get(  # type: ignore[arg-type]
                                           "replica.lag.time.max.ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS)),
                                       unhosted_error=self.partition_error)
        self.replicas.on_high_watermark = self.fetch_waiters.wake_consumers
        self.replicas.on_leadership_moved = self.fetch_waiters.wake
        # AlterReplicaLogDirs: logs copied to another log dir a chunk (replica.fetch.max.bytes) at a time, throttled
        self.log_dir_mover = LogDirMover(self.logs, self.replicas, lambda: int(self.config["replica.fetch.max.bytes"]),
                                         lambda: dynamic_rate(self.config, ALTER_LOG_DIRS_RATE))
        self.replication_quotas = ReplicationQuotas(lambda: self.node_id, lambda: self.config, self._topic_configs)
        try:
            self._adopt_logs(saved)
        except BaseException:
            self.logs.close()  # nothing was served: the dirs stay clean, so the next start skips recovery
            raise
        # ids from the clock (shifted) so a restarted broker never hands out an id it gave before
        self.next_producer_id = now_ms() << 8
        self.closing = False
        self.faults = None  # kbroker.faults.Faults while a test injects faults or records requests
        self.metrics = None  # kbroker.metrics.BrokerMetrics while prometheus.port is set
        # what Metadata hands out; the runner fills in the real port when listening on port 0
        self.advertised_listener = config.advertised_listeners[0]
        self._coordinator = None  # kbroker.coordinator.Coordinator, built on first use
        self._transactions = None  # kbroker.coordinator.transactions.TransactionCoordinator, likewise

    def _adopt_logs(self, saved: list[Topic]) -> None:
        given_cluster_id = self.config["cluster.id"] or self._saved_cluster_id
        self.cluster_id = self.logs.ensure_meta_properties(self.node_id, given_cluster_id)
        for topic in saved:
            self._register(topic)  # each partition hosted as its sole replica: the HW moves to the log end
        self._save_topics()

    # --- configuration -------------------------------------------------------------------

    def _with_stored_dynamic_configs(self, static: BrokerConfig) -> BrokerConfig:
        """The static config under the dynamic configs kept from earlier runs; as Kafka, those that can no
        longer apply are logged and ignored."""
        if self.dynamic_configs is None:
            return static.with_dynamic({}, {})
        cluster_default = usable(self.dynamic_configs.get(DEFAULT_ENTITY), False, "default cluster")
        this_broker = usable(self.dynamic_configs.get(str(self.node_id)), True, "broker")
        return _layered_or_static(static, cluster_default, this_broker)

    def change_dynamic_configs(self, entity: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """Replace the dynamic configs of this broker (`entity` its id) or of the cluster default
        (DEFAULT_ENTITY); they take effect at once and are kept for the next start. Raises
        DynamicConfigError for what Kafka would refuse."""
        new = self.check_dynamic_configs(entity, configs)
        if validate_only:
            return
        self.dynamic_configs.put(entity, configs)
        self._put_in_effect(new)

    def check_dynamic_configs(self, entity: str, configs: dict[str, str]) -> BrokerConfig:
        """The config that `configs` for `entity` would put in effect; DynamicConfigError if Kafka refuses it."""
        own = entity != DEFAULT_ENTITY
        return reconfigured(self.config, self.config.dynamic_default if own else configs,
                            configs if own else self.config.dynamic_broker, self._check_log_configs)

    def apply_dynamic_configs(self, cluster_default: dict[str, str], this_broker: dict[str, str],
                              at_start: bool = False) -> None:
        """Put in effect the dynamic configs a cluster keeps in ZooKeeper, read `at_start` (taken as a single node
        takes its file: each config that cannot apply alone is logged and ignored) or on a change notification for
        this broker or the default (then refused as a whole, DynamicConfigError, if Kafka's reconfiguration
        checks refuse it)."""
        cluster_default = usable(cluster_default, False, "default cluster")
        this_broker = usable(this_broker, True, "broker")
        if (cluster_default, this_broker) == (dict(self.config.dynamic_default), dict(self.config.dynamic_broker)):
            return
        if at_start:
            self._put_in_effect(_layered_or_static(self.config, cluster_default, this_broker))
        else:
            self._put_in_effect(reconfigured(self.config, cluster_default, this_broker, self._check_log_configs))

    def _put_in_effect(self, new: BrokerConfig) -> None:
        old, self.config = self.config, new
        if self.default_log_config(old) != self.default_log_config(new):
            self.logs.default_config = self.default_log_config()
            for topic in self.topics.values():
                self.logs.update_topic_config(topic.name, self.log_config_for(topic))
        for observer in self.config_observers:
            observer(old, new)

    def _check_log_configs(self, config: BrokerConfig) -> None:
        """Every topic's log settings under broker config `config` (raises ValueError as LogConfig does)."""
        from kbroker.topic_configs import apply_topic_configs

        defaults = self.default_log_config(config)
        for topic in self.topics.values():
            apply_topic_configs(defaults, topic.configs)

    def default_log_config(self, config: BrokerConfig | None = None) -> LogConfig:
        c = config or self.config
        return LogConfig(
            segment_bytes=int(c["log.segment.bytes"]),
            segment_ms=c.roll_ms,
            index_interval_bytes=int(c["log.index.interval.bytes"]),
            max_index_size=int(c["log.index.size.max.bytes"]),
            retention_ms=c.retention_ms,
            retention_bytes=int(c["log.retention.bytes"]),
            flush_interval_messages=int(c["log.flush.interval.messages"]),
            flush_interval_ms=c["log.flush.interval.ms"],
            message_timestamp_type=str(c["log.message.timestamp.type"]),
            max_message_bytes=int(c["message.max.bytes"]),
            cleanup_policy=str(c["log.cleanup.policy"]),
            producer_id_expiration_ms=int(c["producer.id.expiration.ms"]),
            file_delete_delay_ms=int(c["log.segment.delete.delay.ms"]),
            delete_retention_ms=int(c["log.cleaner.delete.retention.ms"]),
            min_cleanable_dirty_ratio=float(c["log.cleaner.min.cleanable.ratio"]),
            min_compaction_lag_ms=int(c["log.cleaner.min.compaction.lag.ms"]),
            max_compaction_lag_ms=int(c["log.cleaner.max.compaction.lag.ms"]),
            message_timestamp_before_max_ms=int(c["log.message.timestamp.before.max.ms"]),
            message_timestamp_after_max_ms=int(c["log.message.timestamp.after.max.ms"]),
            message_timestamp_difference_max_ms=int(c["log.message.timestamp.difference.max.ms"]),
        )

    def log_config_for(self, topic: Topic) -> LogConfig:
        from kbroker.topic_configs import apply_topic_configs

        return apply_topic_configs(self.default_log_config(), topic.configs)

    # --- topics --------------------------------------------------------------------------

    def _topics_path(self) -> Path:
        return self.log_dirs[0] / TOPICS_FILE

    def _read_topics_file(self) -> list[Topic]:
        path = self._topics_path()
        self._saved_cluster_id = None
        if not path.exists():
            return []
        state = json.loads(path.read_text(encoding="utf-8"))
        self._saved_cluster_id = state.get("cluster_id")
        return [Topic(e["name"], uuid.UUID(e["id"]), e["partitions"], e["configs"]) for e in state["topics"]]

    def _log_dir_failed(self, log_dir: Path, all_failed: bool) -> None:
        must_stop = all_failed
        if not all_failed and log_dir == self._topics_path().parent:
            logger.critical("Shutdown broker because the metadata log dir %s has failed", log_dir)
            must_stop = True
        if self.on_log_dir_failure is not None:
            self.on_log_dir_failure(log_dir, must_stop)

    def _save_topics(self) -> None:
        path = self._topics_path()
        if path.parent not in self.logs.live_log_dirs:
            raise LogDirOfflineError(f"cannot write {path}: log dir {path.parent} has failed")
        try:
            self._write_topics_file(path)
        except OSError as error:
            self.logs.fail_dir(path.parent, error, f"writing {TOPICS_FILE}")
            raise LogDirOfflineError(f"cannot write {path}: {error}") from error

    def _write_topics_file(self, path: Path) -> None:
        state = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "topics": [{"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                       for t in self.topics.values()],
        }
        temporary = path.with_suffix(".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        fsync_dir(path.parent)  # make the rename itself durable, as the checkpoints do

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic
        config = self.log_config_for(topic)
        for partition in range(topic.partitions):
            plog = self.logs.get(topic.name, partition)
            if plog is not None and not self._is_log_of(plog, topic):
                self.logs.delete(topic.name, partition)
                plog = None
            if self.config.cluster_mode:
                # Kafka's ReplicaManager hosts nothing before the controller's LeaderAndIsr: leading here now
                # would move the high watermark to the log end and restart the leader epochs at 0
                continue
            if plog is None:
                try:
                    plog = self.logs.create(topic.name, partition, config)
                except LogDirOfflineError:
                    continue  # offline, as in Kafka when the log cannot be created in its dir
                if not self._is_log_of(plog, topic):
                    continue  # its dir failed writing partition.metadata: offline
            # this node becomes the leader: as Kafka's makeLeader, its epoch starts at the log end
            self.replicas.host_sole_replica(topic.name, partition, plog)

    def _is_log_of(self, plog: PartitionLog, topic: Topic) -> bool:
        """Kafka's partition.metadata check: the topic id recorded in the partition's directory
        (written here when missing) must be the topic's. Another id means a stray log of a
        deleted topic of the same name (deleted while its log dir was offline), which Kafka
        deletes. A write that fails takes the dir offline (False too)."""
        expected = uuid_text(topic.topic_id)
        try:
            recorded = read_partition_metadata(plog.dir)
        except CheckpointError as error:
            logger.warning("rewriting %s: %s", plog.dir, error)  # unreadable: written anew, as when missing
            recorded = None
        if recorded == expected:
            return True
        if recorded is not None:
            logger.warning("Deleting stray log %s: its partition.metadata names topic id %s, the topic is %s",
                           plog.dir, recorded, expected)
            return False
        try:
            write_partition_metadata(plog.dir, expected)
        except OSError as error:
            self.logs.io_error(plog, error, f"writing partition.metadata of {plog.dir.name}")
            return False
        return True

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> Topic:
        from kbroker.topic_configs import validate_topic_configs

        problem = topic_name_problem(name)
        if problem:
            raise TopicError(17, problem)  # INVALID_TOPIC_EXCEPTION
        if name in self.topics:
            raise TopicError(36, f"Topic '{name}' already exists.")  # TOPIC_ALREADY_EXISTS
        if partitions < 1:
            raise TopicError(37, "Number of partitions must be larger than 0.")  # INVALID_PARTITIONS
        validate_topic_configs(configs or {})
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs or {}))
        self._register(topic)
        self._save_topics()
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name)
        self.topics_by_id.pop(topic.topic_id, None)
        for partition in range(topic.partitions):
            self.replicas.remove(topic.name, partition)
            self.logs.delete(topic.name, partition)
            self.fetch_waiters.wake(topic.name, partition)  # their fetches answer UNKNOWN_TOPIC_OR_PARTITION now
        self._save_topics()

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics[name]
        if total <= topic.partitions:
            raise TopicError(37, f"Topic currently has {topic.partitions} partitions, which is higher than "
                                 f"the requested {total}.")
        topic.partitions = total
        self._register(topic)
        self._save_topics()

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        from kbroker.topic_configs import validate_topic_configs

        validate_topic_configs(configs)
        topic = self.topics[name]
        topic.configs = dict(configs)
        self.logs.update_topic_config(name, self.log_config_for(topic))
        self._save_topics()

    def _topic_configs(self, topic_name: str) -> Mapping[str, str] | None:
        topic = self.topics.get(topic_name)
        return None if topic is None else topic.configs

    def _min_insync_replicas(self, topic_name: str) -> int:
        """The topic's min.insync.replicas, else the broker's (both may change while running)."""
        topic = self.topics.get(topic_name)
        configured = topic.configs.get("min.insync.replicas") if topic is not None else None
        return int(configured if configured is not None else self.config["min.insync.replicas"])

    def known_topics(self) -> tuple[Mapping[str, Topic], Mapping[uuid.UUID, Topic]]:
        """The topics clients may name, by name and by id: this node's, or in a cluster every topic the
        metadata cache knows (a member hosts only some); what group offsets are checked against."""
        member = getattr(self, "cluster", None)
        if member is None:
            return self.topics, self.topics_by_id
        return member.metadata.known_topics()  # type: ignore[return-value]

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        known = self.topics.get(topic)
        if known is None or not 0 <= partition < known.partitions:
            return None
        return self.logs.get(topic, partition)

    def partition_error(self, topic: str, partition: int) -> ErrorCode:
        """Why `partition_log` found no log: KAFKA_STORAGE_ERROR when the partition exists but its
        log dir has failed (Kafka's HostedPartition.Offline), else UNKNOWN_TOPIC_OR_PARTITION."""
        known = self.topics.get(topic)
        if known is not None and 0 <= partition < known.partitions and self.logs.is_offline(topic, partition):
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def auto_create(self, name: str) -> Topic | None:
        """Metadata/produce auto-creation (`auto.create.topics.enable`)."""
        if not self.config["auto.create.topics.enable"] or topic_name_problem(name):
            return None
        return self.create_topic(name, int(self.config["num.partitions"]))  # type: ignore[arg-type]

    @property
    def coordinator(self):
        """The group coordinator, built (replaying __consumer_offsets) the first time a group API needs it."""
        if self._coordinator is None:
            from kbroker.coordinator import Coordinator

            self._coordinator = Coordinator(self)
        return self._coordinator

    @property
    def transactions(self):
        """The transaction coordinator, built (replaying __transaction_state) the first time it is needed."""
        if self._transactions is None:
            from kbroker.coordinator.transactions import TransactionCoordinator

            self._transactions = TransactionCoordinator(self)
        return self._transactions

    def flush_deferred_appends(self) -> bool:
        """Write what the coordinator staged (see OffsetStore.deferring); False if that failed."""
        return self._coordinator is None or self._coordinator.offsets.flush_pending()

    def notify_appended(self, topic: str, partition: int) -> None:
        """Wake the fetches an append lets read more. A partition with followers moves its HW only when they
        fetch (the replica manager then wakes the consumers); one without, with the append itself."""
        led = self.replicas.get(topic, partition)
        if led is not None and led.followers:
            self.fetch_waiters.wake_followers(topic, partition)
        else:
            self.fetch_waiters.wake(topic, partition)

    def allocate_producer_id(self) -> int:
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return producer_id

    # --- lifecycle -----------------------------------------------------------------------

    def apply_retention(self) -> None:
        self.logs.apply_retention(now_ms())

    def checkpoint(self) -> None:
        """Kafka's periodic work: flush logs whose flush.ms is due, write offset checkpoints."""
        self.logs.flush_dirty(now_ms())
        self.logs.checkpoint()

    def close(self) -> None:
        """Flush, checkpoint and mark the clean shutdown, so the next start skips recovery."""
        self.log_dir_mover.stop()
        if self._coordinator is not None:
            self._coordinator.close()
        if self._transactions is not None:
            self._transactions.close()
        self.logs.close()

    def halt(self) -> None:
        """Stop without writing anything more (Kafka's Exit.halt after its log dirs failed): the
        next start recovers every dir."""
        self.log_dir_mover.stop()
        if self._coordinator is not None:
            self._coordinator.close()
        if self._transactions is not None:
            self._transactions.close()
        self.logs.halt()


