"""A stand-in broker or controller that real Kafka 3.9 (ZooKeeper mode) talks to, built only on `wire`.

Kafka picks its peers from ZooKeeper: a broker is whatever `/brokers/ids/<id>` says, the controller whatever
`/controller` names. `WirePeer` is a socket server the tests register there; every request Kafka sends it is
decoded with our codecs (so a wrong spec fails the decode or the field checks) and answered well enough that
Kafka carries on. `WireClient` is the other direction: the peer's own requests to Kafka, answers decoded.
The raw frames are kept too, so tests can pin bytes real Kafka produced.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from wire import headers, messages
from wire.codegen import Message

LISTENER = "PLAINTEXT"
PLAINTEXT = 0  # security protocol id in UpdateMetadata endpoints
REGISTRATION_VERSION = 5  # what Kafka 3.9 writes in /brokers/ids/<id>
CONTROLLER_ZNODE_VERSION = 2  # /controller with kraftControllerEpoch (KIP-866), as Kafka 3.9 writes it
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Frame:
    """One request as received (or one response as read): decoded, and the bytes it came from."""

    api_key: int
    version: int
    header: Message | None
    body: Message
    raw_body: bytes  # the message body alone, without the header

    @property
    def name(self) -> str:
        return messages.api(self.api_key).name


Answer = Callable[[Frame], Message]


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    return _read_exactly(sock, _SIZE.unpack(_read_exactly(sock, 4))[0])


def decode_request(frame: bytes) -> tuple[Frame, int]:
    """A request frame as a Frame, and its correlation id; the whole frame must be consumed."""
    header, at = headers.decode_request_header(frame)
    api = messages.api(header.request_api_key)
    body, end = messages.decode(api.request.name, header.request_api_version, frame, at)
    if end != len(frame):
        raise ValueError(f"{api.name} v{header.request_api_version}: {len(frame) - end} bytes left undecoded")
    return Frame(api.key, header.request_api_version, header, body, bytes(frame[at:])), header.correlation_id


class WirePeer:
    """A threaded socket server on 127.0.0.1 that decodes, records and answers the inter-broker requests it has
    answers for, and relays anything else (clients that found the peer in metadata) to `forward_to`."""

    def __init__(self, answers: dict[int, Answer] | None = None,
                 forward_to: tuple[str, int] | None = None) -> None:
        self.answers: dict[int, Answer] = {**DEFAULT_ANSWERS, **(answers or {})}
        self.received: list[Frame] = []
        self.errors: list[str] = []
        self.forward_to = forward_to
        self.forwarded: list[tuple[int, int]] = []  # (api key, version) of client requests relayed to Kafka
        self._changed = threading.Condition()
        peer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                peer._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.allow_reuse_address = True
        self._server.server_bind()
        self._server.server_activate()
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="wire-peer", daemon=True)

    def __enter__(self) -> WirePeer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, sock: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            while True:
                try:
                    raw = read_frame(sock)
                except (ConnectionError, OSError):
                    return
                api_key, api_version = headers.peek_api(raw)
                if api_key in self.answers:
                    if not self._answer(sock, raw):
                        return
                    continue
                # Not an inter-broker request: a client that found the peer in metadata. Relay it to the real
                # broker so the client carries on; with nowhere to relay, drop the connection.
                self.forwarded.append((api_key, api_version))
                if self.forward_to is None:
                    return
                upstream = upstream or socket.create_connection(self.forward_to, timeout=30)
                upstream.sendall(_SIZE.pack(len(raw)) + raw)
                reply = read_frame(upstream)
                sock.sendall(_SIZE.pack(len(reply)) + reply)
        except OSError:
            return
        finally:
            if upstream is not None:
                upstream.close()

    def _answer(self, sock: socket.socket, raw: bytes) -> bool:
        """Decode, record and answer one inter-broker request; False when the connection must close."""
        api_key, api_version = headers.peek_api(raw)
        answer = self.answers[api_key]
        try:
            frame, correlation_id = decode_request(raw)
        except Exception as error:  # a spec that does not fit Kafka's bytes: record it, drop the connection
            self._note_error(f"cannot decode request {(api_key, api_version)}: {error!r}")
            return False
        self._record(frame)
        out = headers.encode_response_header(correlation_id, frame.api_key, frame.version)
        messages.encode(answer(frame), frame.version, out)
        sock.sendall(_SIZE.pack(len(out)) + bytes(out))
        return True

    def _record(self, frame: Frame) -> None:
        with self._changed:
            self.received.append(frame)
            self._changed.notify_all()

    def _note_error(self, text: str) -> None:
        with self._changed:
            self.errors.append(text)
            self._changed.notify_all()

    def wait_for(self, api_key: int, match: Callable[[Message], bool] = lambda _: True,
                 timeout: float = 60) -> Frame:
        """The first request of this API (among those received so far or later) that `match` accepts."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if self.errors:
                    raise AssertionError(f"the peer could not handle what Kafka sent: {self.errors}")
                for frame in self.received:
                    if frame.api_key == api_key and match(frame.body):
                        return frame
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = sorted({(f.name, f.version) for f in self.received})
                    raise AssertionError(f"no matching {messages.api(api_key).name} within {timeout} s; got {seen}")
                self._changed.wait(left)

    def all_of(self, api_key: int) -> list[Frame]:
        with self._changed:
            return [frame for frame in self.received if frame.api_key == api_key]


class WireClient:
    """Blocking requests from the peer to a Kafka broker, decoded with `wire`."""

    def __init__(self, host: str, port: int, client_id: str = "wire-peer", timeout: float = 60) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, request: Message) -> Frame:
        self.correlation_id += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self.correlation_id, client_id=self.client_id)
        out = headers.encode_request_header(header)
        messages.encode(request, version, out)
        self.sock.sendall(_SIZE.pack(len(out)) + bytes(out))
        raw = read_frame(self.sock)
        response_header, at = headers.decode_response_header(raw, api_key, version)
        if response_header.correlation_id != self.correlation_id:
            raise AssertionError(f"correlation id {response_header.correlation_id} != {self.correlation_id}")
        name = messages.api(api_key).response.name
        body, end = messages.decode(name, version, raw, at)
        if end != len(raw):
            raise ValueError(f"{name} v{version}: {len(raw) - end} bytes left undecoded")
        return Frame(api_key, version, None, body, bytes(raw[at:]))


def init_producer_id(client: WireClient) -> int:
    """The producer id an idempotent producer's InitProducerId v4 gets (asserting no error)."""
    answer = client.call(22, 4, messages.InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1)).body
    assert answer.error_code == 0, answer
    return answer.producer_id


def create_topic(client: WireClient, name: str, partitions: int, replication_factor: int,
                 timeout_ms: int = 30_000) -> Message:
    """CreateTopics v7 for one topic; the topic's result."""
    R = messages.CreateTopicsRequest
    request = R(topics=[R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                         assignments=[], configs=[])], timeout_ms=timeout_ms, validate_only=False)
    return client.call(19, 7, request).body.topics[0]


def delete_topic(client: WireClient, name: str, timeout_ms: int = 30_000) -> Message:
    """DeleteTopics v5 (by name) for one topic; the topic's result."""
    request = messages.DeleteTopicsRequest(topics=[], topic_names=[name], timeout_ms=timeout_ms)
    return client.call(20, 5, request).body.responses[0]


def connect_when_listening(host: str, port: int, timeout: float = 60) -> WireClient:
    """A broker opens its port a little after it registers in ZooKeeper: retry until it does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return WireClient(host, port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# ---------------------------------------------------------------------------------------------------------
# ZooKeeper: the znodes that make Kafka see the peer, in Kafka 3.9's JSON
# ---------------------------------------------------------------------------------------------------------

def _now_ms() -> str:
    return str(int(time.time() * 1000))


def register_broker(zk: KazooClient, broker_id: int, port: int, host: str = "127.0.0.1") -> int:
    """Create the ephemeral /brokers/ids/<id> as a Kafka 3.9 broker does; returns the broker epoch (czxid)."""
    registration = {
        "features": {}, "listener_security_protocol_map": {LISTENER: LISTENER},
        "endpoints": [f"{LISTENER}://{host}:{port}"], "jmx_port": -1, "port": port, "host": host,
        "version": REGISTRATION_VERSION, "timestamp": _now_ms(),
    }
    path = f"/brokers/ids/{broker_id}"
    zk.create(path, json.dumps(registration).encode(), ephemeral=True, makepath=True)
    return zk.exists(path).czxid


def broker_epoch(zk: KazooClient, broker_id: int) -> int:
    """A registered broker's epoch: the creation zxid of its registration znode."""
    stat = zk.exists(f"/brokers/ids/{broker_id}")
    if stat is None:
        raise LookupError(f"broker {broker_id} is not registered")
    return stat.czxid


def broker_endpoint(zk: KazooClient, broker_id: int) -> tuple[str, int]:
    data, _ = zk.get(f"/brokers/ids/{broker_id}")
    registration = json.loads(data)
    return registration["host"], registration["port"]


def take_controller(zk: KazooClient, broker_id: int, epoch: int = 1) -> None:
    """Become the controller before any Kafka broker can: /controller_epoch, then the ephemeral /controller."""
    zk.create("/controller_epoch", str(epoch).encode(), makepath=True)
    controller = {"version": CONTROLLER_ZNODE_VERSION, "brokerid": broker_id, "timestamp": _now_ms(),
                  "kraftControllerEpoch": -1}
    zk.create("/controller", json.dumps(controller).encode(), ephemeral=True)


# ---------------------------------------------------------------------------------------------------------
# Answers: what a broker (or controller) says back, well-formed and error-free
# ---------------------------------------------------------------------------------------------------------

def answer_update_metadata(frame: Frame) -> Message:
    return messages.UpdateMetadataResponse(error_code=0)


def answer_leader_and_isr(frame: Frame) -> Message:
    response = messages.LeaderAndIsrResponse
    request = frame.body
    if frame.version >= 5:
        topics = [response.LeaderAndIsrTopicError(
            topic_id=topic.topic_id,
            partition_errors=[response.LeaderAndIsrPartitionError(partition_index=p.partition_index, error_code=0)
                              for p in topic.partition_states])
            for topic in request.topic_states]
        return response(error_code=0, topics=topics)
    states = request.ungrouped_partition_states if frame.version < 2 else [
        p for topic in request.topic_states for p in topic.partition_states]
    names = [p.topic_name for p in states] if frame.version < 2 else [
        topic.topic_name for topic in request.topic_states for _ in topic.partition_states]
    return response(error_code=0, partition_errors=[
        response.LeaderAndIsrPartitionError(topic_name=name, partition_index=p.partition_index, error_code=0)
        for name, p in zip(names, states, strict=True)])


def stop_replica_partitions(frame: Frame) -> list[tuple[str, int]]:
    """(topic, partition) of every replica a StopReplica request stops, whatever its version."""
    request = frame.body
    if frame.version == 0:
        return [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions]
    if frame.version <= 2:
        return [(t.name, index) for t in request.topics for index in t.partition_indexes]
    return [(t.topic_name, p.partition_index) for t in request.topic_states for p in t.partition_states]


def answer_stop_replica(frame: Frame) -> Message:
    response = messages.StopReplicaResponse
    return response(error_code=0, partition_errors=[
        response.StopReplicaPartitionError(topic_name=topic, partition_index=index, error_code=0)
        for topic, index in stop_replica_partitions(frame)])


def answer_fetch(frame: Frame) -> Message:
    """An empty log at offset 0 for every partition asked, after the follower's wait (no busy loop)."""
    request = frame.body
    time.sleep(min(request.max_wait_ms, 500) / 1000)
    response = messages.FetchResponse
    topics = [response.FetchableTopicResponse(
        topic=topic.topic, topic_id=topic.topic_id,
        partitions=[response.PartitionData(partition_index=p.partition, error_code=0, high_watermark=0,
                                           last_stable_offset=0, log_start_offset=0, records=b"")
                    for p in topic.partitions])
        for topic in request.topics]
    return response(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def answer_offset_for_leader_epoch(frame: Frame) -> Message:
    response = messages.OffsetForLeaderEpochResponse
    return response(throttle_time_ms=0, topics=[response.OffsetForLeaderTopicResult(
        topic=topic.topic,
        partitions=[response.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=p.leader_epoch,
                                            end_offset=0) for p in topic.partitions])
        for topic in frame.body.topics])


DEFAULT_ANSWERS: dict[int, Answer] = {
    1: answer_fetch,
    4: answer_leader_and_isr,
    5: answer_stop_replica,
    6: answer_update_metadata,
    23: answer_offset_for_leader_epoch,
}


CAPTURE_ENV = "KBROKER_WIRE_CAPTURE"


def capture(frame: Frame, kind: str) -> None:
    """With KBROKER_WIRE_CAPTURE set to a directory, write this frame's body there as `<Message>-v<N>.hex`:
    how the real-Kafka bytes pinned in tests/wire/test_inter_broker_messages.py were taken."""
    directory = os.environ.get(CAPTURE_ENV)
    if not directory:
        return
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    name = getattr(messages.api(frame.api_key), kind).name
    (target / f"{name}-v{frame.version}.hex").write_text(frame.raw_body.hex() + "\n")
