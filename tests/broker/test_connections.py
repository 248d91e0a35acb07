"""How the broker treats frames: Kafka's answers for odd versions, closed connections for
malformed input, and nothing that disturbs other connections."""

from __future__ import annotations

import random
import resource
import signal
import struct
import time

import pytest

from wire import headers, messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch, decode_batch, iter_batches

from raw_client import RawClient

PRODUCE, API_VERSIONS, METADATA = 0, 18, 3


@pytest.fixture
def client(kafka_broker):
    raw = RawClient(kafka_broker.bootstrap_servers)
    yield raw
    raw.close()


def test_api_versions_response_has_no_tagged_field_byte_in_its_header(client):
    client.send_frame(client.request_bytes(API_VERSIONS, 3, messages.ApiVersionsRequest(
        client_software_name="t", client_software_version="1")))
    frame = client.read_frame()
    correlation_id, error_code = struct.unpack_from(">ih", frame)
    assert (correlation_id, error_code) == (client.correlation_id, 0)  # header v0: no tag byte between


def test_api_versions_lists_every_api_the_clients_need(client):
    response = client.call(API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t",
                                                                        client_software_version="1"))
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {0, 1, 2, 3, 18, 19, 20, 22, 37} <= set(listed)
    assert listed[0][0] == 0  # Produce v0 advertised for librdkafka, as Kafka 4 does


def test_api_versions_of_an_unknown_version_gets_a_v0_answer_with_our_ranges(client):
    client.correlation_id += 1
    header = struct.pack(">hhih", API_VERSIONS, 127, client.correlation_id, 1) + b"t" + b"\x00"
    client.send_frame(header + b"\x02t\x021\x00")
    frame = client.read_frame()
    response, _ = messages.decode("ApiVersionsResponse", 0, frame, 4)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == METADATA for k in response.api_keys)


def test_garbage_frame_closes_only_that_connection(kafka_broker, client):
    other = RawClient(kafka_broker.bootstrap_servers)
    try:
        client.send_frame(struct.pack(">hhi", METADATA, 12, 1) + b"\xff\xff\xff")
        assert client.is_closed_by_peer()
        response = other.call(METADATA, 12, messages.MetadataRequest(topics=[]))
        assert response.brokers[0].port == int(kafka_broker.bootstrap_servers.rsplit(":", 1)[1])
    finally:
        other.close()


def test_unknown_api_key_closes_the_connection(client):
    client.send_frame(struct.pack(">hhih", 9999, 0, 1, -1))
    assert client.is_closed_by_peer()


def test_frame_larger_than_socket_request_max_bytes_closes_the_connection(client):
    client.sock.sendall(struct.pack(">i", 200 * 1024 * 1024))
    assert client.is_closed_by_peer()


def test_pipelined_requests_are_answered_in_order(client):
    frames = [client.request_bytes(METADATA, 12, messages.MetadataRequest(topics=[])) for _ in range(5)]
    for frame in frames:
        client.send_frame(frame)
    ids = [struct.unpack_from(">i", client.read_frame())[0] for _ in frames]
    assert ids == [1, 2, 3, 4, 5]


def _produce_frame(client: RawClient, topic: str, value: bytes) -> bytes:
    P = messages.ProduceRequest
    batch = build_batch([Record(0, 1_000, None, value, [])])
    body = client.request_bytes(PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    return struct.pack(">i", len(body)) + body


def _base_offset(frame: bytes) -> tuple[int, int]:
    _, at = headers.decode_response_header(frame, PRODUCE, 9)
    response, _ = messages.decode("ProduceResponse", 9, frame, at)
    partition = response.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset


def test_a_large_request_arriving_in_pieces_is_answered(client, kafka_broker):
    kafka_broker.broker.create_topic("pieces", 1)
    frame = _produce_frame(client, "pieces", b"v" * 600_000)
    for at in range(0, len(frame), 100_000):
        client.sock.sendall(frame[at:at + 100_000])
        time.sleep(0.02)  # separate reads on the broker's side
    assert _base_offset(client.read_frame()) == (ErrorCode.NONE, 0)


def test_requests_following_a_large_one_in_the_same_write_are_answered_in_order(client, kafka_broker):
    kafka_broker.broker.create_topic("pieces", 1)
    large = _produce_frame(client, "pieces", b"v" * 600_000)
    small = _produce_frame(client, "pieces", b"small")
    client.sock.sendall(large[:300_000])
    time.sleep(0.05)
    client.sock.sendall(large[300_000:] + small + small)
    assert [_base_offset(client.read_frame()) for _ in range(3)] == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 1),
                                                                     (ErrorCode.NONE, 2)]


def _stored_values(log) -> list[bytes | None]:
    data = log.read(0, 1 << 30).read_bytes()
    return [r.value for position, _ in iter_batches(data) for r in decode_batch(data, position)[1]]


def test_requests_cut_at_random_points_are_answered_in_order_with_their_own_bytes(client, kafka_broker):
    """Small requests straddling reads, and more of them than one receive buffer holds."""
    kafka_broker.broker.create_topic("cut", 1)
    values = [bytes([i % 251]) * (500 + i) for i in range(600)]  # about 450 KB in all
    stream = b"".join(_produce_frame(client, "cut", value) for value in values)
    cuts = random.Random(7)
    at = 0
    while at < len(stream):
        step = cuts.choice([1, 3, 4, 5, 61, 700, 9_000])
        client.sock.sendall(stream[at:at + step])
        at += step
    assert [_base_offset(client.read_frame()) for _ in values] == [(ErrorCode.NONE, i) for i in range(len(values))]
    assert _stored_values(kafka_broker.broker.partition_log("cut", 0)) == values


def test_large_requests_back_to_back_keep_their_own_bytes(client, kafka_broker):
    """Each large request is read into a buffer of its own; none may overwrite another."""
    kafka_broker.broker.create_topic("large", 1)
    values = [bytes([65 + i]) * 300_000 for i in range(4)]
    stream = b"".join(_produce_frame(client, "large", value) for value in values)
    for at in range(0, len(stream), 250_001):
        client.sock.sendall(stream[at:at + 250_001])
    assert [_base_offset(client.read_frame()) for _ in values] == [(ErrorCode.NONE, i) for i in range(4)]
    assert _stored_values(kafka_broker.broker.partition_log("large", 0)) == values


def test_metadata_auto_creates_a_requested_topic(client, kafka_broker):
    request = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="auto-made")],
                                       allow_auto_topic_creation=True)
    first = client.call(METADATA, 12, request)
    assert first.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    second = client.call(METADATA, 12, request)
    assert second.topics[0].error_code == 0 and len(second.topics[0].partitions) == 1


def test_metadata_for_an_invalid_topic_name_is_an_error(client):
    request = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="a/b")])
    assert client.call(METADATA, 12, request).topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_list_offsets_max_timestamp_answers_the_offset_of_the_largest_timestamp(client, kafka_broker):
    from wire.records import Record, build_batch

    kafka_broker.broker.create_topic("maxts", 1)
    P = messages.ProduceRequest
    batch = build_batch([Record(i, ts, None, b"v", []) for i, ts in enumerate([10, 50, 20])])
    client.call(0, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="maxts", partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    L = messages.ListOffsetsRequest
    request = L(replica_id=-1, topics=[L.ListOffsetsTopic(name="maxts", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=-3)])])
    answer = client.call(2, 9, request).topics[0].partitions[0]
    assert (answer.offset, answer.timestamp) == (1, 50)


@pytest.fixture
def file_size_limit():
    """Writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored), as on a full or failing disk."""
    previous_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def limit(size: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, previous_limit[1]))

    yield limit
    resource.setrlimit(resource.RLIMIT_FSIZE, previous_limit)
    signal.signal(signal.SIGXFSZ, previous_handler)


def test_a_write_the_disk_refuses_is_kafka_storage_error_and_leaves_no_partial_batch(client, kafka_broker,
                                                                                     file_size_limit):
    """The dir then goes offline (tests/broker/test_log_dir_offline.py); what it holds stays whole."""
    kafka_broker.broker.create_topic("refused", 1)
    segment = kafka_broker.broker.logs.log_dir_of("refused", 0) / "refused-0" / f"{0:020d}.log"
    client.sock.sendall(_produce_frame(client, "refused", b"before"))
    assert _base_offset(client.read_frame()) == (ErrorCode.NONE, 0)
    size_before = segment.stat().st_size
    file_size_limit(500_000)
    client.sock.sendall(_produce_frame(client, "refused", b"x" * 900_000))
    error, _ = _base_offset(client.read_frame())
    file_size_limit(resource.RLIM_INFINITY)
    assert (error, segment.stat().st_size) == (ErrorCode.KAFKA_STORAGE_ERROR, size_before)


@pytest.mark.parametrize("records", [1, 2_000], ids=["copied", "sendfile"])
def test_an_answer_whose_records_can_no_longer_be_read_closes_only_its_connection(client, kafka_broker, records):
    kafka_broker.broker.create_topic("gone", 1)
    P, F = messages.ProduceRequest, messages.FetchRequest
    batch = build_batch([Record(i, 1_000, None, b"v" * 100, ()) for i in range(records)])
    client.call(PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="gone", partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    with kafka_broker.faults.inject(api="Fetch", delay_ms=500):  # the answer is built, then held
        client.send_frame(client.request_bytes(1, 12, F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                                        topics=[F.FetchTopic(topic="gone", partitions=[
                                                            F.FetchPartition(partition=0, fetch_offset=0,
                                                                             partition_max_bytes=1 << 20)])])))
        time.sleep(0.2)
        log = kafka_broker.broker.logs.get("gone", 0)
        kafka_broker.on_loop(log.close_handles)  # its segment files closed under the held answer
        assert _ends_within(client, seconds=5), "the connection was left waiting for an answer that cannot come"
    other = RawClient(kafka_broker.bootstrap_servers)
    try:
        assert other.call(METADATA, 12, messages.MetadataRequest(topics=[])).brokers
    finally:
        other.close()


def _ends_within(client: RawClient, seconds: float) -> bool:
    """Whether the broker closes the connection within `seconds` (whatever part of an answer comes first)."""
    client.sock.settimeout(seconds)
    try:
        while client.sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True
