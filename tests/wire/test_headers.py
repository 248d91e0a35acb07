"""Request/response header versions follow Kafka's rules, ApiVersions included."""

from __future__ import annotations

import struct

from kafka.protocol.api_header import RequestHeader as KafkaPythonRequestHeader

from wire import headers, messages

PRODUCE, METADATA, API_VERSIONS, CONTROLLED_SHUTDOWN = 0, 3, 18, 7


def test_flexible_request_uses_header_v2():
    assert headers.request_header_version(PRODUCE, 9) == 2


def test_non_flexible_request_uses_header_v1():
    assert headers.request_header_version(PRODUCE, 8) == 1


def test_controlled_shutdown_v0_uses_header_v0():
    assert headers.request_header_version(CONTROLLED_SHUTDOWN, 0) == 0


def test_api_versions_response_always_uses_header_v0():
    assert headers.response_header_version(API_VERSIONS, 3) == 0
    assert headers.response_header_version(API_VERSIONS, 4) == 0


def test_flexible_response_uses_header_v1():
    assert headers.response_header_version(METADATA, 12) == 1
    assert headers.response_header_version(METADATA, 8) == 0


def test_too_new_api_versions_request_parses_with_flexible_header():
    # KIP-511: a client may send ApiVersions v127; the header is still parsed (as v2)
    assert headers.request_header_version(API_VERSIONS, 127) == 2


def test_request_header_v2_keeps_client_id_non_compact():
    header = messages.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=7,
                                    client_id="rdkafka")
    encoded = bytes(headers.encode_request_header(header))
    assert encoded == struct.pack(">hhih", 3, 12, 7, 7) + b"rdkafka" + b"\x00"


def test_request_header_decodes_with_body_position():
    header = messages.RequestHeader(request_api_key=0, request_api_version=9, correlation_id=42,
                                    client_id=None)
    frame = bytes(headers.encode_request_header(header)) + b"BODY"
    decoded, body_at = headers.decode_request_header(frame)
    assert (decoded.request_api_key, decoded.correlation_id, decoded.client_id) == (0, 42, None)
    assert frame[body_at:] == b"BODY"


def test_request_header_matches_kafka_python():
    ours = messages.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=9,
                                  client_id="kafka-python")
    theirs = KafkaPythonRequestHeader(request_api_key=3, request_api_version=12, correlation_id=9,
                                      client_id="kafka-python")
    assert bytes(headers.encode_request_header(ours)) == theirs.encode(flexible=True)


def test_response_header_v0_is_only_the_correlation_id():
    assert bytes(headers.encode_response_header(5, API_VERSIONS, 3)) == struct.pack(">i", 5)


def test_response_header_v1_adds_empty_tagged_fields():
    assert bytes(headers.encode_response_header(5, METADATA, 12)) == struct.pack(">i", 5) + b"\x00"
