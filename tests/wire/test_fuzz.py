"""Malformed input of any shape only ever raises wire.DecodeError, promptly."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import DecodeError, headers, messages

from spec_strategies import message_strategy

REQUESTS = [
    (api.request.name, version)
    for api in messages.apis().values()
    for version in range(api.versions.low, api.versions.high + 1)
]
IDS = [f"{name}-v{version}" for name, version in REQUESTS]
FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _decode_or_decode_error(name: str, version: int, data: bytes) -> None:
    """Anything but DecodeError propagates and fails the test."""
    with contextlib.suppress(DecodeError):
        messages.decode(name, version, data)


@pytest.mark.parametrize(("name", "version"), REQUESTS, ids=IDS)
@FUZZ
@given(data=st.binary(max_size=64))
def test_random_bytes_raise_only_decode_error(name, version, data):
    _decode_or_decode_error(name, version, data)


@pytest.mark.parametrize(("name", "version"), REQUESTS, ids=IDS)
@FUZZ
@given(data=st.data())
def test_mutated_valid_requests_raise_only_decode_error(name, version, data):
    valid = bytearray(messages.encode(data.draw(message_strategy(name, version)), version))
    mutation = data.draw(st.sampled_from(["flip", "truncate", "huge-length", "splice"]))
    if mutation == "flip" and valid:
        index = data.draw(st.integers(0, len(valid) - 1))
        valid[index] ^= 1 << data.draw(st.integers(0, 7))
    elif mutation == "truncate":
        del valid[data.draw(st.integers(0, len(valid))):]
    elif mutation == "huge-length" and len(valid) >= 4:
        index = data.draw(st.integers(0, len(valid) - 4))
        valid[index:index + 4] = b"\x7f\xff\xff\xff"
    else:
        index = data.draw(st.integers(0, len(valid)))
        valid[index:index] = data.draw(st.binary(min_size=1, max_size=8))
    _decode_or_decode_error(name, version, bytes(valid))


def test_array_length_larger_than_input_is_rejected_without_allocating():
    # a ProduceRequest v3 claiming two billion topics in a 16-byte body
    body = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x75\x30" + b"\x7f\xff\xff\xff" + b"\x00" * 4
    with pytest.raises(DecodeError):
        messages.decode("ProduceRequest", 3, body)


def test_string_length_larger_than_input_is_rejected():
    body = b"\x00\x05ab"  # transactional id claims 5 bytes, 2 follow
    with pytest.raises(DecodeError):
        messages.decode("ProduceRequest", 3, body)


def test_varint_longer_than_five_bytes_is_rejected():
    body = b"\xff" * 12  # compact string length that never terminates
    with pytest.raises(DecodeError):
        messages.decode("ProduceRequest", 9, body)


def test_truncated_request_header_raises_decode_error():
    with pytest.raises(DecodeError):
        headers.decode_request_header(b"\x00\x03")
