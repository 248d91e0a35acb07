"""Our generated codecs against kafka-python's own (kafka.protocol), both directions, for
every request and response and every version both define."""

from __future__ import annotations

import importlib
import pkgutil

import kafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage

from wire import messages
from wire.schema import FieldSpec, Versions, all_specs

from spec_strategies import message_strategy, plain


def _kafka_python_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in module.name or module.name.endswith("generate_stubs"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and issubclass(value, ApiMessage) and getattr(value, "_json", None):
                found[value.name] = value
    return found


KAFKA_PYTHON = _kafka_python_classes()
# kafka-python's newest version of each message: where wire/specs has a newer Kafka spec (ApiVersions v5,
# DeleteGroups v3), only the versions and fields kafka-python knows can be compared
THEIR_NEWEST = {name: Versions.parse(cls._json["validVersions"]).high for name, cls in KAFKA_PYTHON.items()}
CASES = [
    (name, version)
    for name, spec in all_specs().items()
    if name in KAFKA_PYTHON
    for version in range(spec.valid_versions.low, min(spec.valid_versions.high, THEIR_NEWEST[name]) + 1)
]
SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_every_kafka_python_message_is_covered():
    assert len(KAFKA_PYTHON) >= 100
    assert {name for name, _ in CASES} == set(KAFKA_PYTHON)


# kafka-python patches a few specs (its json_patch hooks): it renames the
# authorized-operations fields and reads them as "bitfields", sets of bit numbers with
# INT32_MIN as None. Fields are therefore paired by position, and bitfields converted.

def _their_fields(cls: type, fields: tuple[FieldSpec, ...], newest: int) -> list[tuple[FieldSpec, object]]:
    """Our fields paired with kafka-python's, leaving out those of versions newer than it knows."""
    theirs = cls._struct._fields
    known = [f for f in fields if f.versions.low <= newest]
    assert len(theirs) == len(known)
    return list(zip(known, theirs, strict=True))


def _is_bitfield(their_field) -> bool:
    return getattr(their_field, "_type_str", None) == "bitfield"


def _int_to_bits(value: int) -> set[int] | None:
    bits = {bit for bit in range(32) if (value & 0xFFFFFFFF) >> bit & 1}
    return None if bits == {31} else bits


def _bits_to_int(bits: set[int] | None) -> int:
    raw = sum(1 << bit for bit in ({31} if bits is None else bits))
    return raw - (1 << 32) if raw & (1 << 31) else raw


def _to_kafka_python(value, cls: type, fields: tuple[FieldSpec, ...], version: int, newest: int):
    kwargs = {}
    for f, theirs in _their_fields(cls, fields, newest):
        if version not in f.versions:
            continue
        item = getattr(value, f.attr)
        if item is not None and f.is_struct:
            nested = cls._struct.fields[theirs.name].data_class
            if f.is_array:
                item = [_to_kafka_python(v, nested, f.fields or (), version, newest) for v in item]
            else:
                item = _to_kafka_python(item, nested, f.fields or (), version, newest)
        elif isinstance(item, memoryview | bytearray):
            item = bytes(item)
        elif _is_bitfield(theirs):
            item = _int_to_bits(item)
        kwargs[theirs.name] = item
    return cls(version=version, **kwargs)


def _from_kafka_python(value, fields: tuple[FieldSpec, ...], version: int, newest: int) -> dict:
    out = {}
    for f, theirs in _their_fields(type(value), fields, newest):
        if version not in f.versions:
            continue
        item = getattr(value, theirs.name)
        if item is not None and f.is_struct:
            if f.is_array:
                item = [_from_kafka_python(v, f.fields or (), version, newest) for v in item]
            else:
                item = _from_kafka_python(item, f.fields or (), version, newest)
        elif _is_bitfield(theirs):
            item = _bits_to_int(item)
        elif isinstance(item, tuple | list):
            item = list(item)
        out[f.attr] = item
    return out


def _draw(data, name: str, version: int):
    value = data.draw(message_strategy(name, version))
    if name == "ApiVersionsResponse":
        # kafka-python re-reads an ApiVersionsResponse with an error as v0 (its KIP-511
        # fallback), so only error-free responses are comparable field by field.
        value.error_code = 0
    return value


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@SETTINGS
@given(data=st.data())
def test_kafka_python_decodes_what_we_encode(name, version, data):
    value = _draw(data, name, version)
    encoded = bytes(messages.encode(value, version))
    theirs = KAFKA_PYTHON[name].decode(encoded, version=version)
    fields = all_specs()[name].fields
    assert _from_kafka_python(theirs, fields, version, THEIR_NEWEST[name]) == plain(value, fields, version)


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@SETTINGS
@given(data=st.data())
def test_we_decode_what_kafka_python_encodes(name, version, data):
    value = _draw(data, name, version)
    fields = all_specs()[name].fields
    theirs = _to_kafka_python(value, KAFKA_PYTHON[name], fields, version, THEIR_NEWEST[name])
    encoded = bytes(theirs.encode(version=version))
    decoded, end = messages.decode(name, version, encoded)
    assert end == len(encoded)
    assert plain(decoded, fields, version) == plain(value, fields, version)
