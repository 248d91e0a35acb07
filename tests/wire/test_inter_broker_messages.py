"""The inter-broker messages of a ZooKeeper-mode cluster (issue 14): LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6), ControlledShutdown (7), AlterPartition (56), AllocateProducerIds (67).

kafka-python 3.0.12 carries none of them (Kafka 4 dropped the first four), so wire/specs has our own. Three
independent checks hold them to Kafka 3.9:

* the spec files against the JSON specs inside Kafka 3.9's own kafka-clients jar, field by field at every
  version (names, types, version ranges, nullability, tags, defaults; only the prose may differ);
* bytes real Kafka 3.9 sent or answered in tests/cluster/test_*_requests_from_kafka.py, pinned below: each
  decodes to the values Kafka meant and encodes back to the same bytes;
* kio, a codec generated separately from Kafka's specs, on the same bytes where it has the message (it follows
  Kafka 4, so only AllocateProducerIds and AlterPartition v2+).

Plus a round trip of generated values at every version, for the versions no real Kafka 3.9 sends.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import uuid
import zipfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from wire import messages
from wire.schema import all_specs

from spec_strategies import message_strategy, plain

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "wire" / "specs"

# API key -> (validVersions, flexibleVersions), as Kafka 3.9 declares them
KAFKA_39_RANGES = {
    "LeaderAndIsr": (4, "0-7", "4+"),
    "StopReplica": (5, "0-4", "2+"),
    "UpdateMetadata": (6, "0-8", "6+"),
    "ControlledShutdown": (7, "0-3", "3+"),
    "AlterPartition": (56, "0-3", "0+"),
    "AllocateProducerIds": (67, "0", "0+"),
}
NAMES = [f"{api}{kind}" for api in KAFKA_39_RANGES for kind in ("Request", "Response")]
# the versions Kafka 3.9 itself sends between brokers at its default inter.broker.protocol.version
VERSIONS_KAFKA_SENDS = {"LeaderAndIsr": 7, "StopReplica": 4, "UpdateMetadata": 8, "ControlledShutdown": 3,
                        "AlterPartition": 3, "AllocateProducerIds": 0}

# Message bodies (headers stripped) real Kafka 3.9 sent: requests from its controller to the test's peer broker
# and from its broker to the test's peer controller, and their answers the other way. Refresh with
# KBROKER_WIRE_CAPTURE=<dir> pytest tests/cluster/test_controller_requests_from_kafka.py
# tests/cluster/test_broker_requests_from_kafka.py (see kafka_wire_peer.capture).
KAFKA_BYTES = {
    "AllocateProducerIdsRequest-v0": (
        "00000001000000000000002700"
    ),
    "AllocateProducerIdsResponse-v0": (
        "0000000000000000000000000000000003e800"
    ),
    "AlterPartitionRequest-v3": (
        "00000001000000000000002702206c2ff11f0d4a37b52a8951a9e061bf0200000000000000050200000001ffffffffff"
        "ffffff000000000007000000"
    ),
    "AlterPartitionResponse-v3": (
        "00000000000002ff97a2b598b148fd97c231ef061e1ace02000000000000000000020000000002000000020000000001"
        "000000"
    ),
    "ControlledShutdownRequest-v3": (
        "00000001000000000000002700"
    ),
    "ControlledShutdownResponse-v3": (
        "00000207736872756e6b000000000000"
    ),
    "LeaderAndIsrRequest-v7": (
        "000000010000000001000000000000000a0002066d697865644d89182594024c33a025e0775183764e03000000010000"
        "000100000001000000000300000001000000020000000003000000010000000201010100000000000000000001000000"
        "02000000000300000002000000010000000003000000020000000101010100000003000000020a3132372e302e302e31"
        "0000907f00000000010a3132372e302e302e310000cbdd0000"
    ),
    "LeaderAndIsrResponse-v7": (
        "000003069fe2b2cd1247b6a31b19d877afc330020000000000000000206c2ff11f0d4a37b52a8951a9e061bf02000000"
        "000000000000"
    ),
    "StopReplicaRequest-v4": (
        "000000010000000001000000000000000a0207646f6f6d65640200000000fffffffe01000000"
    ),
    "StopReplicaResponse-v4": (
        "00000205676f6e650000000000000000"
    ),
    "UpdateMetadataRequest-v8": (
        "000000010000000001000000000000000a02066d697865644d89182594024c33a025e0775183764e0300000001000000"
        "010000000100000000030000000100000002000000000300000001000000020100000000000000000100000002000000"
        "00030000000200000001000000000300000002000000010100000300000001020000cbdd0a3132372e302e302e310a50"
        "4c41494e54455854000000000000000002020000907f0a3132372e302e302e310a504c41494e54455854000000000000"
    ),
    "UpdateMetadataResponse-v8": (
        "000000"
    ),
}

MIXED = uuid.UUID("4d891825-9402-4c33-a025-e0775183764e")   # the controller test's topic with both brokers
LED = uuid.UUID("206c2ff1-1f0d-4a37-b52a-8951a9e061bf")     # the broker test's topic that broker 1 leads
GONE = uuid.UUID("069fe2b2-cd12-47b6-a31b-19d877afc330")
SHRUNK = uuid.UUID("ff97a2b5-98b1-48fd-97c2-31ef061e1ace")
KAFKA_PORT, PEER_PORT = 52189, 36991                        # the controller test's two brokers


def _partition(index: int, replicas: list[int], **more) -> dict:
    return {"partition_index": index, "controller_epoch": 1, "leader": replicas[0], "leader_epoch": 0,
            "isr": replicas, "replicas": replicas, **more}


def _endpoint(broker_id: int, port: int) -> dict:
    return {"id": broker_id, "endpoints": [{"port": port, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                            "security_protocol": 0}], "rack": None}


# What each of Kafka's frames says, every field of the version.
KAFKA_MEANT = {
    "AllocateProducerIdsRequest-v0": {"broker_id": 1, "broker_epoch": 39},
    "AllocateProducerIdsResponse-v0": {"throttle_time_ms": 0, "error_code": 0, "producer_id_start": 0,
                                       "producer_id_len": 1000},
    "AlterPartitionRequest-v3": {"broker_id": 1, "broker_epoch": 39, "topics": [{"topic_id": LED, "partitions": [
        {"partition_index": 0, "leader_epoch": 5, "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": -1}],
         "leader_recovery_state": 0, "partition_epoch": 7}]}]},
    "AlterPartitionResponse-v3": {"throttle_time_ms": 0, "error_code": 0, "topics": [{
        "topic_id": SHRUNK, "partitions": [{"partition_index": 0, "error_code": 0, "leader_id": 2,
                                            "leader_epoch": 0, "isr": [2], "leader_recovery_state": 0,
                                            "partition_epoch": 1}]}]},
    "ControlledShutdownRequest-v3": {"broker_id": 1, "broker_epoch": 39},
    "ControlledShutdownResponse-v3": {"error_code": 0, "remaining_partitions": [
        {"topic_name": "shrunk", "partition_index": 0}]},
    "LeaderAndIsrRequest-v7": {
        "controller_id": 1, "is_k_raft_controller": False, "controller_epoch": 1, "broker_epoch": 10, "type": 0,
        "topic_states": [{"topic_name": "mixed", "topic_id": MIXED, "partition_states": [
            _partition(1, [1, 2], partition_epoch=0, adding_replicas=[], removing_replicas=[], is_new=True,
                       leader_recovery_state=0),
            _partition(0, [2, 1], partition_epoch=0, adding_replicas=[], removing_replicas=[], is_new=True,
                       leader_recovery_state=0)]}],
        "live_leaders": [{"broker_id": 2, "host_name": "127.0.0.1", "port": PEER_PORT},
                         {"broker_id": 1, "host_name": "127.0.0.1", "port": KAFKA_PORT}]},
    "LeaderAndIsrResponse-v7": {"error_code": 0, "topics": [
        {"topic_id": topic_id, "partition_errors": [{"partition_index": 0, "error_code": 0}]}
        for topic_id in (GONE, LED)]},
    "StopReplicaRequest-v4": {
        "controller_id": 1, "is_k_raft_controller": False, "controller_epoch": 1, "broker_epoch": 10,
        "topic_states": [{"topic_name": "doomed", "partition_states": [
            {"partition_index": 0, "leader_epoch": -2, "delete_partition": True}]}]},
    "StopReplicaResponse-v4": {"error_code": 0, "partition_errors": [
        {"topic_name": "gone", "partition_index": 0, "error_code": 0}]},
    "UpdateMetadataRequest-v8": {
        "controller_id": 1, "is_k_raft_controller": False, "type": 0, "controller_epoch": 1, "broker_epoch": 10,
        "topic_states": [{"topic_name": "mixed", "topic_id": MIXED, "partition_states": [
            _partition(1, [1, 2], zk_version=0, offline_replicas=[]),
            _partition(0, [2, 1], zk_version=0, offline_replicas=[])]}],
        "live_brokers": [_endpoint(1, KAFKA_PORT), _endpoint(2, PEER_PORT)]},
    "UpdateMetadataResponse-v8": {"error_code": 0},
}
KIO_MESSAGES = {"AllocateProducerIds": "allocate_producer_ids", "AlterPartition": "alter_partition"}


def _split(key: str) -> tuple[str, int]:
    name, version = key.rsplit("-v", 1)
    return name, int(version)


# ---------------------------------------------------------------------------------------------------------
# The spec files against Kafka 3.9's
# ---------------------------------------------------------------------------------------------------------

_COMMENTS = re.compile(r"(?m)^\s*//.*\n?")
_PROSE = frozenset({"about"})


def _kafka_39_specs_jar() -> Path:
    sys.path.insert(0, str(ROOT / "compat-tests"))
    import maven_jars

    try:
        jars = maven_jars.jars("clients-3.9")
    except maven_jars.JarsUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Kafka 3.9's client jar is needed to check the specs: {error}", pytrace=False)
        pytest.skip(f"no Kafka 3.9 client jar: {error}")
    return next(jar for jar in jars if jar.name.startswith("kafka-clients-"))


@cache
def _kafka_spec(name: str) -> dict:
    with zipfile.ZipFile(_kafka_39_specs_jar()) as jar:
        return json.loads(_COMMENTS.sub("", jar.read(f"common/message/{name}.json").decode()))


def _structure(node):
    """A spec without its prose, field names with a capital first letter (Kafka spells the KRaft flag
    `isKRaftController`; the generated accessors, and ours, do not care)."""
    if isinstance(node, list):
        return [_structure(item) for item in node]
    if not isinstance(node, dict):
        return node
    shaped = {key: _structure(value) for key, value in node.items() if key not in _PROSE}
    if isinstance(shaped.get("name"), str) and "type" in shaped:
        shaped["name"] = shaped["name"][0].upper() + shaped["name"][1:]
    return shaped


@pytest.mark.parametrize("name", NAMES)
def test_spec_matches_kafka_39_field_for_field(name: str) -> None:
    ours = json.loads((SPEC_DIR / f"{name}.json").read_text())
    assert _structure(ours) == _structure(_kafka_spec(name))


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_documented_in_our_words(name: str) -> None:
    """Every field has an `about`, and none is Kafka's text: our specs are written, not copied."""
    ours, theirs = json.loads((SPEC_DIR / f"{name}.json").read_text()), _kafka_spec(name)

    def abouts(node) -> list[str]:
        if isinstance(node, list):
            return [text for item in node for text in abouts(item)]
        if not isinstance(node, dict):
            return []
        own = [node["about"]] if "about" in node else []
        return own + [text for value in node.values() for text in abouts(value)]

    def fields(node) -> int:
        if isinstance(node, list):
            return sum(fields(item) for item in node)
        if not isinstance(node, dict):
            return 0
        return ("type" in node and "versions" in node) + sum(fields(value) for value in node.values())

    assert ours.get("about")
    assert len(abouts(ours)) - 1 >= fields(ours)  # the message's own about, then one per field
    assert not set(abouts(ours)) & set(abouts(theirs))


@pytest.mark.parametrize("api", list(KAFKA_39_RANGES))
def test_api_has_kafka_39_versions(api: str) -> None:
    key, valid, flexible = KAFKA_39_RANGES[api]
    found = messages.api(key)
    assert found.name == api
    assert f"{found.versions.low}-{found.versions.high}".removesuffix("-0") == valid
    for spec in (found.request, found.response):
        assert spec.flexible_versions.low == int(flexible.removesuffix("+"))


# ---------------------------------------------------------------------------------------------------------
# Real Kafka's bytes
# ---------------------------------------------------------------------------------------------------------

def test_every_message_has_kafka_bytes_at_the_version_kafka_sends() -> None:
    assert set(KAFKA_BYTES) == set(KAFKA_MEANT) == {
        f"{api}{kind}-v{version}" for api, version in VERSIONS_KAFKA_SENDS.items() for kind in ("Request", "Response")}


@pytest.mark.parametrize("key", sorted(KAFKA_BYTES))
def test_kafka_bytes_decode_to_what_kafka_meant(key: str) -> None:
    name, version = _split(key)
    data = bytes.fromhex(KAFKA_BYTES[key])
    value, end = messages.decode(name, version, data)
    assert end == len(data)
    assert plain(value, all_specs()[name].fields, version) == KAFKA_MEANT[key]


@pytest.mark.parametrize("key", sorted(KAFKA_BYTES))
def test_kafka_bytes_encode_back_identically(key: str) -> None:
    name, version = _split(key)
    data = bytes.fromhex(KAFKA_BYTES[key])
    value, _ = messages.decode(name, version, data)
    assert bytes(messages.encode(value, version)) == data


def _kio_class(name: str, version: int) -> type:
    api, kind = re.fullmatch(r"(.*)(Request|Response)", name).groups()
    module = __import__(f"kio.schema.{KIO_MESSAGES[api]}.v{version}.{kind.lower()}", fromlist=[name])
    return getattr(module, name)


@pytest.mark.parametrize("key", sorted(k for k in KAFKA_BYTES if _split(k)[0].startswith(tuple(KIO_MESSAGES))))
def test_kio_reads_kafka_bytes_as_we_do(key: str) -> None:
    name, version = _split(key)
    data = bytes.fromhex(KAFKA_BYTES[key])
    theirs, size = entity_reader(_kio_class(name, version))(data, 0)
    assert size == len(data)
    buffer = io.BytesIO()
    entity_writer(type(theirs))(buffer, theirs)
    assert buffer.getvalue() == data
    ours, _ = messages.decode(name, version, data)
    if name == "AlterPartitionRequest":  # a field that names a broker in both codecs
        assert theirs.topics[0].partitions[0].new_isr_with_epochs[0].broker_id == \
            ours.topics[0].partitions[0].new_isr_with_epochs[0].broker_id
    assert bytes(messages.encode(ours, version)) == buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------
# Round trips at every version
# ---------------------------------------------------------------------------------------------------------

ROUND_TRIPS = [(name, version) for name in NAMES
               for version in range(all_specs()[name].valid_versions.low, all_specs()[name].valid_versions.high + 1)]


@pytest.mark.parametrize(("name", "version"), ROUND_TRIPS)
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_at_every_version(name: str, version: int, data: st.DataObject) -> None:
    value = data.draw(message_strategy(name, version))
    encoded = bytes(messages.encode(value, version))
    decoded, end = messages.decode(name, version, encoded)
    assert end == len(encoded)
    fields = all_specs()[name].fields
    assert plain(decoded, fields, version) == plain(value, fields, version)
    assert bytes(messages.encode(decoded, version)) == encoded


def test_round_trips_cover_every_version_kafka_39_defines() -> None:
    assert len(ROUND_TRIPS) == 2 * (8 + 5 + 9 + 4 + 4 + 1)
