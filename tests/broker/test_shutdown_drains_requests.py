"""A clean shutdown answers every request a connection had fully received, in order, before it
closes the connection (reading stops at once; nothing arriving later is taken up).

An in-process broker on a real socket: a long-polling fetch holds the connection, so the
requests sent behind it in the same write wait in its queue; the shutdown is started on the
broker's own loop while they wait there, which makes the timing deterministic.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from kbroker.testing import BrokerThread, running_broker
from wire import headers, messages
from wire.records import Record, build_batch, decode_batch, iter_batches

from raw_client import RawClient

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
TOPIC = "drained"
F = messages.FetchRequest
P = messages.ProduceRequest


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _long_poll_fetch(client: RawClient) -> bytes:
    request = F(replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=TOPIC, partitions=[
                    F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[])
    return _framed(client.request_bytes(FETCH, 12, request))


def _produce(client: RawClient, value: bytes) -> bytes:
    batch = build_batch([Record(0, 1_000, None, value, [])])
    request = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    return _framed(client.request_bytes(PRODUCE, 9, request))


def _decode(frame: bytes, api_key: int, version: int):
    header, at = headers.decode_response_header(frame, api_key, version)
    response, _ = messages.decode(messages.api(api_key).response.name, version, frame, at)
    return header.correlation_id, response


async def _requests_queued(broker: BrokerThread) -> int:
    """Requests received whole but not started (white box: the only way to know they arrived)."""
    return sum(len(connection._frames) for server in broker.running.servers for connection in server.connections)


def _wait_until_queued(broker: BrokerThread, count: int) -> None:
    deadline = time.monotonic() + 10
    while broker._call(_requests_queued(broker)) < count:
        assert time.monotonic() < deadline, f"the broker never held {count} requests behind the fetch"
        time.sleep(0.01)


def _stored_values(data_dir: Path) -> list[bytes | None]:
    with running_broker(data_dir) as restarted:
        data = restarted.broker.logs.get(TOPIC, 0).read(0, 1 << 30).read_bytes()
    return [r.value for position, _ in iter_batches(data) for r in decode_batch(data, position)[1]]


def test_requests_received_behind_a_long_poll_are_all_answered_in_order_at_shutdown(tmp_path: Path):
    data_dir = tmp_path / "data"
    broker = BrokerThread(data_dir).start()
    client = RawClient(broker.bootstrap_servers)
    try:
        broker.broker.create_topic(TOPIC, 1)
        pipelined = [
            _long_poll_fetch(client),
            _framed(client.request_bytes(API_VERSIONS, 3, messages.ApiVersionsRequest(
                client_software_name="t", client_software_version="1"))),
            _framed(client.request_bytes(METADATA, 12, messages.MetadataRequest(topics=None))),
            _produce(client, b"first"),
            _produce(client, b"second"),
        ]
        client.sock.sendall(b"".join(pipelined))
        _wait_until_queued(broker, len(pipelined) - 1)

        broker._call(broker.running.stop())

        answers = [_decode(client.read_frame(), api_key, version)
                   for api_key, version in ((FETCH, 12), (API_VERSIONS, 3), (METADATA, 12), (PRODUCE, 9),
                                            (PRODUCE, 9))]
        assert client.is_closed_by_peer()
    finally:
        client.close()
        broker.stop()

    assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3, 4, 5]
    (_, fetched), (_, versions), (_, metadata), (_, first), (_, second) = answers
    assert fetched.responses[0].partitions[0].error_code == 0
    assert versions.error_code == 0
    assert [t.name for t in metadata.topics] == [TOPIC]
    assert [(p.error_code, p.base_offset) for r in (first, second) for p in r.responses[0].partition_responses] \
        == [(0, 0), (0, 1)]
    assert _stored_values(data_dir) == [b"first", b"second"]
