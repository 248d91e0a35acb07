"""Spec features the generated codecs honour, one behaviour per test."""

from __future__ import annotations

import pytest

from wire import DecodeError, EncodeError, messages
from wire.codegen import uuid_from_bytes


def _fetch_request(cluster_id=None):
    F = messages.FetchRequest
    return F(cluster_id=cluster_id, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
             isolation_level=0, session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[],
             rack_id="")


def test_tagged_field_at_default_is_left_out():
    assert bytes(messages.encode(_fetch_request(cluster_id=None), 12)).endswith(b"\x01\x00")


def test_tagged_field_with_value_is_written_and_read_back():
    encoded = bytes(messages.encode(_fetch_request(cluster_id="c1"), 12))
    assert encoded.endswith(b"\x01\x00\x03\x03c1")  # 1 tag: tag 0, size 3, compact string "c1"
    decoded, _ = messages.decode("FetchRequest", 12, encoded)
    assert decoded.cluster_id == "c1"


def test_unknown_tagged_fields_survive_decode_and_encode():
    body = bytes(messages.encode(_fetch_request(), 12))[:-1] + b"\x01\x63\x02hi"  # tag 99, 2 bytes
    decoded, _ = messages.decode("FetchRequest", 12, body)
    assert decoded._unknown_tags == {99: b"hi"}
    assert bytes(messages.encode(decoded, 12)) == body


def test_tagged_field_of_wrong_size_is_a_decode_error():
    body = bytes(messages.encode(_fetch_request(), 12))[:-1] + b"\x01\x00\x05\x03c1"
    with pytest.raises(DecodeError):
        messages.decode("FetchRequest", 12, body)


def test_nullable_struct_null_is_written_as_minus_one():
    R = messages.ConsumerGroupHeartbeatResponse
    response = R(throttle_time_ms=0, error_code=0, error_message=None, member_id=None, member_epoch=1,
                 heartbeat_interval_ms=5000, assignment=None)
    encoded = bytes(messages.encode(response, 0))
    assert encoded[-2:] == b"\xff\x00"  # assignment marker -1, then the empty tag section
    assert messages.decode("ConsumerGroupHeartbeatResponse", 0, encoded)[0].assignment is None


def test_nullable_struct_present_round_trips():
    R = messages.ConsumerGroupHeartbeatResponse
    assignment = R.Assignment(topic_partitions=[R.TopicPartitions(topic_id=uuid_from_bytes(b"\x01" * 16),
                                                                   partitions=[0, 1, 2])])
    response = R(member_id="m", member_epoch=3, heartbeat_interval_ms=5000, assignment=assignment)
    decoded, _ = messages.decode("ConsumerGroupHeartbeatResponse", 0, bytes(messages.encode(response, 0)))
    assert decoded.assignment == assignment


def test_non_ignorable_field_the_version_lacks_refuses_to_encode():
    request = messages.FindCoordinatorRequest(key="g", key_type=1)  # KeyType exists from v1
    with pytest.raises(EncodeError, match="KeyType"):
        messages.encode(request, 0)


def test_non_ignorable_field_at_default_encodes_in_older_version():
    request = messages.FindCoordinatorRequest(key="g", key_type=0)
    assert bytes(messages.encode(request, 0)) == b"\x00\x01g"


def test_ignorable_field_the_version_lacks_is_dropped():
    response = messages.ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=100)
    assert bytes(messages.encode(response, 0)) == b"\x00\x00\x00\x00\x00\x00"


def test_non_nullable_null_string_is_a_decode_error():
    with pytest.raises(DecodeError, match="non-nullable"):
        messages.decode("FindCoordinatorRequest", 0, b"\xff\xff")


def test_records_decode_as_a_view_into_the_request_buffer():
    P = messages.ProduceRequest
    request = P(acks=1, timeout_ms=1000, topic_data=[
        P.TopicProduceData(name="t", partition_data=[P.PartitionProduceData(index=0, records=b"batch")])])
    buf = bytes(messages.encode(request, 9))
    records = messages.decode("ProduceRequest", 9, buf)[0].topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is buf and records == b"batch"


class _FileRange:
    def __len__(self) -> int:
        return 3


def test_records_that_are_not_bytes_are_deferred_to_regions():
    F = messages.FetchResponse
    partition = F.PartitionData(partition_index=0, high_watermark=3, records=_FileRange())
    response = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[partition])])
    regions: list = []
    prefix = messages.encode(response, 4, regions=regions)
    assert len(regions) == 1
    at, value = regions[0]
    assert isinstance(value, _FileRange)
    assert prefix[at - 4:at] == b"\x00\x00\x00\x03"  # the length prefix is written, the bytes are not


def test_deferred_records_without_a_regions_list_refuse_to_encode():
    F = messages.FetchResponse
    partition = F.PartitionData(partition_index=0, records=_FileRange())
    response = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[partition])])
    with pytest.raises(EncodeError):
        messages.encode(response, 4)


def test_defaults_come_from_the_spec():
    request = messages.FetchRequest()
    assert (request.replica_id, request.max_bytes, request.isolation_level) == (-1, 0x7FFFFFFF, 0)
    assert request.topics == [] and request.topics is not messages.FetchRequest().topics


def test_unsupported_version_is_refused():
    with pytest.raises(messages.UnsupportedVersion):
        messages.codec("ProduceRequest", 2)


def test_every_api_kafka_clients_send_is_registered():
    keys = set(messages.apis())
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 68, 69, 71, 72} <= keys
