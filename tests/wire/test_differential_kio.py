"""Our generated codecs against kio's (a second codec generated independently from Kafka's
JSON specs), both directions, for every request and response and every version both define.

kio keeps richer Python types than the wire: error codes are an enum, `*_ms` durations are
`datetime.timedelta` and timestamps aware `datetime`s (those fields also lose their `_ms`
suffix, so fields are paired by position). Values are converted at the boundary, and the
generated values are constrained, field by field, to what kio can represent.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import io
import pkgutil
import re
import types
import typing
from pathlib import Path

import kio.schema
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import tz_aware_from_i64

from wire import messages
from wire.schema import ZERO_UUID, FieldSpec, all_specs, attribute_name

from spec_strategies import message_strategy, plain


def _kio_modules() -> dict[tuple[str, int, str], str]:
    """(api package, version, "request" | "response") -> module name, found by walking
    kio.schema's directories (no imports: the modules are loaded as the tests need them)."""
    found = {}
    root = Path(next(iter(kio.schema.__path__)))
    for api in pkgutil.iter_modules([str(root)]):
        if not api.ispkg:
            continue
        for version in pkgutil.iter_modules([str(root / api.name)]):
            if not (version.ispkg and re.fullmatch(r"v\d+", version.name)):
                continue
            for leaf in pkgutil.iter_modules([str(root / api.name / version.name)]):
                if leaf.name in ("request", "response"):
                    key = (api.name, int(version.name[1:]), leaf.name)
                    found[key] = f"kio.schema.{api.name}.{version.name}.{leaf.name}"
    return found


def _kio_key(name: str, kind: str, version: int) -> tuple[str, int, str]:
    return attribute_name(name.removesuffix(kind.capitalize())), version, kind


KIO_MODULES = _kio_modules()
# ZooKeeper-mode inter-broker APIs that Kafka 4, and so kio, no longer has; test_inter_broker_messages.py holds
# them to Kafka 3.9's own specs and bytes instead.
ZOOKEEPER_ONLY = ("LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown")
OURS = [
    (name, version, spec.kind)
    for name, spec in all_specs().items()
    if spec.kind in ("request", "response")  # headers and data structs are not compared
    and not name.startswith(ZOOKEEPER_ONLY)
    for version in range(spec.valid_versions.low, spec.valid_versions.high + 1)
]
CASES = [(name, version) for name, version, kind in OURS if _kio_key(name, kind, version) in KIO_MODULES]
SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# (message, version) -> why the two codecs cannot be compared there. Each entry is checked
# by test_known_differences_still_differ, so a fixed one must be removed from this list.
KNOWN_DIFFERENCES: dict[tuple[str, int], str] = {}


def _kio_class(name: str, version: int) -> type:
    spec = all_specs()[name]
    module = importlib.import_module(KIO_MODULES[_kio_key(name, spec.kind, version)])
    return getattr(module, name)


def test_kio_covers_nearly_every_message_version():
    assert len(CASES) >= 0.9 * len(OURS)
    assert len({name for name, _ in CASES}) >= 0.9 * len({name for name, _, _ in OURS})
    assert set(KNOWN_DIFFERENCES) <= set(CASES)


# ---------------------------------------------------------------------------------------
# Pairing our fields with kio's
# ---------------------------------------------------------------------------------------

# kio drops the `_ms` suffix of the fields it types as durations or timestamps.
_KIO_TIME_TYPES = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})


def _pairs(cls: type, fields: tuple[FieldSpec, ...],
           version: int) -> list[tuple[FieldSpec, dataclasses.Field]]:
    ours = [f for f in fields if version in f.versions]
    theirs = dataclasses.fields(cls)
    assert len(ours) == len(theirs), (cls, [f.attr for f in ours], [t.name for t in theirs])
    for f, t in zip(ours, theirs, strict=True):
        renamed = t.metadata.get("kafka_type") in _KIO_TIME_TYPES and f.attr.removesuffix("_ms") == t.name
        assert f.attr == t.name or renamed, (cls, f.attr, t.name)
    return list(zip(ours, theirs, strict=True))


def _unwrap(annotation) -> tuple[type, bool]:
    """`X`, `X | None`, `tuple[X, ...]` or `tuple[X, ...] | None` -> (X, kio allows None)."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        (annotation,) = args
    if typing.get_origin(annotation) is tuple:
        annotation = typing.get_args(annotation)[0]
    return annotation, optional


def _nested(t: dataclasses.Field) -> type:
    return _unwrap(t.type)[0]


def _each(value, f: FieldSpec) -> list:
    if value is None:
        return []
    return list(value) if f.is_array else [value]


# ---------------------------------------------------------------------------------------
# Constraining generated values to what kio accepts
# ---------------------------------------------------------------------------------------

_LAST_KIO_TIMESTAMP = 253402300799999  # 9999-12-31T23:59:59.999Z in milliseconds


def _kio_domain(kafka_type: str, kio_optional: bool) -> st.SearchStrategy | None:
    if kafka_type == "error_code":
        # kio reads error codes into its ErrorCode enum and rejects codes the enum lacks.
        return st.sampled_from(sorted(int(code) for code in ErrorCode))
    if kafka_type == "timedelta_i64":
        # kio reads int64 milliseconds as a timedelta, which overflows past about 2**56 ms
        # and, written back through float seconds, loses milliseconds past about 2**52.
        return st.integers(-(2**50), 2**50)
    if kafka_type == "datetime_i64":
        # kio reads int64 timestamps as aware datetimes: no negative ones (except -1, its
        # None, where the field is nullable in kio) and none past the year 9999.
        valid = st.integers(0, _LAST_KIO_TIMESTAMP)
        return st.one_of(st.just(-1), valid) if kio_optional else valid
    if kafka_type == "uuid":
        # kio reads an all-zero UUID as None: drawn often, so that mapping is exercised.
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    return None


def _fit_kio(draw, value, cls: type, fields: tuple[FieldSpec, ...], version: int) -> None:
    """Redraw, in place, the fields of `value` whose kio type is narrower than the wire's."""
    for f, t in _pairs(cls, fields, version):
        item = getattr(value, f.attr)
        if f.is_struct:
            for element in _each(item, f):
                _fit_kio(draw, element, _nested(t), f.fields or (), version)
            continue
        domain = _kio_domain(t.metadata["kafka_type"], _unwrap(t.type)[1])
        if domain is None or item is None:
            continue
        if f.is_array:
            setattr(value, f.attr, [draw(domain) for _ in item])
        else:
            setattr(value, f.attr, draw(domain))


@st.composite
def kio_compatible(draw, name: str, version: int):
    """Any of our messages at `version`, within what kio's types can represent."""
    value = draw(message_strategy(name, version))
    _fit_kio(draw, value, _kio_class(name, version), all_specs()[name].fields, version)
    return value


# ---------------------------------------------------------------------------------------
# Converting between our objects and kio's
# ---------------------------------------------------------------------------------------

def _to_kio_scalar(item, kafka_type: str, kio_optional: bool):
    if kafka_type == "error_code":
        return ErrorCode(item)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=item)
    if kafka_type == "datetime_i64":
        return None if kio_optional and item == -1 else tz_aware_from_i64(item)
    if kafka_type == "uuid":
        return None if item == ZERO_UUID else item  # kio's all-zero UUID is None
    if isinstance(item, memoryview | bytearray):
        return bytes(item)
    return item


def _from_kio_scalar(item, kafka_type: str):
    if item is None:
        # kio's None is the all-zero UUID, or -1 for a nullable timestamp.
        return ZERO_UUID if kafka_type == "uuid" else -1 if kafka_type == "datetime_i64" else None
    if kafka_type == "error_code":
        return int(item)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return round(item.total_seconds() * 1000)  # as kio's own writer rounds it
    if kafka_type == "datetime_i64":
        return round(item.timestamp() * 1000)  # as kio's own writer rounds it
    return item


def _to_kio(value, cls: type, fields: tuple[FieldSpec, ...], version: int):
    kwargs = {}
    for f, t in _pairs(cls, fields, version):
        item = getattr(value, f.attr)
        if item is None:
            converted = None
        elif f.is_struct:
            converted = [_to_kio(v, _nested(t), f.fields or (), version) for v in _each(item, f)]
        else:
            optional = _unwrap(t.type)[1]
            converted = [_to_kio_scalar(v, t.metadata["kafka_type"], optional) for v in _each(item, f)]
        if converted is not None:
            converted = tuple(converted) if f.is_array else converted[0]
        kwargs[t.name] = converted
    return cls(**kwargs)


def _from_kio(obj, fields: tuple[FieldSpec, ...], version: int) -> dict:
    out = {}
    for f, t in _pairs(type(obj), fields, version):
        item = getattr(obj, t.name)
        if item is not None and f.is_struct:
            converted = [_from_kio(v, f.fields or (), version) for v in _each(item, f)]
            out[f.attr] = converted if f.is_array else converted[0]
        elif item is not None and f.is_array:
            out[f.attr] = [_from_kio_scalar(v, t.metadata["kafka_type"]) for v in item]
        elif f.is_struct or f.is_array:
            out[f.attr] = None
        else:
            out[f.attr] = _from_kio_scalar(item, t.metadata["kafka_type"])
    return out


def _kio_encode(obj) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(obj))(buffer, obj)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------
# The differential tests
# ---------------------------------------------------------------------------------------

def _kio_reads_and_rewrites(name: str, version: int, value) -> None:
    fields = all_specs()[name].fields
    cls = _kio_class(name, version)
    encoded = bytes(messages.encode(value, version))
    theirs, size = entity_reader(cls)(encoded, 0)
    assert size == len(encoded)
    assert _from_kio(theirs, fields, version) == plain(value, fields, version)
    assert _kio_encode(theirs) == encoded


def _we_decode_kio(name: str, version: int, value) -> None:
    fields = all_specs()[name].fields
    encoded = _kio_encode(_to_kio(value, _kio_class(name, version), fields, version))
    decoded, end = messages.decode(name, version, encoded)
    assert end == len(encoded)
    assert plain(decoded, fields, version) == plain(value, fields, version)


COMPARED = [case for case in CASES if case not in KNOWN_DIFFERENCES]
COMPARED_IDS = [f"{n}-v{v}" for n, v in COMPARED]


@pytest.mark.parametrize(("name", "version"), COMPARED, ids=COMPARED_IDS)
@SETTINGS
@given(data=st.data())
def test_kio_reads_and_rewrites_what_we_encode(name, version, data):
    _kio_reads_and_rewrites(name, version, data.draw(kio_compatible(name, version)))


@pytest.mark.parametrize(("name", "version"), COMPARED, ids=COMPARED_IDS)
@SETTINGS
@given(data=st.data())
def test_we_decode_what_kio_encodes(name, version, data):
    _we_decode_kio(name, version, data.draw(kio_compatible(name, version)))


def _disagrees(name: str, version: int, value) -> bool:
    try:
        _kio_reads_and_rewrites(name, version, value)
        _we_decode_kio(name, version, value)
    except Exception:
        return True
    return False


def test_known_differences_still_differ():
    for (name, version), reason in KNOWN_DIFFERENCES.items():
        try:
            find(kio_compatible(name, version), functools.partial(_disagrees, name, version),
                 settings=settings(max_examples=200, database=None, derandomize=True))
        except NoSuchExample:
            pytest.fail(f"{name} v{version} now agrees with kio ({reason}): drop it from KNOWN_DIFFERENCES")
