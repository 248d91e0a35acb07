"""A broker's membership of a ZooKeeper-mode cluster (zookeeper.connect set), as Kafka 3.9's KafkaServer.

Start-up, in Kafka's order:
1. `connect`: the ZooKeeper session (the chroot created when missing), the top-level znodes, the cluster id
   (/cluster/id, written when this is the cluster's first broker), and the broker id: broker.id, else the one in
   meta.properties, else reserved.broker.max.id + a new /brokers/seqid version. Returns the config with both set,
   so the log dirs' meta.properties is checked against (or written with) the cluster's values.
2. `attach(broker)`: the broker's partitions stop being led as a single node's: they wait for the controller's
   LeaderAndIsr; the controller-to-broker APIs are served; fetchers, the AlterPartition channel and the ISR
   shrink check start.
3. `register(endpoints)`, once listening: the ephemeral /brokers/ids/<id> (its czxid is the broker epoch), written
   again under a new session after ZooKeeper expired the old one.
4. `start_controller`: as in Kafka, every broker runs a controller (kbroker/cluster/controller.py) that races
   for /controller and stands by while another broker holds it; it renews the registration after a session
   expiry itself, before racing again.

A graceful stop asks the controller for a controlled shutdown first, then stops fetching and closes the session
(which removes the registration).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable

from kbroker.cluster.alter_partition import AlterPartitionManager, ControllerChannel, controlled_shutdown
from kbroker.cluster.fetcher import FetcherSettings, ReplicaFetcherManager
from kbroker.cluster.metadata_cache import MetadataCache, MetadataUpdate
from kbroker.cluster.model import BrokerRegistration, EndPoint
from kbroker.cluster.partition import Partition, Role
from kbroker.cluster.producer_ids import ProducerIdManager
from kbroker.cluster.transaction_channel import TransactionChannel
from kbroker.cluster.zk import ZkClient
from kbroker.config import BrokerConfig, build
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC
from kbroker.dynamic_config import DEFAULT_ENTITY
from kbroker.log.checkpoints import read_meta_properties
from kbroker.log.errors import LogDirOfflineError
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkConfigManager changeExpirationMs
ZERO_UUID = uuid.UUID(int=0)


def new_cluster_id() -> str:
    """A cluster id as Kafka makes one: a random UUID in url-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def endpoints_of(config: BrokerConfig, bound_ports: dict[str, int]) -> tuple[EndPoint, ...]:
    """The advertised listeners as registration endpoints; port 0 becomes the port the listener got."""
    found = []
    for listener in config.advertised_listeners:
        port = listener.port or bound_ports.get(listener.name, 0)
        protocol = listener.name if listener.name in SECURITY_PROTOCOLS else "PLAINTEXT"
        found.append(EndPoint(listener.name, listener.host or "127.0.0.1", port, protocol))
    return tuple(found)


class ClusterMember:
    """This broker in its cluster; see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.zk = ZkClient.from_config(config)
        self.cluster_id: str | None = None
        self.broker_id = config.broker_id
        self.broker_epoch = -1
        self.inter_broker_listener = config.inter_broker_listener
        self.metadata = MetadataCache()
        self.broker = None  # kbroker.broker.Broker, once attached
        self.registration: BrokerRegistration | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.alter_partitions: AlterPartitionManager | None = None
        self.producer_ids: ProducerIdManager | None = None
        self.channel: ControllerChannel | None = None
        self.transaction_channel: TransactionChannel | None = None
        self.controller = None  # kbroker.cluster.controller's, when it exists
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._config_lock = asyncio.Lock()
        self._last_config_change = ""  # the newest /config/changes notification applied
        self._config_change_times: dict[str, int] = {}  # notification -> its creation time (ms), until purged

    # --- 1. ZooKeeper, cluster id, broker id -------------------------------------------

    async def connect(self) -> BrokerConfig:
        await asyncio.to_thread(self.zk.start)
        await asyncio.to_thread(self.zk.create_top_level_paths)
        self.cluster_id = await asyncio.to_thread(self.zk.create_or_get_cluster_id,
                                                  str(self.config["cluster.id"] or new_cluster_id()))
        if self.broker_id < 0:
            self.broker_id = self._stored_broker_id()
        if self.broker_id < 0:
            sequence = await asyncio.to_thread(self.zk.generate_broker_sequence_id)
            self.broker_id = int(self.config["reserved.broker.max.id"]) + sequence  # type: ignore[call-overload]
        settled = {"cluster.id": self.cluster_id}
        if self.broker_id != self.config.broker_id:
            # a generated id lies above reserved.broker.max.id, where broker.id may not be set: as node.id it
            # holds through the rebuilds dynamic configs make
            settled["node.id"] = str(self.broker_id)
        self.config = build({**self.config.raw, **settled}, warn_unknown=False)
        return self.config

    def _stored_broker_id(self) -> int:
        for log_dir in self.config.log_dirs:
            with contextlib.suppress(Exception):
                found = read_meta_properties(log_dir / "meta.properties")
                if found is not None and found.node_id >= 0:
                    return found.node_id
        return -1

    # --- 2. the broker's cluster parts -------------------------------------------------

    def attach(self, broker) -> None:
        from kbroker.apis import controller_to_broker

        self._loop = asyncio.get_running_loop()
        self.broker = broker
        broker.cluster = self
        controller_to_broker.register()
        local_error = broker.partition_error
        broker.replicas.unhosted_error = lambda topic, index: self._unhosted_error(local_error, topic, index)
        self.fetchers = ReplicaFetcherManager(FetcherSettings.from_config(self.config, self.broker_id),
                                              lambda: self.broker_epoch, self._appended_as_follower,
                                              broker.replication_quotas)
        self.channel = ControllerChannel(self.controller_endpoint, f"broker-{self.broker_id}-controller")
        self.alter_partitions = AlterPartitionManager(self.broker_id, lambda: self.broker_epoch, self.channel,
                                                      broker.replicas, self._topic_id)
        self.alter_partitions.start()
        self.producer_ids = ProducerIdManager(self.broker_id, lambda: self.broker_epoch, self.channel)
        self.transaction_channel = TransactionChannel(self, int(self.config["request.timeout.ms"]) / 1000)  # type: ignore[call-overload]

    def _unhosted_error(self, local_error, topic: str, index: int) -> ErrorCode:
        error = local_error(topic, index)
        if error == ErrorCode.KAFKA_STORAGE_ERROR:
            return error
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if self.metadata.partition(topic, index) is not None else error

    def controller_endpoint(self) -> EndPoint | None:
        controller = self.metadata.controller_id
        return None if controller is None else self.metadata.endpoint(controller, self.inter_broker_listener)

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        known = self.broker.topics.get(topic)
        return known.topic_id if known is not None else self.metadata.topic_id(topic)

    def _appended_as_follower(self, partition: Partition) -> None:
        self.broker.fetch_waiters.wake(partition.topic, partition.index)

    # --- 3. registration ---------------------------------------------------------------

    async def register(self, endpoints: Iterable[EndPoint], *, renew_on_new_session: bool = True) -> None:
        """Write the registration; with `renew_on_new_session` also after every session expiry (a running controller
        does that itself, before it races for /controller again, so it passes False)."""
        self.registration = BrokerRegistration(self.broker_id, tuple(endpoints), self.config["broker.rack"])  # type: ignore[arg-type]
        self.broker_epoch = await asyncio.to_thread(self.zk.register_broker, self.registration)
        if renew_on_new_session:
            self.zk.on_new_session(self._register_again)
        log.info("registered broker %d at %s with epoch %d", self.broker_id,
                 ",".join(f"{e.listener}://{e.host}:{e.port}" for e in self.registration.endpoints), self.broker_epoch)

    def _register_again(self) -> None:
        """On a new session (a thread of the ZooKeeper client): the old registration died with the old one."""
        if self.registration is not None:
            try:
                self.broker_epoch = self.zk.register_broker(self.registration)
                log.info("registered broker %d again with epoch %d", self.broker_id, self.broker_epoch)
            except Exception:
                log.exception("registering broker %d again failed", self.broker_id)

    # --- 4. the controller -------------------------------------------------------------

    async def start_controller(self) -> None:
        """Start this broker's controller (kbroker/cluster/controller.py): it races for /controller and stands by
        while another broker (kbroker or Kafka) holds it; the controller APIs reach it as `broker.controller`."""
        from kbroker.cluster.controller import KafkaController, controller_config

        self.controller = KafkaController(self.zk, controller_config(self.config, self.broker_id,
                                                                    self.inter_broker_listener),
                                          reregister=self._register_again)
        self.broker.controller = self.controller
        await self.controller.start()

    # --- topic and broker configs: /config/changes ------------------------------------------------

    async def start_config_listener(self) -> None:
        """Kafka's ZkConfigManager for topics and brokers: the topics hosted here take their ZooKeeper overrides
        (changed while this broker was down, perhaps), then every /config/changes notification naming a topic makes
        its overrides be read again and applied; the same for this broker's dynamic configs (/config/brokers/<id>
        and /config/brokers/<default>, first read by `load_broker_configs`). Notifications older than 15 minutes
        are deleted, as Kafka's brokers do."""
        for name in list(self.broker.topics):
            await self._reload_topic_configs(name)
        loop = asyncio.get_running_loop()
        self.zk.watch_config_changes(
            lambda children: loop.call_soon_threadsafe(lambda: self._spawn(self._config_changed(children))))

    async def _config_changed(self, children: list[str]) -> None:
        async with self._config_lock:
            for child in children:
                if child <= self._last_config_change:
                    continue
                found = await asyncio.to_thread(self.zk.config_change, child)
                if found is not None:
                    entity_path, created_ms = found
                    self._config_change_times[child] = created_ms
                    kind, _, name = entity_path.partition("/")
                    if kind == "topics" and name in self.broker.topics:
                        await self._reload_topic_configs(name)
                    elif kind == "brokers" and name in (str(self.broker_id), DEFAULT_ENTITY):
                        await self.load_broker_configs()
                self._last_config_change = child
            expired_before = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_MS
            expired = [c for c, created in self._config_change_times.items() if created < expired_before]
            for child in expired:
                del self._config_change_times[child]
                with contextlib.suppress(Exception):  # another broker may have deleted it first
                    await asyncio.to_thread(self.zk.delete_config_changes, [child])

    async def load_broker_configs(self, at_start: bool = False) -> None:
        """This broker's dynamic configs as ZooKeeper has them: `at_start` (Kafka reads them before it serves
        anything; a ZooKeeper failure then stops the start), or after a change notification (a failure is logged)."""
        try:
            cluster_default = await asyncio.to_thread(self.zk.entity_config, "brokers", DEFAULT_ENTITY)
            this_broker = await asyncio.to_thread(self.zk.entity_config, "brokers", str(self.broker_id))
            self.broker.apply_dynamic_configs(cluster_default, this_broker, at_start)
        except Exception:
            if at_start:
                raise
            log.exception("cannot apply the dynamic configs of broker %d", self.broker_id)

    async def _reload_topic_configs(self, name: str) -> None:
        try:
            configs = await asyncio.to_thread(self.zk.entity_config, "topics", name)
            topic = self.broker.topics.get(name)
            if topic is not None and configs != topic.configs:
                self.broker.set_topic_configs(name, configs)
                log.info("topic %s now has the configs %s", name, configs)
        except Exception:
            log.exception("cannot apply the configs of topic %s", name)

    # --- requests from the controller (kbroker/apis/controller_to_broker.py) -------------

    def check_topic_id(self, topic: str, topic_id: uuid.UUID) -> bool:
        known = self.broker.topics.get(topic)
        return known is None or topic_id == ZERO_UUID or known.topic_id == topic_id

    async def log_opener(self, topic_ids: dict[str, uuid.UUID]):
        """`log_for` for the replica manager: the partition's log, created (with its topic) when missing. The
        configs of topics new to this broker are read from ZooKeeper first, off the event loop."""
        new_topics = [name for name in topic_ids if name not in self.broker.topics]
        configs = {name: await asyncio.to_thread(self.zk.entity_config, "topics", name) for name in new_topics}

        def log_for(topic: str, index: int):
            return self._open_log(topic, index, topic_ids.get(topic, ZERO_UUID), configs.get(topic, {}))
        return log_for

    def _open_log(self, name: str, index: int, topic_id: uuid.UUID, configs: dict[str, str]):
        from kbroker.broker import Topic

        broker = self.broker
        topic = broker.topics.get(name)
        changed = topic is None or topic.partitions < index + 1
        if topic is None:
            topic = Topic(name, topic_id if topic_id != ZERO_UUID else uuid.uuid4(), index + 1, configs)
            broker.topics[name] = topic
            broker.topics_by_id[topic.topic_id] = topic
        topic.partitions = max(topic.partitions, index + 1)
        plog = broker.logs.get(name, index)
        if plog is None:
            plog = broker.logs.create(name, index, broker.log_config_for(topic))
        if not broker._is_log_of(plog, topic):
            raise LogDirOfflineError(f"the log of {name}-{index} belongs to another topic id")
        if changed:
            broker._save_topics()  # written (and fsynced) only when this broker learns a topic or partition
        return plog

    def leadership_changed(self, leaders: list[Partition], followers: list[Partition],
                           live_leaders: dict[int, EndPoint]) -> None:
        """After a LeaderAndIsr: leaders stop fetching, followers fetch from their (new) leader."""
        self.fetchers.remove_partitions([(p.topic, p.index) for p in leaders])
        self._follow(followers, live_leaders)
        self._spawn(self.fetchers.shutdown_idle_fetchers())

    async def move_coordination(self, leaders: Iterable[Partition], others: Iterable[Partition]) -> None:
        """Kafka's onLeadershipChange for the group and transaction coordinators: the groups (transactional ids) of
        the `__consumer_offsets` (`__transaction_state`) partitions led here now are loaded, those of partitions
        followed or stopped here are let go."""
        leaders = list(leaders)
        self.stop_coordinating((p.topic, p.index) for p in others)
        for topic, coordinator, count_config in (
                (OFFSETS_TOPIC, self.broker.coordinator, "offsets.topic.num.partitions"),
                (TRANSACTION_TOPIC, self.broker.transactions, "transaction.state.log.num.partitions")):
            led = [p.index for p in leaders if p.topic == topic]
            if led:
                count = await self._partition_count(topic, count_config)
                self._load(topic, coordinator, led, count)

    async def _partition_count(self, topic: str, count_config: str) -> int:
        count = len(self.metadata.partitions(topic))
        if not count:  # LeaderAndIsr may come before the UpdateMetadata that names the topic
            assignment = await asyncio.to_thread(self.zk.topic_assignment, topic)
            count = len(assignment.partitions) if assignment is not None else \
                int(self.config[count_config])  # type: ignore[call-overload]
        return count

    def _load(self, topic: str, coordinator, led: list[int], count: int) -> None:
        for index in led:
            partition = self.broker.replicas.get(topic, index)
            if partition is not None and partition.is_leader:  # still, after the wait for ZooKeeper
                try:
                    coordinator.load_partition(index, count)
                except Exception:  # its keys stay unserved (NOT_COORDINATOR); the other partitions load
                    log.exception("cannot load the coordinator state of %s-%d", topic, index)

    def stop_coordinating(self, keys: Iterable[tuple[str, int]]) -> None:
        """The groups (transactional ids) of these partitions of `__consumer_offsets` (`__transaction_state`) are
        no longer coordinated here."""
        for topic, index in keys:
            if topic == OFFSETS_TOPIC:
                self.broker.coordinator.unload_partition(index)
            elif topic == TRANSACTION_TOPIC:
                self.broker.transactions.unload_partition(index)

    def _follow(self, followers: Iterable[Partition], live_leaders: dict[int, EndPoint]) -> None:
        adding = []
        for partition in followers:
            source = live_leaders.get(partition.leader_id) or \
                self.metadata.endpoint(partition.leader_id, self.inter_broker_listener)
            if source is None:  # no live leader known: nothing to fetch from until one is
                self.fetchers.remove_partitions([(partition.topic, partition.index)])
                continue
            adding.append((partition, self._topic_id(partition.topic) or ZERO_UUID, source))
        self.fetchers.add_partitions(adding)

    def metadata_updated(self, update: MetadataUpdate) -> None:
        self.metadata.update(update)
        stranded = [p for p in self.broker.replicas.partitions()
                    if p.role is Role.FOLLOWER and self.fetchers.following(p.topic, p.index) is None]
        if stranded:
            self._follow(stranded, {})

    def delete_logs(self, keys: Iterable[tuple[str, int]]) -> None:
        """StopReplica with delete: the logs go, and a topic left without any log here is forgotten, so a topic
        created again under its name (with a new id) is hosted here as Kafka's brokers host it."""
        broker = self.broker
        touched = set()
        for topic, index in keys:
            with contextlib.suppress(Exception):
                broker.logs.delete(topic, index)
            broker.fetch_waiters.wake(topic, index)
            touched.add(topic)
        hosted = {topic for topic, _ in broker.logs}
        forgotten = [broker.topics.pop(name) for name in touched - hosted if name in broker.topics]
        for topic in forgotten:
            broker.topics_by_id.pop(topic.topic_id, None)
        if forgotten:
            broker._save_topics()

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- stopping ----------------------------------------------------------------------

    async def controlled_shutdown(self) -> None:
        if self.channel is None or self.broker_epoch < 0 or not self.config["controlled.shutdown.enable"]:
            return
        await controlled_shutdown(self.channel, self.broker_id, self.broker_epoch,
                                  int(self.config["controlled.shutdown.max.retries"]),  # type: ignore[call-overload]
                                  int(self.config["controlled.shutdown.retry.backoff.ms"]))  # type: ignore[call-overload]

    async def stop(self) -> None:
        if self.controller is not None:
            controller, self.controller = self.controller, None
            await controller.stop()
        if self.producer_ids is not None:
            await self.producer_ids.stop()
        if self.alter_partitions is not None:
            await self.alter_partitions.stop()
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.transaction_channel is not None:
            self.transaction_channel.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.to_thread(self.zk.close)
