"""The wire-level differential: the same request to kbroker and to Apache Kafka, responses compared.

A case is a small request template per API (`CASES`), written once as plain data with every field any
version may carry; `build` keeps the fields the version has. Templates that name a topic or group use the
same names on both brokers (`Names`), and what only a broker can know (a topic's id, a member id it
handed out) comes from that broker (`Ctx`). Responses are decoded with our own codecs and compared as
plain data after `normalise`, whose one list, `NORMALISED`, names everything that must differ.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kbroker.apis.dispatch  # noqa: F401  (registers every handler)
from kbroker.apis.registry import HANDLERS
from wire import headers, messages
from wire.records import Record, build_batch
from wire.schema import ZERO_UUID, FieldSpec

RUN = uuid.uuid4().hex[:8]  # one per test process: both brokers see the same names
# Records carry this explicit CreateTime, so both brokers store the same bytes; it is recent, so that neither
# broker's time retention (7 days) deletes them during the run.
TIMESTAMP = time.time_ns() // 1_000_000
CLOSED = "connection closed by the broker"
API_VERSIONS = 18
UNSUPPORTED_VERSION = b"\x00\x23"  # its error code (35) as it starts an ApiVersions response

# What must differ between two brokers, by response field name. Values are replaced by whether they are
# set, so "missing on one side" still shows. Nothing else is normalised.
NORMALISED: dict[str, str] = {
    "cluster_id": "a random id per cluster",
    "controller_id": "node ids: kbroker and Kafka are configured differently",
    "node_id": "node id", "leader_id": "node id", "broker_id": "node id", "replica_nodes": "node ids",
    "isr_nodes": "node ids", "offline_replicas": "node ids", "leader": "JoinGroup: the leader's member id",
    "host": "listener address", "port": "free port per run",
    "throttle_time_ms": "quota throttling is timing", "topic_id": "random per topic",
    "member_id": "generated member ids", "producer_id": "allocated producer ids",
    "log_dir": "a path under each broker's temp dir", "total_bytes": "disk size", "usable_bytes": "disk free",
    "finalized_features_epoch": "KRaft metadata offset",
    "transaction_start_time_ms": "wall-clock time",
    "error_message": "human-readable text (only presence is compared)",
    "documentation": "human-readable text (only presence is compared)",
}


# Lists whose order Kafka does not define, sorted by the key named: Kafka 3.9 lists a topic's partitions in
# hash-map order, and AddPartitionsToTxn's topics come from a map in both lines.
UNORDERED: dict[str, str] = {"partitions": "partition_index",
                             "results_by_topic_v3_and_below": "name"}  # AddPartitionsToTxn: a map's order


def normalise(value: Any, name: str = "") -> Any:
    if name in UNORDERED and isinstance(value, list) and all(isinstance(item, dict) for item in value):
        value = sorted(value, key=lambda item: item.get(UNORDERED[name], 0))
    if name in NORMALISED:
        if isinstance(value, list):
            return [_is_set(item) for item in value]
        return _is_set(value)
    if isinstance(value, dict):
        return {key: normalise(item, key) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise(item) for item in value]
    return value


def _is_set(value: Any) -> str:
    unset = value is None or value == "" or value == ZERO_UUID or (isinstance(value, int) and value < 0)
    return "<unset>" if unset else "<set>"


def differences(kbroker: Any, kafka: Any, path: str = "") -> list[str]:
    """Where two normalised responses differ, one line per field path."""
    if isinstance(kbroker, dict) and isinstance(kafka, dict):
        return [line for key in kbroker.keys() | kafka.keys()
                for line in differences(kbroker.get(key, "<absent>"), kafka.get(key, "<absent>"), f"{path}.{key}")]
    if isinstance(kbroker, list) and isinstance(kafka, list) and len(kbroker) == len(kafka):
        return [line for i, pair in enumerate(zip(kbroker, kafka, strict=True))
                for line in differences(*pair, f"{path}[{i}]")]
    return [] if kbroker == kafka else [f"{path or '.'}: kbroker {kbroker!r:.200} / Kafka {kafka!r:.200}"]


def plain(response: Any) -> Any:
    return response if isinstance(response, str) else normalise(response.to_dict())


# ---- building requests from plain data -------------------------------------------------------

def build(message: str, version: int, data: dict) -> Any:
    """The generated `message` object with the fields of `data` that exist at `version`."""
    classes = messages.classes(message)
    return _struct(classes, message, messages.all_specs()[message].fields, version, data)


def _struct(classes: dict[str, type], name: str, fields: tuple[FieldSpec, ...], version: int, data: dict) -> Any:
    values = {}
    for spec in fields:
        if spec.attr not in data or version not in spec.versions:
            continue
        value = data[spec.attr]
        if spec.is_struct and value is not None:
            def make(item: dict, spec: FieldSpec = spec) -> Any:
                return _struct(classes, spec.struct_name, spec.fields or (), version, item)
            value = [make(item) for item in value] if spec.is_array else make(value)
        values[spec.attr] = value
    return classes[name](**values)


# ---- one connection per broker ------------------------------------------------------------------

class Connection:
    """Kafka framing over one socket, reopened after the broker closes it."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.sock: socket.socket | None = None
        self.correlation_id = 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, api_key: int, version: int, request: Any, body_version: int | None = None) -> int:
        """Send a request; `body_version` encodes the body at another version than the header names."""
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=30)
        self.correlation_id += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self.correlation_id, client_id="wire-differential")
        frame = headers.encode_request_header(header)
        messages.encode(request, version if body_version is None else body_version, frame)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        return self.correlation_id

    def receive(self, api_key: int, version: int) -> Any:
        """The decoded response, or CLOSED when the broker closed the connection instead."""
        try:
            frame = self._read(struct.unpack(">i", self._read(4))[0])
        except (ConnectionError, TimeoutError):
            self.close()
            return CLOSED
        header, at = headers.decode_response_header(frame, api_key, version)
        assert header.correlation_id == self.correlation_id
        if api_key == API_VERSIONS and version not in messages.api(api_key).versions:
            version = 0  # a too-new ApiVersions request is answered in v0 (KIP-511)
        elif api_key == API_VERSIONS and frame[at:at + 2] == UNSUPPORTED_VERSION:
            version = 0  # UNSUPPORTED_VERSION is always answered in v0
        if version not in messages.api(api_key).versions:
            return f"answered {bytes(frame[at:at + 64]).hex()}"
        response, _ = messages.decode(messages.api(api_key).response.name, version, frame, at)
        return response

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.send(api_key, version, request)
        return self.receive(api_key, version)

    def _read(self, count: int) -> bytes:
        assert self.sock is not None
        buffer = bytearray(count)
        view = memoryview(buffer)
        while view:  # the socket has a timeout, so it is non-blocking underneath: MSG_WAITALL would not wait
            received = self.sock.recv_into(view)
            if not received:
                raise ConnectionError("closed")
            view = view[received:]
        return bytes(buffer)


# ---- names, state and the per-broker context -------------------------------------------------------

TOPIC = f"wd-{RUN}"  # 3 partitions; 5 records in partition 0 (RECORDS), created by `prepare_shared`
GROUP = f"wd-group-{RUN}"  # committed offset 3 on TOPIC-0
ZSTD = 4  # the batch attribute's codec
RECORDS = build_batch([Record(i, TIMESTAMP + i, b"k%d" % i, b"v%d" % i) for i in range(5)])
RANGE_ASSIGNMENT = b"\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"  # version 0, no topics, null user data
CONSUMER_METADATA = b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"  # version 0, no topics, null user data


@dataclass
class Ctx:
    """One broker as a case sees it: its connection, the triple's own names, what the broker handed out."""

    conn: Connection
    version: int
    key: str  # unique per (api, version, case): names of topics/groups a case creates
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"wd-{RUN}-{self.key}"

    def topic_id(self, topic: str) -> uuid.UUID:
        request = build("MetadataRequest", 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        return self.conn.call(3, 12, request).topics[0].topic_id


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def create_topic(ctx: Ctx, topic: str, partitions: int = 1) -> None:
    request = build("CreateTopicsRequest", 5, {"topics": [{"name": topic, "num_partitions": partitions,
                                                           "replication_factor": 1}], "timeout_ms": 30000})
    ctx.conn.call(19, 5, request)
    wait_for(lambda: _has_partitions(ctx, topic), f"a leader for {topic}")


def produce(ctx: Ctx, topic: str, records: bytes, partition: int = 0) -> int:
    """Error code of an acks=-1 Produce v9."""
    data = {"acks": -1, "timeout_ms": 30000, "topic_data": [{"name": topic, "partition_data": [
        {"index": partition, "records": records}]}]}
    response = ctx.conn.call(0, 9, build("ProduceRequest", 9, data))
    return response.responses[0].partition_responses[0].error_code


def _has_partitions(ctx: Ctx, topic: str) -> bool:
    response = ctx.conn.call(3, 1, build("MetadataRequest", 1, {"topics": [{"name": topic}]}))
    return response.topics[0].error_code == 0 and bool(response.topics[0].partitions) \
        and response.topics[0].partitions[0].leader_id >= 0


def commit(ctx: Ctx, group: str, topic: str, offset: int) -> None:
    request = build("OffsetCommitRequest", 2, {"group_id": group, "generation_id_or_member_epoch": -1,
                                               "member_id": "", "retention_time_ms": -1, "topics": [
                                                   {"name": topic, "partitions": [
                                                       {"partition_index": 0, "committed_offset": offset,
                                                        "committed_metadata": "m"}]}]})
    errors: list[int] = []

    def committed() -> bool:
        errors.append(ctx.conn.call(8, 2, request).topics[0].partitions[0].error_code)
        return errors[-1] not in COORDINATOR_NOT_READY
    wait_for(committed, "a loaded group coordinator")
    assert errors[-1] == 0, errors


COORDINATOR_NOT_READY = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


ADD_PARTITIONS_TO_TXN = 24


def api_versions(conn: Connection) -> list:
    """The (api_key, min_version, max_version) entries a broker lists in ApiVersions."""
    request = build("ApiVersionsRequest", 3, {"client_software_name": "wd", "client_software_version": "1"})
    return conn.call(API_VERSIONS, 3, request).api_keys


def served_by(conn: Connection) -> set[int]:
    return {entry.api_key for entry in api_versions(conn)}


def wait_for_coordinator(ctx: Ctx, group: str) -> None:
    request = build("FindCoordinatorRequest", 1, {"key": group, "key_type": 0})
    wait_for(lambda: ctx.conn.call(10, 1, request).error_code == 0, "the group coordinator")


def prepare_shared(ctx: Ctx) -> None:
    """TOPIC with RECORDS in partition 0, GROUP with a committed offset: made once per broker."""
    create_topic(ctx, TOPIC, 3)
    wait_for(lambda: produce(ctx, TOPIC, RECORDS) == 0, "a first write to the shared topic")
    wait_for_coordinator(ctx, GROUP)
    commit(ctx, GROUP, TOPIC, 3)
    init = build("InitProducerIdRequest", 0, {"transactional_id": None, "transaction_timeout_ms": -1})
    wait_for(lambda: ctx.conn.call(22, 0, init).error_code not in COORDINATOR_NOT_READY, "producer ids")
    if ADD_PARTITIONS_TO_TXN in served_by(ctx.conn):  # a broker with transactions: its coordinator loaded
        find = build("FindCoordinatorRequest", 1, {"key": f"wd-{RUN}-txn", "key_type": 1})
        wait_for(lambda: ctx.conn.call(10, 1, find).error_code == 0, "the transaction coordinator")


def join(ctx: Ctx, group: str, sync: bool = True) -> None:
    """A classic member of `group` (its leader, generation 1), joined and, with `sync`, synced: state member and
    generation."""
    data = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": CONSUMER_METADATA}]}
    wait_for_coordinator(ctx, group)
    first = ctx.conn.call(11, 5, build("JoinGroupRequest", 5, data))
    joined = ctx.conn.call(11, 5, build("JoinGroupRequest", 5, {**data, "member_id": first.member_id}))
    assert joined.error_code == 0, joined
    ctx.state.update(member=joined.member_id, generation=joined.generation_id)
    if sync:
        request = {"group_id": group, "generation_id": joined.generation_id, "member_id": joined.member_id,
                   "assignments": [{"member_id": joined.member_id, "assignment": RANGE_ASSIGNMENT}]}
        assert ctx.conn.call(14, 3, build("SyncGroupRequest", 3, request)).error_code == 0


# ---- cases ------------------------------------------------------------------------------------------

Template = Callable[[Ctx], dict]


@dataclass(frozen=True)
class Case:
    name: str
    template: Template
    prepare: Callable[[Ctx], None] | None = None
    versions: Callable[[int], bool] = lambda version: True
    # why Kafka's answer differs, naming the issue that brings what it needs or the documented choice; a
    # mapping gives each Kafka line ("4", "3.9") its own reason
    xfail: str | Mapping[str, str] | None = None
    xfail_versions: Callable[[int], bool] = lambda version: True
    xfail_kafka: tuple[str, ...] = ("4", "3.9")  # the Kafka lines whose answer differs (for a single reason)

    def expected_failure(self, version: int, kafka: str) -> str | None:
        if not self.xfail or not self.xfail_versions(version):
            return None
        if isinstance(self.xfail, Mapping):
            return self.xfail.get(kafka)
        return self.xfail if kafka in self.xfail_kafka else None


def topic_ref(ctx: Ctx, topic: str) -> dict:
    """A topic by name and, for versions that name topics by id, by the broker's id for it."""
    topic_id = uuid.UUID(int=1) if topic in (UNKNOWN, INVALID) else ctx.topic_id(topic)
    return {"name": topic, "topic": topic, "topic_id": topic_id}


UNKNOWN = f"wd-{RUN}-missing"
INVALID = "bad name!"


def _produce(topic: str, partition: int = 0, records: bytes = RECORDS) -> Template:
    def template(ctx: Ctx) -> dict:
        ref = topic_ref(ctx, topic) if topic != INVALID else {"name": topic}
        return {"acks": -1, "timeout_ms": 30000, "topic_data": [
            {**ref, "partition_data": [{"index": partition, "records": records}]}]}
    return template


def _legacy_message(value: bytes) -> bytes:
    """One magic-1 message in a message set (offset, size, then CRC over the rest), which Produce v3+ refuses."""
    body = struct.pack(">bbqi", 1, 0, TIMESTAMP, -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _fetch(topic: str, offset: int = 0) -> Template:
    def template(ctx: Ctx) -> dict:
        return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "topics": [{**topic_ref(ctx, topic), "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20, "last_fetched_epoch": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""}
    return template


def _list_offsets(topic: str, timestamp: int) -> Template:
    def template(ctx: Ctx) -> dict:
        return {"replica_id": -1, "isolation_level": 0, "timeout_ms": 30000, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp, "max_num_offsets": 1}]}]}
    return template


def _metadata(topics: list[str] | None, auto_create: bool = False, operations: bool = False) -> Template:
    def template(ctx: Ctx) -> dict:
        listed = None if topics is None else [{"name": topic} for topic in topics]
        return {"topics": listed, "allow_auto_topic_creation": auto_create,
                "include_topic_authorized_operations": operations, "include_cluster_authorized_operations": operations}
    return template


def _group_topic(group: str | Callable[[Ctx], str], topic: str, offset: int = 3) -> Template:
    def template(ctx: Ctx) -> dict:
        group_id = group(ctx) if callable(group) else group
        ref = topic_ref(ctx, topic)
        return {"group_id": group_id, "generation_id_or_member_epoch": ctx.state.get("generation", -1),
                "member_id": ctx.state.get("member", ""), "retention_time_ms": -1,
                "topics": [{**ref, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
    return template


def _offset_fetch(group: str, topics: list[str] | None) -> Template:
    def template(ctx: Ctx) -> dict:
        refs = None if topics is None else [{**topic_ref(ctx, topic), "partition_indexes": [0]} for topic in topics]
        return {"group_id": group, "topics": refs, "require_stable": False,
                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": refs}]}
    return template


def _find_coordinator(key: str, key_type: int = 0) -> Template:
    return lambda ctx: {"key": key, "key_type": key_type, "coordinator_keys": [key]}


def _join(member: str = "", session_timeout: int = 30000) -> Template:
    def template(ctx: Ctx) -> dict:
        return {"group_id": ctx.name, "session_timeout_ms": session_timeout, "rebalance_timeout_ms": 30000,
                "member_id": member, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": CONSUMER_METADATA}]}
    return template


def _member(group: Callable[[Ctx], str], member: str | None = None, generation_delta: int = 0) -> Template:
    """Heartbeat / SyncGroup / LeaveGroup fields for the prepared member (or another member id)."""
    def template(ctx: Ctx) -> dict:
        member_id = ctx.state.get("member", "") if member is None else member
        return {"group_id": group(ctx), "generation_id": ctx.state.get("generation", 1) + generation_delta,
                "member_id": member_id, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": [{"member_id": member_id, "assignment": RANGE_ASSIGNMENT}],
                "members": [{"member_id": member_id, "reason": None}]}
    return template


def _own_group(ctx: Ctx) -> str:
    return ctx.name


def _joined(ctx: Ctx) -> None:
    join(ctx, ctx.name)


def _joined_unsynced(ctx: Ctx) -> None:
    join(ctx, ctx.name, sync=False)


def _create_own_topic(ctx: Ctx) -> None:
    create_topic(ctx, ctx.name)


def _committed_own_group(ctx: Ctx) -> None:
    wait_for_coordinator(ctx, ctx.name)
    commit(ctx, ctx.name, TOPIC, 1)


def _create_topics(name: str | Callable[[Ctx], str], partitions: int = 2, replication: int = 1,
                   validate_only: bool = False) -> Template:
    def template(ctx: Ctx) -> dict:
        topic = name(ctx) if callable(name) else name
        return {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": replication}],
                "timeout_ms": 30000, "validate_only": validate_only}
    return template


def _delete_topics(name: str | Callable[[Ctx], str]) -> Template:
    def template(ctx: Ctx) -> dict:
        topic = name(ctx) if callable(name) else name
        return {"topic_names": [topic], "topics": [{"name": topic}], "timeout_ms": 30000}
    return template


def _delete_records(name: str | Callable[[Ctx], str], offset: int) -> Template:
    def template(ctx: Ctx) -> dict:
        topic = name(ctx) if callable(name) else name
        return {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}],
                "timeout_ms": 30000}
    return template


def _with_records(ctx: Ctx) -> None:
    create_topic(ctx, ctx.name)
    wait_for(lambda: produce(ctx, ctx.name, RECORDS) == 0, "a first write")


def _describe_configs(resource_type: int, name: str, keys: list[str] | None) -> Template:
    def template(ctx: Ctx) -> dict:
        return {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
                "include_synonyms": True, "include_documentation": False}
    return template


def _alter_configs(name: str | Callable[[Ctx], str], key: str, value: str, validate_only: bool = False,
                   resource_type: int = 2) -> Template:
    def template(ctx: Ctx) -> dict:
        topic = name(ctx) if callable(name) else name
        return {"resources": [{"resource_type": resource_type, "resource_name": topic,
                               "configs": [{"name": key, "value": value, "config_operation": 0}]}],
                "validate_only": validate_only}
    return template


def _create_partitions(name: str | Callable[[Ctx], str], count: int, validate_only: bool = False) -> Template:
    def template(ctx: Ctx) -> dict:
        topic = name(ctx) if callable(name) else name
        return {"topics": [{"name": topic, "count": count, "assignments": None}], "timeout_ms": 30000,
                "validate_only": validate_only}
    return template


def _offset_delete(group: str | Callable[[Ctx], str], topic: str) -> Template:
    def template(ctx: Ctx) -> dict:
        group_id = group(ctx) if callable(group) else group
        return {"group_id": group_id, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]}
    return template


def _heartbeat_848(member: str | None, epoch: int | None, group: Callable[[Ctx], str] | None = None) -> Template:
    """A KIP-848 heartbeat: a new member (member None), the prepared one (member "prepared"; epoch None: its own)
    or another member id."""
    def template(ctx: Ctx) -> dict:
        if member == "prepared":
            member_id = ctx.state["member"]
        else:
            member_id = (str(uuid.uuid4()) if ctx.version >= 1 else "") if member is None else member
        member_epoch = ctx.state.get("epoch", 0) if epoch is None else epoch
        return {"group_id": (group or _own_group)(ctx), "member_id": member_id, "member_epoch": member_epoch,
                "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
                "subscribed_topic_names": [TOPIC], "server_assignor": None, "topic_partitions": []}
    return template


def _prepare_848(ctx: Ctx) -> None:
    """A KIP-848 member of the triple's own group (state: member, epoch)."""
    wait_for_coordinator(ctx, ctx.name)
    version = min(ctx.version, 1)
    request = build("ConsumerGroupHeartbeatRequest", version, _heartbeat_848(None, 0)(ctx))
    response = ctx.conn.call(68, version, request)
    assert response.error_code == 0, response
    ctx.state.update(member=response.member_id or request.member_id, epoch=response.member_epoch)


def _groups(*names: str | Callable[[Ctx], str], operations: bool = False) -> Template:
    def template(ctx: Ctx) -> dict:
        listed = [name(ctx) if callable(name) else name for name in names]
        return {"groups": listed, "groups_names": listed, "group_ids": listed,
                "include_authorized_operations": operations}
    return template


def _constant(data: dict) -> Template:
    return lambda ctx: data


# ---- transactions: each case's transactional id is its own name ------------------------------------------

def _initialised(ctx: Ctx) -> None:
    """The case's transactional id initialised once (its coordinator found and loaded first): state pid, epoch."""
    find = build("FindCoordinatorRequest", 1, {"key": ctx.name, "key_type": 1})
    wait_for(lambda: ctx.conn.call(10, 1, find).error_code == 0, "the transaction coordinator")
    init = build("InitProducerIdRequest", 0, {"transactional_id": ctx.name, "transaction_timeout_ms": 60000})
    answers: list = []
    wait_for(lambda: answers.append(ctx.conn.call(22, 0, init)) or answers[-1].error_code not in
             COORDINATOR_NOT_READY, "InitProducerId for a transactional id")
    assert answers[-1].error_code == 0, answers[-1]
    ctx.state.update(pid=answers[-1].producer_id, epoch=answers[-1].producer_epoch)


def _in_transaction(ctx: Ctx) -> None:
    """Initialised, with TOPIC-0 added to an ongoing transaction."""
    _initialised(ctx)
    add = build("AddPartitionsToTxnRequest", 3, {
        "v3_and_below_transactional_id": ctx.name, "v3_and_below_producer_id": ctx.state["pid"],
        "v3_and_below_producer_epoch": ctx.state["epoch"],
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
    response = ctx.conn.call(24, 3, add)
    assert response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0, response


def _fenced(ctx: Ctx) -> None:
    """Initialised twice: the first epoch is fenced (state keeps it)."""
    _initialised(ctx)
    first = dict(ctx.state)
    _initialised(ctx)
    ctx.state.update(first)


def _txn_init(timeout_ms: int = 60000, transactional_id: str | None = None) -> Template:
    return lambda ctx: {"transactional_id": ctx.name if transactional_id is None else transactional_id,
                        "transaction_timeout_ms": timeout_ms, "producer_id": -1, "producer_epoch": -1}


def _add_partitions(topics: dict[str, list[int]], producer_id: int | None = None) -> Template:
    return lambda ctx: {"v3_and_below_transactional_id": ctx.name,
                        "v3_and_below_producer_id": ctx.state.get("pid", 0) if producer_id is None else producer_id,
                        "v3_and_below_producer_epoch": ctx.state.get("epoch", 0),
                        "v3_and_below_topics": [{"name": name, "partitions": indexes}
                                                for name, indexes in topics.items()]}


def _end_txn(committed: bool, producer_id: int | None = None) -> Template:
    return lambda ctx: {"transactional_id": ctx.name, "committed": committed,
                        "producer_id": ctx.state.get("pid", 0) if producer_id is None else producer_id,
                        "producer_epoch": ctx.state.get("epoch", 0)}


def _add_offsets(producer_id: int | None = None) -> Template:
    return lambda ctx: {"transactional_id": ctx.name, "group_id": GROUP,
                        "producer_id": ctx.state.get("pid", 0) if producer_id is None else producer_id,
                        "producer_epoch": ctx.state.get("epoch", 0)}


CLIENT_ADD_PARTITIONS = lambda version: version <= 3  # noqa: E731 - v4+ is broker to broker (ClusterAction)
UNKNOWN_PRODUCER = 987_654_321


def _describe_topic_partitions(topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None):
    return _constant({"topics": [{"name": topic} for topic in topics], "response_partition_limit": limit,
                      "cursor": cursor and {"topic_name": cursor[0], "partition_index": cursor[1]}})


def _node_id(ctx: Ctx) -> int:
    """The broker's own node id, from its Metadata (kbroker and Kafka are configured with different ones)."""
    request = build("MetadataRequest", 12, {"topics": [], "allow_auto_topic_creation": False})
    return ctx.conn.call(3, 12, request).brokers[0].node_id


def _elect(topics: dict[str, list[int]] | None, election_type: int = 0) -> Template:
    return _constant({"election_type": election_type, "timeout_ms": 10000, "topic_partitions": None if topics is None
                      else [{"topic": topic, "partitions": indexes} for topic, indexes in topics.items()]})


def _reassign(topic: str, replicas: Callable[[Ctx], list[int] | None], allow_factor_change: bool = True) -> Template:
    return lambda ctx: {"timeout_ms": 10000, "allow_replication_factor_change": allow_factor_change, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas(ctx)}]}]}


UNKNOWN_GROUP = f"wd-{RUN}-no-group"

# Expected differences, each naming the issue that brings what Kafka's answer needs, or the documented choice.
FOLLOWS_KAFKA_4 = "Kafka 3.9 differs; kbroker follows Kafka 4.4"
APIS_KAFKA_HAS = ("Kafka serves APIs kbroker does not yet (ACLs, SASL, delegation tokens, SCRAM, quotas: "
                  "security, no issue filed yet; KRaft's own APIs: kbroker's cluster runs in ZooKeeper mode; "
                  "Kafka 4's share and streams groups, KIP-932 and KIP-1071: not served, docs/compatibility.md) and "
                  "reports its KRaft feature levels (v3+), which kbroker, not a KRaft broker, has none of "
                  "(docs/compatibility.md)")
CREATED_CONFIGS = {
    "4": "kbroker also lists the three topic configs Kafka 4 removed (kept as Kafka 3.9 keeps them) and reports "
         "min.insync.replicas as a default where Kafka 4's KRaft sets a cluster default: documented choices "
         "(docs/compatibility.md, docs/configuration.md)",
    "3.9": f"{FOLLOWS_KAFKA_4}: Kafka 4.4's topic configs, four of which 3.9 lacks",
}
GROUP_OPERATIONS = ("a group's authorized operations are Kafka 4's, with DESCRIBE_CONFIGS and ALTER_CONFIGS (group "
                    "configs); Kafka 3.9 has no group configs (docs/compatibility.md)")
EPOCHS = f"{FOLLOWS_KAFKA_4}: a new KIP-848 group starts at epoch 1, so a first subscription takes it to 2"
BY_ID = 13  # Fetch v13+ names topics by id only

CASES: dict[str, list[Case]] = {
    "Produce": [
        Case("valid", _produce(TOPIC, 1)),
        Case("unknown_topic", _produce(UNKNOWN)),
        Case("unknown_partition", _produce(TOPIC, 99)),
        Case("empty", _constant({"acks": -1, "timeout_ms": 30000, "topic_data": []})),
        Case("no_batch", _produce(TOPIC, 1, b"")),
        Case("two_batches", _produce(TOPIC, 1, RECORDS + RECORDS)),
        Case("magic_1", _produce(TOPIC, 1, _legacy_message(b"v"))),
        Case("zstd", _produce(TOPIC, 1, build_batch([Record(0, TIMESTAMP, b"k", b"v" * 50)], codec=ZSTD))),
        Case("batch_size_below_minimum", _produce(TOPIC, 1, RECORDS[:8] + struct.pack(">i", 5) + RECORDS[12:])),
        Case("corrupt_second_batch", _produce(TOPIC, 1, RECORDS + RECORDS[:8] + struct.pack(">i", 3))),
        Case("transactional_without_id", _produce(TOPIC, 1, build_batch(
            [Record(0, TIMESTAMP, b"k", b"v")], producer_id=4242, producer_epoch=0, base_sequence=0,
            is_transactional=True))),
    ],
    "Fetch": [
        Case("valid", _fetch(TOPIC)),
        Case("unknown_topic", _fetch(UNKNOWN)),
        Case("offset_out_of_range", _fetch(TOPIC, 1000)),
        Case("empty", _constant({"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                 "session_id": 0, "session_epoch": -1, "topics": []})),
    ],
    "ListOffsets": [
        Case("earliest", _list_offsets(TOPIC, -2)),
        Case("latest", _list_offsets(TOPIC, -1)),
        Case("by_timestamp", _list_offsets(TOPIC, TIMESTAMP + 2)),
        Case("max_timestamp", _list_offsets(TOPIC, -3), versions=lambda version: version >= 7),
        Case("unknown_topic", _list_offsets(UNKNOWN, -1)),
    ],
    "Metadata": [
        Case("valid", _metadata([TOPIC])),
        Case("unknown_topic", _metadata([UNKNOWN]), versions=lambda version: version >= 4),
        Case("invalid_topic_name", _metadata([INVALID])),
        Case("no_topics", _metadata([]), versions=lambda version: version >= 1),
        Case("authorized_operations", _metadata([TOPIC], operations=True), versions=lambda version: version >= 8),
    ],
    "OffsetCommit": [
        Case("valid", _group_topic(GROUP, TOPIC, 3)),
        Case("unknown_topic", _group_topic(_own_group, UNKNOWN), versions=lambda version: version < 10),
        Case("member_of_group", _group_topic(_own_group, TOPIC), prepare=_joined),
        Case("bad_member_id", _group_topic(_own_group, TOPIC),
             prepare=lambda ctx: (join(ctx, ctx.name), ctx.state.update(member="nobody"))),
    ],
    "OffsetFetch": [
        Case("valid", _offset_fetch(GROUP, [TOPIC])),
        Case("all_topics", _offset_fetch(GROUP, None), versions=lambda version: version >= 2),
        Case("unknown_group", _offset_fetch(UNKNOWN_GROUP, [TOPIC])),
    ],
    "FindCoordinator": [
        Case("valid", _find_coordinator(GROUP)),
        Case("transaction", _find_coordinator(f"wd-{RUN}-txn", 1), versions=lambda version: version >= 1),
    ],
    "JoinGroup": [
        Case("new_member", _join()),
        Case("unknown_member_id", _join("nobody")),
        Case("invalid_session_timeout", _join(session_timeout=1)),
    ],
    "Heartbeat": [
        Case("valid", _member(_own_group), prepare=_joined),
        Case("unknown_group", _member(lambda ctx: UNKNOWN_GROUP, "nobody")),
        Case("bad_member_id", _member(_own_group, "nobody"), prepare=_joined),
        Case("stale_generation", _member(_own_group, generation_delta=-1), prepare=_joined),
    ],
    "LeaveGroup": [
        Case("valid", _member(_own_group), prepare=_joined),
        Case("bad_member_id", _member(_own_group, "nobody"), prepare=_joined),
    ],
    "SyncGroup": [
        Case("valid", _member(_own_group), prepare=_joined_unsynced),
        Case("bad_member_id", _member(_own_group, "nobody"), prepare=_joined_unsynced),
        Case("unknown_group", _member(lambda ctx: UNKNOWN_GROUP, "nobody")),
    ],
    "DescribeGroups": [
        Case("empty_group", _groups(GROUP)),
        Case("stable_group", _groups(_own_group), prepare=_joined),
        Case("unknown_group", _groups(UNKNOWN_GROUP)),
        Case("authorized_operations", _groups(GROUP, operations=True), versions=lambda version: version >= 3,
             xfail=GROUP_OPERATIONS, xfail_kafka=("3.9",)),
    ],
    "ListGroups": [
        Case("states_filter", _constant({"states_filter": ["PreparingRebalance"], "types_filter": []}),
             versions=lambda version: version >= 4),
    ],
    "ApiVersions": [
        Case("valid", _constant({"client_software_name": "wire-differential", "client_software_version": "1"}),
             xfail=APIS_KAFKA_HAS),
        Case("invalid_software_name", _constant({"client_software_name": "wire differential",
                                                 "client_software_version": "1"}),
             versions=lambda version: version >= 3),
        Case("another_cluster", _constant({"client_software_name": "wd", "client_software_version": "1",
                                           "cluster_id": "not-this-cluster", "node_id": 1}),
             versions=lambda version: version >= 5),
        Case("cluster_without_node", _constant({"client_software_name": "wd", "client_software_version": "1",
                                                "cluster_id": "not-this-cluster", "node_id": -1}),
             versions=lambda version: version >= 5),
    ],
    "CreateTopics": [
        Case("valid", _create_topics(_own_group),
             xfail=CREATED_CONFIGS, xfail_versions=lambda version: version >= 5),
        Case("validate_only", _create_topics(_own_group, validate_only=True),
             xfail=CREATED_CONFIGS, xfail_versions=lambda version: version >= 5),
        Case("already_exists", _create_topics(TOPIC)),
        Case("invalid_topic_name", _create_topics(INVALID)),
        Case("invalid_partitions", _create_topics(_own_group, partitions=0)),
        Case("invalid_replication_factor", _create_topics(_own_group, replication=3)),
        Case("empty", _constant({"topics": [], "timeout_ms": 30000})),
    ],
    "DeleteTopics": [
        Case("valid", _delete_topics(_own_group), prepare=_create_own_topic),
        Case("unknown_topic", _delete_topics(UNKNOWN)),
        Case("unknown_topic_id", lambda ctx: {"topics": [{"name": None, "topic_id": uuid.UUID(int=1)}],
                                              "timeout_ms": 30000}, versions=lambda version: version >= 6),
    ],
    "DeleteRecords": [
        Case("valid", _delete_records(_own_group, 2), prepare=_with_records),
        Case("offset_out_of_range", _delete_records(_own_group, 100), prepare=_with_records),
        Case("unknown_topic", _delete_records(UNKNOWN, 1)),
    ],
    "InitProducerId": [
        Case("idempotent", _constant({"transactional_id": None, "transaction_timeout_ms": -1,
                                      "producer_id": -1, "producer_epoch": -1})),
        Case("transactional_again", _txn_init(), prepare=_initialised),
        Case("timeout_above_max", _txn_init(900_001), prepare=_initialised),
        Case("empty_transactional_id", _txn_init(transactional_id="")),
    ],
    "AddPartitionsToTxn": [
        Case("valid", _add_partitions({TOPIC: [0, 1]}), prepare=_initialised, versions=CLIENT_ADD_PARTITIONS),
        Case("unknown_topic", _add_partitions({TOPIC: [0], UNKNOWN: [0]}), prepare=_initialised,
             versions=CLIENT_ADD_PARTITIONS),
        Case("internal_topic", _add_partitions({TOPIC: [0], "__consumer_offsets": [0]}), prepare=_initialised,
             versions=CLIENT_ADD_PARTITIONS),
        Case("fenced_epoch", _add_partitions({TOPIC: [0]}), prepare=_fenced, versions=CLIENT_ADD_PARTITIONS),
        Case("unknown_producer_id", _add_partitions({TOPIC: [0]}, UNKNOWN_PRODUCER), prepare=_initialised,
             versions=CLIENT_ADD_PARTITIONS),
    ],
    "AddOffsetsToTxn": [
        Case("valid", _add_offsets(), prepare=_initialised),
        Case("unknown_producer_id", _add_offsets(UNKNOWN_PRODUCER), prepare=_initialised),
    ],
    "EndTxn": [
        Case("commit", _end_txn(True), prepare=_in_transaction),
        Case("abort", _end_txn(False), prepare=_in_transaction),
        Case("no_transaction", _end_txn(True), prepare=_initialised),
        Case("abort_nothing_added", _end_txn(False), prepare=_initialised),  # v5: a new, empty transaction
        Case("fenced_epoch", _end_txn(False), prepare=_fenced),
    ],
    "DescribeTransactions": [
        Case("ongoing", lambda ctx: {"transactional_ids": [ctx.name]}, prepare=_in_transaction),
        Case("unknown", lambda ctx: {"transactional_ids": [f"{ctx.name}-never"]}),
    ],
    "ListTransactions": [
        Case("by_producer_id", lambda ctx: {"state_filters": ["Ongoing", "Sleeping"],
                                            "producer_id_filters": [ctx.state["pid"]], "duration_filter": -1},
             prepare=_in_transaction),
    ],
    "OffsetForLeaderEpoch": [
        Case("valid", lambda ctx: {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        Case("unknown_topic", lambda ctx: {"replica_id": -1, "topics": [{"topic": UNKNOWN, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
    ],
    "DescribeConfigs": [
        Case("topic_keys", _describe_configs(2, TOPIC, ["cleanup.policy", "retention.ms", "segment.bytes"])),
        Case("topic_more_keys", _describe_configs(2, TOPIC, ["max.message.bytes", "flush.ms", "cleanup.policy",
                                                             "segment.bytes", "compression.type"]),
             xfail={"3.9": f"{FOLLOWS_KAFKA_4}: 3.9 lists the keys asked for in the order of a smaller hash "
                           "map than the one it lists all of a topic's configs from"}),
        Case("unknown_topic", _describe_configs(2, UNKNOWN, None)),
        Case("broker_default_unset_key", _describe_configs(4, "", [f"wd.{RUN}.unset"])),
    ],
    "AlterConfigs": [
        Case("valid", _alter_configs(_own_group, "retention.ms", "1000"), prepare=_create_own_topic),
        Case("invalid_value", _alter_configs(TOPIC, "retention.ms", "soon", validate_only=True)),
        Case("unknown_topic", _alter_configs(UNKNOWN, "retention.ms", "1000")),
        Case("broker_default_read_only", _alter_configs("", "log.dirs", "/elsewhere", True, resource_type=4)),
        Case("broker_default_invalid_value", _alter_configs("", "message.max.bytes", "big", True, resource_type=4)),
    ],
    "IncrementalAlterConfigs": [
        Case("valid", _alter_configs(_own_group, "retention.ms", "1000"), prepare=_create_own_topic),
        Case("unknown_config", _alter_configs(TOPIC, "no.such.config", "1", validate_only=True)),
        Case("broker_default_validate_only", _alter_configs("", "message.max.bytes", "2000000", True, resource_type=4)),
        Case("broker_default_per_broker_config",
             _alter_configs("", "listeners", "PLAINTEXT://127.0.0.1:9", True, resource_type=4)),
        Case("unknown_topic", _alter_configs(UNKNOWN, "retention.ms", "1000")),
    ],
    "DescribeLogDirs": [
        Case("valid", _constant({"topics": [{"topic": TOPIC, "partitions": [0]}]})),
        Case("unknown_topic", _constant({"topics": [{"topic": UNKNOWN, "partitions": [0]}]})),
    ],
    "CreatePartitions": [
        Case("valid", _create_partitions(_own_group, 2), prepare=_create_own_topic),
        Case("decrease", _create_partitions(TOPIC, 1, validate_only=True)),
        Case("unknown_topic", _create_partitions(UNKNOWN, 2)),
    ],
    "DeleteGroups": [
        Case("valid", _groups(_own_group), prepare=_committed_own_group),
        Case("non_empty_group", _groups(_own_group), prepare=_joined),
        Case("unknown_group", _groups(UNKNOWN_GROUP)),
    ],
    "OffsetDelete": [
        Case("valid", _offset_delete(_own_group, TOPIC), prepare=_committed_own_group),
        Case("unknown_group", _offset_delete(UNKNOWN_GROUP, TOPIC)),
    ],
    "DescribeCluster": [
        Case("valid", _constant({"include_cluster_authorized_operations": False, "endpoint_type": 1})),
        Case("authorized_operations", _constant({"include_cluster_authorized_operations": True, "endpoint_type": 1})),
    ],
    "DescribeProducers": [
        Case("valid", _constant({"topics": [{"name": TOPIC, "partition_indexes": [0]}]})),
        Case("unknown_topic", _constant({"topics": [{"name": UNKNOWN, "partition_indexes": [0]}]})),
        Case("unknown_partition", _constant({"topics": [{"name": TOPIC, "partition_indexes": [7]}]})),
    ],
    "DescribeTopicPartitions": [
        Case("known_and_unknown", _describe_topic_partitions([UNKNOWN, TOPIC])),
        Case("invalid_name", _describe_topic_partitions([INVALID])),
        Case("partition_limit", _describe_topic_partitions([TOPIC], limit=2)),
        Case("from_cursor", _describe_topic_partitions([TOPIC], cursor=(TOPIC, 1))),
        Case("cursor_not_requested", _describe_topic_partitions([UNKNOWN], cursor=(TOPIC, 0))),
    ],
    "ElectLeaders": [
        Case("preferred_not_needed", _elect({TOPIC: [0, 1]})),
        Case("unclean_not_needed", _elect({TOPIC: [2]}, 1), versions=lambda version: version >= 1),
        Case("unknown_partition", _elect({TOPIC: [9], UNKNOWN: [0]})),
    ],
    "AlterPartitionReassignments": [
        Case("to_its_only_broker", _reassign(TOPIC, lambda ctx: [_node_id(ctx)])),
        Case("cancel_when_none_in_progress", _reassign(TOPIC, lambda ctx: None)),
        Case("empty_replica_list", _reassign(TOPIC, lambda ctx: [])),
        Case("duplicate_replicas", _reassign(TOPIC, lambda ctx: [_node_id(ctx), _node_id(ctx)])),
        Case("unregistered_broker", _reassign(TOPIC, lambda ctx: [_node_id(ctx) + 100])),
        Case("unknown_topic", _reassign(UNKNOWN, lambda ctx: [_node_id(ctx)])),
        Case("factor_change_with_an_unregistered_broker",
             _reassign(TOPIC, lambda ctx: [_node_id(ctx), _node_id(ctx) + 100], False),
             versions=lambda version: version >= 1),
    ],
    "ListPartitionReassignments": [
        Case("all", _constant({"timeout_ms": 10000, "topics": None})),
        Case("one_partition", _constant({"timeout_ms": 10000, "topics": [{"name": TOPIC, "partition_indexes": [0]}]})),
    ],
    # Listings of topics and brokers are not compared: the topics depend on which cases ran before, the node
    # ids differ (compat-tests/test_list_config_resources.py checks them on each broker).
    "ListConfigResources": [
        Case("client_metrics", _constant({"resource_types": [16]})),
        Case("groups_with_configs", _constant({"resource_types": [32]}), versions=lambda version: version >= 1),
        Case("not_a_config_resource_type", _constant({"resource_types": [2, 64]}),
             versions=lambda version: version >= 1),
    ],
    "ConsumerGroupHeartbeat": [
        Case("join", _heartbeat_848(None, 0), xfail=EPOCHS, xfail_kafka=("3.9",)),
        Case("member_heartbeat", _heartbeat_848("prepared", None), prepare=_prepare_848, xfail=EPOCHS,
             xfail_kafka=("3.9",)),
        Case("bad_member_id", _heartbeat_848("nobody-at-all-xxxxxxxx", 1), prepare=_prepare_848),
        Case("fenced_epoch", _heartbeat_848("prepared", 7), prepare=_prepare_848),
        Case("unknown_group", _heartbeat_848("nobody-at-all-xxxxxxxx", 5, lambda ctx: UNKNOWN_GROUP),
             xfail="a documented choice (docs/compatibility.md, KIP-848): UNKNOWN_MEMBER_ID so members rejoin, where "
                   "Kafka answers GROUP_ID_NOT_FOUND"),
    ],
    "ConsumerGroupDescribe": [
        Case("valid", _groups(_own_group), prepare=_prepare_848, xfail=EPOCHS, xfail_kafka=("3.9",)),
        Case("unknown_group", _groups(UNKNOWN_GROUP), xfail_kafka=("3.9",),
             xfail=f"{FOLLOWS_KAFKA_4}: an error_message for the unknown group, which 3.9 leaves null"),
    ],
}


def api_key(name: str) -> int:
    return next(key for key, api in messages.apis().items() if api.name == name)


def served() -> dict[int, tuple[int, int]]:
    return {key: (handler.min_version, handler.max_version) for key, handler in HANDLERS.items()}


def common_versions(kafka: dict[int, tuple[int, int]]) -> dict[int, range]:
    """Per served API key, the versions both kbroker and this Kafka accept."""
    found = {}
    for key, (low, high) in served().items():
        if key in kafka:
            found[key] = range(max(low, kafka[key][0]), min(high, kafka[key][1]) + 1)
    return found


def request_for(case: Case, api: str, ctx: Ctx) -> Any:
    return build(messages.api(api_key(api)).request.name, ctx.version, case.template(ctx))


def unsupported_version(kafka: dict[int, tuple[int, int]], key: int) -> int:
    """A version neither broker accepts: one past the newer of the two."""
    return max(served()[key][1], kafka[key][1]) + 1


# Kafka's ApiVersions answer for the keys kbroker serves (min, max), by --kafka-version: the test ids are
# known at collection, before any broker starts; test_kafka_version_table_is_current keeps them honest.
KAFKA_VERSIONS: dict[str, dict[int, tuple[int, int]]] = {
    "4": {0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4),
          13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 18: (0, 5), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5),
          23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 6), 32: (1, 4), 33: (0, 2), 34: (1, 2),
          35: (1, 5), 37: (0, 3), 42: (0, 3), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 60: (0, 2),
          61: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1), 69: (0, 1), 74: (0, 1), 75: (0, 0)},
    "3.9": {0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4),
            13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5),
            23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4), 32: (0, 4), 33: (0, 2), 34: (0, 2),
            35: (0, 4), 37: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 60: (0, 1),
            61: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 0), 69: (0, 0), 74: (0, 0), 75: (0, 0)},
}


def triples(kafka_version: str) -> list[tuple[str, int, Case]]:
    """Every (api, version, case) the differential compares against this Kafka line."""
    found = []
    for key, versions in common_versions(KAFKA_VERSIONS[kafka_version]).items():
        api = messages.api(key).name
        for case in CASES.get(api, []):
            found += [(api, version, case) for version in versions if case.versions(version)]
    return found


def kafka_table(conn: Connection) -> dict[int, tuple[int, int]]:
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in api_versions(conn)
            if entry.api_key in HANDLERS}
