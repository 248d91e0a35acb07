"""ZooKeeper in Kafka 3.9's own znodes and JSON: the only module that talks to ZooKeeper.

A Kafka 3.9 broker in ZooKeeper mode and a kbroker must be able to share one ZooKeeper, so every path, every
JSON field, which znodes are ephemeral and which writes are conditional follow Kafka's KafkaZkClient
(tests/cluster/test_zk_snapshot.py compares the trees both write). Callers get typed records
(kbroker/cluster/model.py), never JSON.

The client is synchronous (kazoo runs its own threads); async callers wrap calls in `asyncio.to_thread`.
Watch callbacks run on kazoo's event thread: hop to your own loop before touching state, and never block there.

Two kinds of failure are answers, not exceptions, because the controller acts on them routinely:
- a conditional write on a znode version that moved on is `WriteStatus.VERSION_CONFLICT`;
- a controller write whose /controller_epoch version check fails raises `ControllerMovedError` (another broker
  became controller: the caller must resign, as Kafka's ControllerMovedException makes it).
"""

from __future__ import annotations

import base64
import contextlib
import enum
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    ZookeeperError,
)
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData, Transaction
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

# ControllerMovedError (a controller write fenced because /controller_epoch moved on) is the store interface's
# own class, so the state machines and the controller catch exactly what this module raises
from kbroker.cluster.controller_store import ControllerMovedError
from kbroker.cluster.model import (
    RECOVERED,
    BrokerRegistration,
    ControllerEpoch,
    EndPoint,
    FinalizedFeatures,
    LeaderAndIsr,
    PartitionState,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
)

log = logging.getLogger(__name__)

# Kafka's znode paths (ZkData.scala)
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CLUSTER_ID = "/cluster/id"
FEATURE = "/feature"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"  # the old consumers' path, still created by Kafka 3.9

CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")  # Kafka's ConfigType.ALL
DEFAULT_ENTITY = "<default>"  # the cluster-wide default of an entity type (ZooKeeperInternals.DEFAULT_STRING)

# What a Kafka broker makes sure exists at start (ZkData.PersistentZkPaths). Kafka 3.9 still creates
# /isr_change_notification but writes no notifications there: from IBP 2.7-IV2 ISR changes go to the
# controller with AlterPartition, so this module does not write them either.
PERSISTENT_PATHS = (CONSUMERS, BROKER_IDS, TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
                    ISR_CHANGE_NOTIFICATION, PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
                    *(f"{CONFIG}/{kind}" for kind in CONFIG_ENTITY_TYPES))

INITIAL_CONTROLLER_EPOCH = 0
PRODUCER_ID_BLOCK_SIZE = 1000  # ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MATCH_ANY_VERSION = -1
_LONG_MAX = 2**63 - 1
T = TypeVar("T")


class TopicExistsError(RuntimeError):
    """The topic already exists, or is still marked for deletion."""


class WriteStatus(enum.Enum):
    OK = "ok"
    VERSION_CONFLICT = "version conflict"
    NO_NODE = "no node"
    NODE_EXISTS = "node exists"


@dataclass(frozen=True)
class WriteResult:
    """The outcome of one conditional write; `version` is the znode's new version when it succeeded."""

    status: WriteStatus
    version: int = -1

    @property
    def ok(self) -> bool:
        return self.status is WriteStatus.OK


_STATUS_OF = {BadVersionError: WriteStatus.VERSION_CONFLICT, NoNodeError: WriteStatus.NO_NODE,
              NodeExistsError: WriteStatus.NODE_EXISTS}


# ---------------------------------------------------------------------------------------------- paths

def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(entity_type: str, name: str) -> str:
    return f"{CONFIG}/{entity_type}/{name}"


def sanitize_entity_name(name: str) -> str:
    """Kafka's Sanitizer.sanitize: how a user principal or client id becomes a znode name (URL encoding, with
    `*` and space percent-encoded). Topic names and broker ids pass unchanged."""
    return urllib.parse.quote(name, safe=".-_*", encoding="utf-8").replace("*", "%2A").replace("~", "%7E")


def split_connect(connect: str) -> tuple[str, str]:
    """`zookeeper.connect` as Kafka reads it: hosts, and the chroot after the first '/' ("" for none)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


# ---------------------------------------------------------------------------------------------- JSON

def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _parse(data: bytes | None) -> dict | None:
    return json.loads(data) if data else None


def _uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid text form: unpadded url-safe base64 of the 16 bytes."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def _uuid_parse(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def _millis_text() -> str:
    return str(int(time.time() * 1000))  # Kafka writes its timestamps as JSON strings


def encode_broker(registration: BrokerRegistration, jmx_port: int = -1) -> bytes:
    """/brokers/ids/<id>, version 5: the first PLAINTEXT endpoint doubles as the old top-level host and port."""
    plaintext = next((e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None)
    body: dict[str, object] = {
        "version": 5,
        "host": plaintext.host if plaintext else None,
        "port": plaintext.port if plaintext else -1,
        "endpoints": [f"{e.listener}://{_host_text(e.host)}:{e.port}" for e in registration.endpoints],
        "jmx_port": jmx_port,
        "timestamp": _millis_text(),
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in registration.endpoints},
        "features": {name: {"min_version": low, "max_version": high}
                     for name, (low, high) in registration.features.items()},
    }
    if registration.rack is not None:
        body["rack"] = registration.rack
    return _json(body)


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 literal, as Kafka's EndPoint.connectionString


def decode_broker(broker_id: int, data: bytes, broker_epoch: int = -1) -> BrokerRegistration:
    body = json.loads(data)
    protocols: dict[str, str] = body.get("listener_security_protocol_map") or {}
    if body.get("version", 1) == 1:
        endpoints = [EndPoint("PLAINTEXT", body["host"], int(body["port"]), "PLAINTEXT")]
    else:
        endpoints = [_parse_endpoint(text, protocols) for text in body["endpoints"]]
    features = {name: (int(r["min_version"]), int(r["max_version"]))
                for name, r in (body.get("features") or {}).items()}
    return BrokerRegistration(broker_id, tuple(endpoints), body.get("rack"), features, broker_epoch)


def _parse_endpoint(text: str, protocols: Mapping[str, str]) -> EndPoint:
    listener, _, address = text.partition("://")
    host, _, port = address.rpartition(":")
    listener = listener.upper()
    return EndPoint(listener, host.strip("[]"), int(port), protocols.get(listener, listener))


def encode_controller(broker_id: int) -> bytes:
    """/controller as Kafka 3.9 writes it: version 2, with no KRaft controller epoch (-1)."""
    return _json({"version": 2, "brokerid": broker_id, "timestamp": _millis_text(), "kraftControllerEpoch": -1})


def encode_topic(assignment: TopicAssignment) -> bytes:
    """/brokers/topics/<t>, version 3: replicas per partition, and those a reassignment adds or removes."""
    parts = sorted(assignment.partitions.items())
    return _json({
        "version": 3,
        "partitions": {str(p): list(a.replicas) for p, a in parts},
        "topic_id": _uuid_text(assignment.topic_id),
        "adding_replicas": {str(p): list(a.adding) for p, a in parts if a.adding},
        "removing_replicas": {str(p): list(a.removing) for p, a in parts if a.removing},
    })


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    body = json.loads(data)
    adding, removing = body.get("adding_replicas") or {}, body.get("removing_replicas") or {}
    partitions = {int(p): ReplicaAssignment(tuple(replicas), tuple(adding.get(p, ())), tuple(removing.get(p, ())))
                  for p, replicas in body.get("partitions", {}).items()}
    topic_id = _uuid_parse(body["topic_id"]) if body.get("topic_id") else uuid.UUID(int=0)
    return TopicAssignment(topic, topic_id, partitions)


def encode_partition_state(state: PartitionState) -> bytes:
    """.../partitions/<p>/state, version 1; leader_recovery_state only when not RECOVERED, as Kafka writes it."""
    lai = state.leader_and_isr
    body: dict[str, object] = {"version": 1, "leader": lai.leader, "leader_epoch": lai.leader_epoch,
                               "controller_epoch": state.controller_epoch, "isr": list(lai.isr)}
    if lai.leader_recovery_state != RECOVERED:
        body["leader_recovery_state"] = lai.leader_recovery_state
    return _json(body)


def decode_partition_state(data: bytes, zk_version: int) -> PartitionState:
    body = json.loads(data)
    lai = LeaderAndIsr(int(body["leader"]), int(body["leader_epoch"]), tuple(body["isr"]),
                       int(body.get("leader_recovery_state", RECOVERED)), zk_version)
    return PartitionState(lai, int(body["controller_epoch"]))


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _json({"version": 1, "broker": block.broker_id, "block_start": str(block.first_producer_id),
                  "block_end": str(block.last_producer_id)})


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    body = json.loads(data)
    first, last = int(body["block_start"]), int(body["block_end"])
    return ProducerIdBlock(int(body["broker"]), first, last - first + 1)


def _reassignment_json(targets: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """/admin/reassign_partitions, version 1 (Kafka's ReassignPartitionsZNode.encode)."""
    return _json({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                               for (t, p), r in targets.items()]})


def _partition_list(partitions: Iterable[tuple[str, int]]) -> list[dict[str, object]]:
    return [{"topic": topic, "partition": partition} for topic, partition in partitions]


# ---------------------------------------------------------------------------------------------- client

class ZkClient:
    """A session with ZooKeeper, speaking Kafka's znodes; `connect` is `zookeeper.connect` (hosts[/chroot])."""

    def __init__(self, connect: str, session_timeout_ms: int = 18_000,
                 connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms  # Kafka's fallback
        self._kazoo = self._new_kazoo(connect)
        self._command_retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)
        self._session_lost = False
        self._on_new_session: list[Callable[[], None]] = []
        self._on_session_lost: list[Callable[[], None]] = []

    def _new_kazoo(self, hosts: str) -> KazooClient:
        # reconnect for ever, at least once a second: kazoo's default backoff grows to an hour, and a broker
        # that lost ZooKeeper must be back as soon as the ensemble is (as Kafka's ZooKeeperClient is)
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
        return KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000, connection_retry=retry)

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ZkClient:
        """From a BrokerConfig (or its values): zookeeper.connect and the two timeouts."""
        connect = config["zookeeper.connect"]
        if not connect:
            raise ValueError("zookeeper.connect is not set: this broker is a single node")
        return cls(str(connect), int(config["zookeeper.session.timeout.ms"]),  # type: ignore[call-overload]
                   config["zookeeper.connection.timeout.ms"])  # type: ignore[arg-type]

    # ---- session

    def start(self) -> ZkClient:
        """Connect, creating the chroot first if it is missing (as Kafka does)."""
        if self.chroot:
            self._create_chroot()
        self._kazoo.add_listener(self._state_changed)
        self._kazoo.start(timeout=self.connection_timeout_ms / 1000)
        return self

    def _create_chroot(self) -> None:
        bootstrap = self._new_kazoo(self.hosts)
        bootstrap.start(timeout=self.connection_timeout_ms / 1000)
        try:
            self._create_recursive(bootstrap, self.chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()

    def close(self) -> None:
        self._kazoo.stop()
        self._kazoo.close()

    def __enter__(self) -> ZkClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> int:
        return self._kazoo.client_id[0] if self._kazoo.client_id else 0

    @property
    def kazoo(self) -> KazooClient:
        """The raw client, for tests and tools that inspect znodes; cluster code uses the methods."""
        return self._kazoo

    def on_new_session(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on a fresh thread) once a new session replaces an expired one: ephemeral znodes
        (the broker registration, /controller) died with the old session and must be written again."""
        self._on_new_session.append(callback)

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback` when ZooKeeper expires the session (kazoo's LOST state): ephemeral znodes are gone and
        watches must be set again. It runs on kazoo's event thread, so it must only hand the news on."""
        self._on_session_lost.append(callback)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
            for callback in self._on_session_lost:
                callback()
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            for callback in self._on_new_session:
                threading.Thread(target=callback, name="zk-new-session", daemon=True).start()

    # ---- low-level helpers

    def _full(self, path: str) -> str:
        """A path with the chroot in front, for raw protocol operations (kazoo adds it for its own calls)."""
        return self.chroot + path if path != "/" or not self.chroot else self.chroot

    @staticmethod
    def _create_recursive(client: KazooClient, path: str, data: bytes | None = None) -> bool:
        """Kafka's createRecursive without throwing on an existing path: parents get null data, as Kafka's do.
        True if `path` itself was created."""
        try:
            client.create(path, data)
            return True
        except NodeExistsError:
            return False
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if parent:
                ZkClient._create_recursive(client, parent)
            try:
                client.create(path, data)
                return True
            except NodeExistsError:
                return False

    def _multi(self, operations: Sequence[object]) -> list[object]:
        """One ZooKeeper multi (all or nothing); the result of each operation, or its error instance.
        Built from raw protocol records because kazoo's TransactionRequest refuses null data, which Kafka
        writes into structural znodes."""
        return self._until_connected(lambda: self._multi_async(operations).get())

    def _until_connected(self, call: Callable[..., T], *args: object) -> T:
        """Kafka's retryRequestUntilConnected: a request that met a lost connection is sent again once the
        session is back (not after it expired). A write sent twice is safe here because every write is
        conditional or create-only, and its callers read back what a repeated one means (as Kafka's do)."""
        return self._command_retry.copy()(call, *args)

    def _multi_async(self, operations: Sequence[object]):  # -> IAsyncResult
        result = self._kazoo.handler.async_result()
        self._kazoo._call(Transaction(list(operations)), result)
        return result

    def _create_op(self, path: str, data: bytes | None, ephemeral: bool = False, sequential: bool = False) -> Create:
        return Create(self._full(path), data, OPEN_ACL_UNSAFE, int(ephemeral) | (2 if sequential else 0))

    def _check_epoch_op(self, controller_zk_version: int) -> CheckVersion:
        return CheckVersion(self._full(CONTROLLER_EPOCH), controller_zk_version)

    @staticmethod
    def _failure(results: Sequence[object]) -> ZookeeperError | None:
        """The error that failed a multi: the first one that is not a roll-back of its neighbours."""
        return next((r for r in results if isinstance(r, ZookeeperError)
                     and not isinstance(r, RolledBackError | RuntimeInconsistency)), None)

    def _fenced(self, operation: object, controller_zk_version: int):  # -> IAsyncResult
        """Kafka's wrapRequestWithControllerEpochCheck: the write happens only if /controller_epoch is still
        at the version this controller set when it was elected."""
        return self._multi_async([self._check_epoch_op(controller_zk_version), operation])

    def _fenced_result(self, pending, controller_zk_version: int) -> WriteResult:
        results = pending.get()
        check, outcome = results[0], results[1]
        if isinstance(check, BadVersionError | NoNodeError):
            raise ControllerMovedError(f"controller epoch zkVersion check fails, expected {controller_zk_version}")
        if isinstance(outcome, ZookeeperError) and not isinstance(outcome, RolledBackError):
            status = _STATUS_OF.get(type(outcome))
            if status is None:
                raise outcome
            return WriteResult(status)
        version = outcome.version if isinstance(outcome, ZnodeStat) else 0
        return WriteResult(WriteStatus.OK, version)

    def get(self, path: str) -> tuple[bytes | None, ZnodeStat] | None:
        """Raw data and stat of a znode, or None when it does not exist."""
        try:
            return self._until_connected(self._kazoo.get, path)
        except NoNodeError:
            return None

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self._until_connected(self._kazoo.get_children, path))
        except NoNodeError:
            return []

    def exists(self, path: str) -> bool:
        return self._until_connected(self._kazoo.exists, path) is not None

    def conditional_update(self, path: str, data: bytes, expected_version: int) -> WriteResult:
        """Kafka's conditionalUpdatePath: set `data` only if the znode is still at `expected_version`."""
        try:
            stat = self._until_connected(self._kazoo.set, path, data, expected_version)
            return WriteResult(WriteStatus.OK, stat.version)
        except BadVersionError:
            return WriteResult(WriteStatus.VERSION_CONFLICT)
        except NoNodeError:
            return WriteResult(WriteStatus.NO_NODE)

    def delete_recursive(self, path: str, controller_zk_version: int = MATCH_ANY_VERSION) -> bool:
        """Delete a subtree, children first; each delete is fenced when `controller_zk_version` is given."""
        children = self.children(path)
        if not children and not self.exists(path):
            return False
        for child in children:
            self.delete_recursive(f"{path}/{child}", controller_zk_version)
        self._delete(path, controller_zk_version)
        return True

    def _delete(self, path: str, controller_zk_version: int) -> None:
        if controller_zk_version == MATCH_ANY_VERSION:
            with contextlib.suppress(NoNodeError):
                self._kazoo.delete(path)
            return
        result = self._fenced_result(self._fenced(Delete(self._full(path), -1), controller_zk_version),
                                     controller_zk_version)
        if result.status not in (WriteStatus.OK, WriteStatus.NO_NODE):
            raise RuntimeError(f"deleting {path}: {result.status.value}")

    # ---- bootstrap

    def create_top_level_paths(self) -> None:
        """What a Kafka broker makes sure exists at start, so either broker can join a fresh ZooKeeper."""
        for path in PERSISTENT_PATHS:
            self._create_recursive(self._kazoo, path)

    def create_or_get_cluster_id(self, proposed: str) -> str:
        """The cluster id: the one already in /cluster/id, else `proposed`, written there."""
        if self._create_recursive(self._kazoo, CLUSTER_ID, _json({"version": "1", "id": proposed})):
            return proposed
        found = self.cluster_id()
        if found is None:
            raise RuntimeError(f"{CLUSTER_ID} vanished while reading it")
        return found

    def cluster_id(self) -> str | None:
        found = self.get(CLUSTER_ID)
        return str(json.loads(found[0])["id"]) if found and found[0] else None

    def generate_broker_sequence_id(self) -> int:
        """Kafka's broker id generation: the new version of /brokers/seqid (add reserved.broker.max.id)."""
        while True:
            try:
                return self._kazoo.set(BROKER_SEQID, b"", -1).version
            except NoNodeError:
                self._create_recursive(self._kazoo, BROKER_SEQID, b"")

    # ---- brokers

    def register_broker(self, registration: BrokerRegistration, jmx_port: int = -1) -> int:
        """Create the ephemeral /brokers/ids/<id>; returns its czxid, the broker epoch.

        As Kafka's CheckedEphemeral: create with no data and set the data in the same multi, and take over a
        registration left by this broker's own previous session (ZOOKEEPER-2985). Another live broker's
        registration under the same id raises NodeExistsError."""
        path = broker_path(registration.broker_id)
        data = encode_broker(registration, jmx_port)
        for _ in range(3):
            results = self._multi([self._create_op(path, None, ephemeral=True),
                                   SetData(self._full(path), data, 0)])
            failure = self._failure(results)
            if failure is None:
                return results[1].czxid  # type: ignore[attr-defined]
            if not isinstance(failure, NodeExistsError):
                raise failure
            found = self.get(path)
            if found is None:
                continue  # the old registration went away meanwhile: try again
            owner = found[1].ephemeralOwner
            if owner == self.session_id:
                return found[1].czxid
            raise NodeExistsError(f"{path} is registered by another session (0x{owner:x})")
        raise RuntimeError(f"could not register {path}")

    def update_broker_registration(self, registration: BrokerRegistration, jmx_port: int = -1) -> None:
        self._kazoo.set(broker_path(registration.broker_id), encode_broker(registration, jmx_port))

    def broker_ids(self) -> list[int]:
        return sorted(int(child) for child in self.children(BROKER_IDS))

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        found = self.get(broker_path(broker_id))
        if found is None or not found[0]:
            return None
        return decode_broker(broker_id, found[0], found[1].czxid)

    def live_brokers(self) -> list[BrokerRegistration]:
        """Every registered broker, by id, each with its broker epoch (czxid)."""
        found = (self.broker(broker_id) for broker_id in self.broker_ids())
        return [broker for broker in found if broker is not None]

    def watch_brokers(self, callback: Callable[[list[int]], object]) -> None:
        """Call `callback` with the sorted live broker ids now and on every change of /brokers/ids (until it
        returns False)."""
        ChildrenWatch(self._kazoo, BROKER_IDS, lambda children: callback(sorted(int(c) for c in children)))

    def watch_broker(self, broker_id: int, callback: Callable[[bool], object]) -> None:
        """Call `callback` with whether /brokers/ids/<id> exists, now and whenever it is created, rewritten or
        deleted, until it returns False (the controller's BrokerModificationsHandler)."""
        self._watch_znode(broker_path(broker_id), callback)

    def _watch_znode(self, path: str, callback: Callable[[bool], object]) -> None:
        def changed(data: bytes | None, stat: ZnodeStat | None) -> object:
            return callback(stat is not None)
        DataWatch(self._kazoo, path, changed)

    # ---- controller

    def controller_id(self) -> int | None:
        found = self.get(CONTROLLER)
        return int(json.loads(found[0])["brokerid"]) if found and found[0] else None

    def controller_epoch(self) -> ControllerEpoch | None:
        found = self.get(CONTROLLER_EPOCH)
        return ControllerEpoch(int(found[0]), found[1].version) if found and found[0] else None

    def register_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Try to become controller: create the ephemeral /controller and bump /controller_epoch in one multi
        conditioned on the epoch znode's version, so of two brokers racing at most one wins. Returns the new
        epoch and its znode version (what fenced writes check), or None if another broker won."""
        current = self.controller_epoch() or self._create_controller_epoch()
        new_epoch = current.epoch + 1
        results = self._multi([self._create_op(CONTROLLER, encode_controller(broker_id), ephemeral=True),
                               SetData(self._full(CONTROLLER_EPOCH), str(new_epoch).encode(), current.zk_version)])
        failure = self._failure(results)
        if failure is None:
            return ControllerEpoch(new_epoch, results[1].version)  # type: ignore[attr-defined]
        if not isinstance(failure, NodeExistsError | BadVersionError):
            raise failure
        # as Kafka: after a lost connection the multi may have succeeded for us after all
        after = self.controller_epoch()
        if self.controller_id() == broker_id and after is not None and after.epoch == new_epoch:
            return after
        return None

    def _create_controller_epoch(self) -> ControllerEpoch:
        try:
            self._kazoo.create(CONTROLLER_EPOCH, str(INITIAL_CONTROLLER_EPOCH).encode())
            return ControllerEpoch(INITIAL_CONTROLLER_EPOCH, 0)
        except NodeExistsError:
            found = self.controller_epoch()
            if found is None:
                raise RuntimeError(f"{CONTROLLER_EPOCH} vanished while reading it") from None
            return found

    def resign_controller(self, controller_zk_version: int) -> None:
        """Delete /controller, fenced, so a controller that lost its epoch cannot remove its successor's."""
        self._delete(CONTROLLER, controller_zk_version)

    def watch_controller(self, callback: Callable[[int | None], None]) -> None:
        """Call `callback` with the controller's broker id (None when there is none) now and on every change."""
        def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            callback(int(json.loads(data)["brokerid"]) if data else None)
        DataWatch(self._kazoo, CONTROLLER, changed)

    # ---- topics

    def topics(self) -> list[str]:
        return self.children(TOPICS)

    def watch_topics(self, callback: Callable[[list[str]], object]) -> None:
        """Call `callback` with the sorted topics now and on every change of /brokers/topics (until it returns
        False)."""
        ChildrenWatch(self._kazoo, TOPICS, lambda children: callback(sorted(children)))

    def watch_topic(self, topic: str, callback: Callable[[bool], object]) -> None:
        """Call `callback` with whether /brokers/topics/<t> exists, now and on every write of its assignment, until
        it returns False (the controller's PartitionModificationsHandler)."""
        self._watch_znode(topic_path(topic), callback)

    def topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Many topics' assignments at once (pipelined reads); topics without a znode are left out."""
        pending = {topic: self._kazoo.get_async(topic_path(topic)) for topic in topics}
        found = {}
        for topic, result in pending.items():
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            if data:
                found[topic] = decode_topic(topic, data)
        return found

    def topic_assignment(self, topic: str) -> TopicAssignment | None:
        found = self.get(topic_path(topic))
        return decode_topic(topic, found[0]) if found and found[0] else None

    def create_topic(self, assignment: TopicAssignment, config: Mapping[str, str] | None = None) -> None:
        """What Kafka's AdminZkClient.createTopicWithAssignment leaves behind (/config/topics/<t>, written even
        when empty, and /brokers/topics/<t>), in one multi so no half-created topic is ever visible.
        Raises TopicExistsError if the topic exists or is still marked for deletion."""
        topic = assignment.name
        if self.exists(f"{DELETE_TOPICS}/{topic}"):
            raise TopicExistsError(f"Topic '{topic}' is marked for deletion.")
        config_data = _json({"version": 1, "config": dict(config or {})})
        for _ in range(2):
            config_op = (SetData(self._full(config_path("topics", topic)), config_data, -1)
                         if self.exists(config_path("topics", topic))
                         else self._create_op(config_path("topics", topic), config_data))
            failure = self._failure(self._multi([config_op, self._create_op(topic_path(topic),
                                                                            encode_topic(assignment))]))
            if failure is None:
                return
            if isinstance(failure, NodeExistsError) and self.exists(topic_path(topic)):
                raise TopicExistsError(f"Topic '{topic}' already exists.")
            if not isinstance(failure, NodeExistsError | NoNodeError):
                raise failure
        raise RuntimeError(f"could not create topic {topic}: its config znode keeps changing")

    def set_topic_assignment(self, assignment: TopicAssignment,
                             controller_zk_version: int = MATCH_ANY_VERSION) -> WriteResult:
        """Replace a topic's assignment (a reassignment's adding/removing, new partitions), fenced when
        `controller_zk_version` is given."""
        path, data = topic_path(assignment.name), encode_topic(assignment)
        if controller_zk_version == MATCH_ANY_VERSION:
            return self.conditional_update(path, data, MATCH_ANY_VERSION)
        pending = self._fenced(SetData(self._full(path), data, -1), controller_zk_version)
        return self._fenced_result(pending, controller_zk_version)

    def delete_topic_znodes(self, topic: str, controller_zk_version: int) -> None:
        """The controller's last step of a deletion: the topic tree, its config, its deletion mark."""
        self.delete_recursive(topic_path(topic), controller_zk_version)
        self._delete(config_path("topics", topic), controller_zk_version)
        self._delete(f"{DELETE_TOPICS}/{topic}", controller_zk_version)

    # ---- partition states

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        found = self.get(partition_state_path(topic, partition))
        return decode_partition_state(found[0], found[1].version) if found and found[0] else None

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        """Many states at once (pipelined reads); missing partitions are left out."""
        pending = {tp: self._kazoo.get_async(partition_state_path(*tp)) for tp in partitions}
        states = {}
        for tp, result in pending.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            if data:
                states[tp] = decode_partition_state(data, stat.version)
        return states

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int) -> dict[int, WriteResult]:
        """A new partition's first state, as Kafka's controller creates it: .../partitions, .../<p> (no data)
        and .../<p>/state, each write fenced on the controller epoch. NODE_EXISTS for a partition that has one."""
        fenced = controller_zk_version
        self._fenced_result(self._fenced(self._create_op(partitions_path(topic), None), fenced), fenced)
        pending = [self._fenced(self._create_op(f"{partitions_path(topic)}/{p}", None), fenced) for p in states]
        for result in pending:
            self._fenced_result(result, fenced)
        creates = {p: self._fenced(self._create_op(partition_state_path(topic, p), encode_partition_state(s)), fenced)
                   for p, s in states.items()}
        return {p: self._fenced_result(result, fenced) for p, result in creates.items()}

    def update_partition_states(self, topic: str, states: Mapping[int, PartitionState],
                                controller_zk_version: int = MATCH_ANY_VERSION) -> dict[int, WriteResult]:
        """Conditional writes of partition states, each on the znode version its LeaderAndIsr carries
        (`partition_epoch`): a writer that read a stale state gets VERSION_CONFLICT, re-reads and decides again.
        Fenced on the controller epoch when `controller_zk_version` is given (the controller's writes)."""
        pending = {}
        for partition, state in states.items():
            operation = SetData(self._full(partition_state_path(topic, partition)), encode_partition_state(state),
                                state.leader_and_isr.partition_epoch)
            pending[partition] = (self._fenced(operation, controller_zk_version)
                                  if controller_zk_version != MATCH_ANY_VERSION else self._multi_async([operation]))
        results = {}
        for partition, result in pending.items():
            if controller_zk_version != MATCH_ANY_VERSION:
                results[partition] = self._fenced_result(result, controller_zk_version)
            else:
                results[partition] = self._single_result(result.get()[0])
        return results

    def update_partition_state(self, topic: str, partition: int, state: PartitionState,
                               controller_zk_version: int = MATCH_ANY_VERSION) -> WriteResult:
        return self.update_partition_states(topic, {partition: state}, controller_zk_version)[partition]

    @staticmethod
    def _single_result(outcome: object) -> WriteResult:
        if isinstance(outcome, ZookeeperError):
            status = _STATUS_OF.get(type(outcome))
            if status is None:
                raise outcome
            return WriteResult(status)
        return WriteResult(WriteStatus.OK, outcome.version if isinstance(outcome, ZnodeStat) else 0)

    # ---- configs

    def entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """/config/<type>/<name>'s overrides ({} when there are none)."""
        found = self.get(config_path(entity_type, name))
        body = _parse(found[0]) if found else None
        return {key: str(value) for key, value in (body or {}).get("config", {}).items()}

    def entities_with_config(self, entity_type: str) -> list[str]:
        return self.children(f"{CONFIG}/{entity_type}")

    def set_entity_config(self, entity_type: str, name: str, config: Mapping[str, str]) -> None:
        """Write /config/<type>/<name> (version 1 JSON), creating it if needed. Last writer wins, as in Kafka."""
        path, data = config_path(entity_type, name), _json({"version": 1, "config": dict(config)})
        try:
            self._kazoo.set(path, data)
        except NoNodeError:
            if not self._create_recursive(self._kazoo, path, data):
                self._kazoo.set(path, data)

    def notify_config_change(self, entity_type: str, name: str) -> str:
        """A /config/changes/config_change_<seq> notification (version 2 JSON) telling every broker to reread
        /config/<type>/<name>; returns the sequence znode's name."""
        self._create_recursive(self._kazoo, CONFIG_CHANGES)
        created = self._kazoo.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                                     _json({"version": 2, "entity_path": f"{entity_type}/{name}"}), sequence=True)
        return created.rsplit("/", 1)[1]

    def change_entity_config(self, entity_type: str, name: str, config: Mapping[str, str]) -> str:
        """Kafka's AdminZkClient.changeEntityConfig: the new overrides, then the change notification."""
        self.set_entity_config(entity_type, name, config)
        return self.notify_config_change(entity_type, name)

    def config_changes(self) -> list[tuple[str, str]]:
        """Pending notifications, oldest first: (znode name, entity path such as "topics/t")."""
        changes = []
        for child in self.children(CONFIG_CHANGES):
            found = self.get(f"{CONFIG_CHANGES}/{child}")
            body = _parse(found[0]) if found else None
            if body is not None:
                changes.append((child, str(body["entity_path"])))
        return changes

    def config_change(self, name: str) -> tuple[str, int] | None:
        """One notification's (entity path, creation time in ms); None if it is gone or unreadable."""
        found = self.get(f"{CONFIG_CHANGES}/{name}")
        body = _parse(found[0]) if found else None
        if body is None or "entity_path" not in body:
            return None
        return str(body["entity_path"]), found[1].ctime  # type: ignore[index]

    def watch_config_changes(self, callback: Callable[[list[str]], None]) -> None:
        ChildrenWatch(self._kazoo, CONFIG_CHANGES, lambda children: callback(sorted(children)))

    def delete_config_changes(self, names: Iterable[str]) -> None:
        for name in names:
            self._delete(f"{CONFIG_CHANGES}/{name}", MATCH_ANY_VERSION)

    # ---- admin: deletion, reassignment, preferred replica election

    def mark_topic_for_deletion(self, topic: str) -> bool:
        """/admin/delete_topics/<t>; False if it was already marked."""
        return self._create_recursive(self._kazoo, f"{DELETE_TOPICS}/{topic}")

    def topics_marked_for_deletion(self) -> list[str]:
        return self.children(DELETE_TOPICS)

    def watch_topic_deletions(self, callback: Callable[[list[str]], object]) -> None:
        ChildrenWatch(self._kazoo, DELETE_TOPICS, lambda children: callback(sorted(children)))

    def delete_topic_deletions(self, topics: Sequence[str], controller_zk_version: int) -> None:
        """Drop /admin/delete_topics marks the controller will not act on (unknown topics, or deletion disabled),
        each delete fenced on the controller epoch (Kafka's deleteTopicDeletions)."""
        for topic in topics:
            self._delete(f"{DELETE_TOPICS}/{topic}", controller_zk_version)

    def watch_partition_reassignment(self, callback: Callable[[bool], object]) -> None:
        """Whether /admin/reassign_partitions exists now, then True on each creation of it, until `callback`
        returns False. As Kafka's handler, neither its rewrites (the controller's own) nor its deletion are
        reported; a creation is told by the znode's creation zxid, so a delete and create seen as one change
        still counts. (Kafka's one-shot watch, re-armed only when its controller looks, can miss a creation
        this one reports; and the controller re-creating the znode deleted under its rewrite counts too.)"""
        created: list[int | None] = [None]
        first = [True]

        def changed(data: bytes | None, stat: ZnodeStat | None) -> object:
            before, created[0] = created[0], stat.czxid if stat is not None else None
            if first[0]:
                first[0] = False
                return callback(stat is not None)
            return callback(True) if stat is not None and stat.czxid != before else True

        DataWatch(self._kazoo, REASSIGN_PARTITIONS, changed)

    def watch_preferred_replica_election(self, callback: Callable[[bool], object]) -> None:
        """Whether /admin/preferred_replica_election exists, now and on every change, until `callback` returns
        False."""
        self._watch_znode(PREFERRED_REPLICA_ELECTION, callback)

    def partition_reassignment(self) -> dict[tuple[str, int], tuple[int, ...]] | None:
        """The legacy /admin/reassign_partitions (version 1): target replicas per partition; None without the
        znode. As Kafka's getPartitionReassignment, one that cannot be read counts as empty (and is logged)."""
        found = self.get(REASSIGN_PARTITIONS)
        if found is None:
            return None
        try:
            body = _parse(found[0]) or {}
            return {(p["topic"], int(p["partition"])): tuple(int(r) for r in p["replicas"])
                    for p in body.get("partitions", [])}
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            log.warning("ignoring the partition reassignment in %s, not Kafka's JSON: %r", REASSIGN_PARTITIONS, error)
            return {}

    def create_partition_reassignment(self, targets: Mapping[tuple[str, int], Sequence[int]]) -> bool:
        """What kafka-reassign-partitions --zookeeper writes; False if a reassignment is already pending."""
        return self._create_recursive(self._kazoo, REASSIGN_PARTITIONS, _reassignment_json(targets))

    def set_partition_reassignment(self, targets: Mapping[tuple[str, int], Sequence[int]],
                                   controller_zk_version: int) -> None:
        """The controller's rewrite as partitions leave the znode (Kafka's setOrCreatePartitionReassignment):
        replaced, or created again if it was deleted meanwhile; fenced on the controller epoch."""
        data = _reassignment_json(targets)
        result = self._fenced_result(self._fenced(SetData(self._full(REASSIGN_PARTITIONS), data, -1),
                                                  controller_zk_version), controller_zk_version)
        if result.status is WriteStatus.NO_NODE:
            result = self._fenced_result(self._fenced(self._create_op(REASSIGN_PARTITIONS, data),
                                                      controller_zk_version), controller_zk_version)
        if result.status is not WriteStatus.OK:
            raise RuntimeError(f"writing {REASSIGN_PARTITIONS}: {result.status.value}")

    def delete_partition_reassignment(self, controller_zk_version: int = MATCH_ANY_VERSION) -> None:
        self._delete(REASSIGN_PARTITIONS, controller_zk_version)

    def preferred_replica_election(self) -> set[tuple[str, int]]:
        found = self.get(PREFERRED_REPLICA_ELECTION)
        body = _parse(found[0]) if found else None
        return {(p["topic"], int(p["partition"])) for p in (body or {}).get("partitions", [])}

    def create_preferred_replica_election(self, partitions: Iterable[tuple[str, int]]) -> bool:
        body = {"version": 1, "partitions": _partition_list(partitions)}
        return self._create_recursive(self._kazoo, PREFERRED_REPLICA_ELECTION, _json(body))

    def delete_preferred_replica_election(self, controller_zk_version: int = MATCH_ANY_VERSION) -> None:
        self._delete(PREFERRED_REPLICA_ELECTION, controller_zk_version)

    # ---- features

    def features(self) -> FinalizedFeatures | None:
        """/feature: the finalized feature levels and whether versioning is enabled (status 1)."""
        found = self.get(FEATURE)
        body = _parse(found[0]) if found else None
        if body is None:
            return None
        levels = {name: int(levels["max_version_level"]) for name, levels in body.get("features", {}).items()}
        return FinalizedFeatures(bool(body["status"]), levels, found[1].version)  # type: ignore[index]

    def write_features(self, features: FinalizedFeatures) -> int:
        """Create or replace /feature as Kafka 3.9's controller writes it (version 2); returns its znode version."""
        data = _json({"version": 2, "status": int(features.enabled),
                      "features": {name: {"max_version_level": level} for name, level in features.levels.items()}})
        try:
            self._kazoo.create(FEATURE, data)
            return 0
        except NodeExistsError:
            return self._kazoo.set(FEATURE, data).version

    # ---- producer id blocks

    def producer_id_block(self) -> ProducerIdBlock | None:
        found = self.get(PRODUCER_ID_BLOCK)
        return decode_producer_id_block(found[0]) if found and found[0] else None

    def allocate_producer_id_block(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """The next block of producer ids for `broker_id` (Kafka's ZkProducerIdManager.getNewProducerIdBlock):
        read /latest_producer_id_block and write the following block conditionally on its version, retrying
        when another allocator got there first, so no two brokers ever get overlapping blocks."""
        while True:
            found = self.get(PRODUCER_ID_BLOCK)
            if found is None:
                self._create_recursive(self._kazoo, PRODUCER_ID_BLOCK)
                continue
            data, stat = found
            first = decode_producer_id_block(data).last_producer_id + 1 if data else 0
            if first > _LONG_MAX - size:
                raise RuntimeError("Have exhausted all producerIds.")
            block = ProducerIdBlock(broker_id, first, size)
            if self.conditional_update(PRODUCER_ID_BLOCK, encode_producer_id_block(block), stat.version).ok:
                return block
