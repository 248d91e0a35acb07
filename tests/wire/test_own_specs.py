"""Cross-check the message specs we wrote ourselves (wire/specs/*.json) against kio.

kafka-python 3.0.12 ships no spec for ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69),
GetTelemetrySubscriptions (71) or PushTelemetry (72), so kbroker carries its own. A wrong field
there corrupts every frame exchanged with real clients, so each one is compared, version by version,
with kio's dataclasses, which kio generates from Apache Kafka's own spec files: field order, names,
wire types, array-ness, nullability, tags, nested struct names and scalar defaults.

kio's dataclasses differ from the specs in a few deliberate, documented ways; the comparison undoes
them rather than hiding them:

* Semantic types. kio's ``kafka_type`` metadata names a richer Python type for some wire types:
  ``error_code`` is int16, ``timedelta_i32``/``timedelta_i64`` and ``datetime_i64`` are int32/int64
  (see ``KIO_WIRE_TYPE``).
* Renames. For those time types kio drops the spec's ``Ms`` suffix (``ThrottleTimeMs`` becomes
  ``throttle_time``, ``RebalanceTimeoutMs`` becomes ``rebalance_timeout``); ``kio_spec_name`` adds it
  back, driven by the metadata, not by a list of names.
* UUIDs. kio types every uuid field ``UUID | None`` because it reads the all-zero UUID as None; Kafka
  uuid fields are never nullable, so nullability is not compared for uuid.
* Struct-typed fields carry no ``kafka_type``; their shape comes from the annotation
  (``tuple[X, ...]`` for arrays, ``X | None`` when nullable) and X is compared recursively.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import json
import pkgutil
import re
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

import pytest

kio_schema = pytest.importorskip("kio.schema")

SPEC_DIR = Path(__file__).resolve().parents[2] / "wire" / "specs"

# Spec file name -> (kio package under kio.schema, "request" | "response").
OWN_SPECS: dict[str, tuple[str, str]] = {
    "ConsumerGroupHeartbeatRequest": ("consumer_group_heartbeat", "request"),
    "ConsumerGroupHeartbeatResponse": ("consumer_group_heartbeat", "response"),
    "ConsumerGroupDescribeRequest": ("consumer_group_describe", "request"),
    "ConsumerGroupDescribeResponse": ("consumer_group_describe", "response"),
    "GetTelemetrySubscriptionsRequest": ("get_telemetry_subscriptions", "request"),
    "GetTelemetrySubscriptionsResponse": ("get_telemetry_subscriptions", "response"),
    "PushTelemetryRequest": ("push_telemetry", "request"),
    "PushTelemetryResponse": ("push_telemetry", "response"),
}

# What each spec must declare: pinned here so a spec edit that drops a version shows up as a failure.
EXPECTED_HEADER: dict[str, tuple[int, str]] = {
    "ConsumerGroupHeartbeatRequest": (68, "0-1"),
    "ConsumerGroupHeartbeatResponse": (68, "0-1"),
    "ConsumerGroupDescribeRequest": (69, "0-1"),
    "ConsumerGroupDescribeResponse": (69, "0-1"),
    "GetTelemetrySubscriptionsRequest": (71, "0"),
    "GetTelemetrySubscriptionsResponse": (71, "0"),
    "PushTelemetryRequest": (72, "0"),
    "PushTelemetryResponse": (72, "0"),
}

# kio semantic type -> the Kafka wire type it is encoded as.
KIO_WIRE_TYPE: dict[str, str] = {
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
# kio types for which kio removes the spec's "Ms" suffix from the field name.
KIO_MS_TYPES = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint16", "float64", "string", "bytes", "uuid", "records"}
)


class Field(NamedTuple):
    """One field as both sides describe it, reduced to what goes on the wire."""

    name: str  # snake_case
    type: str  # wire type of the element, or "struct:<Name>" for structs
    array: bool
    nullable: bool | None  # None: not compared (uuid)
    tag: int | None
    children: tuple[Field, ...] | None


# ---------------------------------------------------------------------------------------------
# Spec side
# ---------------------------------------------------------------------------------------------


def load_spec(name: str) -> dict[str, Any]:
    """Plain json.loads on purpose: our specs must not need comment stripping."""
    return json.loads((SPEC_DIR / f"{name}.json").read_text(encoding="utf-8"))


def version_range(spec: str | None) -> tuple[int, int] | None:
    """Parse "3", "1-4", "2+" or "none" into an inclusive (low, high) range; None means no version."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 15
    low, _, high = spec.partition("-")
    return int(low), int(high or low)


def in_versions(version: int, spec: str | None) -> bool:
    rng = version_range(spec)
    return rng is not None and rng[0] <= version <= rng[1]


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def spec_fields(
    fields: list[dict[str, Any]], version: int, common: dict[str, list[dict[str, Any]]]
) -> tuple[Field, ...]:
    """The fields a spec puts on the wire at `version`, in order, with nested structs resolved."""
    out = []
    for f in fields:
        if not in_versions(version, f["versions"]):
            continue
        ftype: str = f["type"]
        array = ftype.startswith("[]")
        elem = ftype[2:] if array else ftype
        children = None
        if elem not in PRIMITIVES:
            sub = f.get("fields", common.get(elem))
            assert sub is not None, f"struct {elem} has no fields"
            children = spec_fields(sub, version, common)
            elem = f"struct:{elem}"
        tagged = in_versions(version, f.get("taggedVersions"))
        out.append(
            Field(
                name=snake(f["name"]),
                type=elem,
                array=array,
                nullable=None if elem == "uuid" else in_versions(version, f.get("nullableVersions")),
                tag=f["tag"] if tagged else None,
                children=children,
            )
        )
    return tuple(out)


def common_structs(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}


# ---------------------------------------------------------------------------------------------
# kio side
# ---------------------------------------------------------------------------------------------


def kio_spec_name(f: dataclasses.Field[Any]) -> str:
    """Undo kio's rename: time-typed fields lose their "_ms" suffix in kio."""
    kafka_type = f.metadata.get("kafka_type")
    return f"{f.name}_ms" if kafka_type in KIO_MS_TYPES else f.name


def unwrap(annotation: Any) -> tuple[Any, bool, bool]:
    """Split `tuple[X, ...] | None` into (X, is_array, is_nullable)."""
    nullable = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) != len(typing.get_args(annotation))
        assert len(args) == 1, annotation
        annotation = args[0]
    array = typing.get_origin(annotation) is tuple
    if array:
        annotation = typing.get_args(annotation)[0]
    return annotation, array, nullable


def kio_fields(cls: type) -> tuple[Field, ...]:
    """The fields of a kio dataclass, in declaration order, reduced like `spec_fields`."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        elem, array, nullable = unwrap(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        children = None
        if dataclasses.is_dataclass(elem):
            assert kafka_type is None, f
            wire = f"struct:{elem.__name__}"
            children = kio_fields(elem)
        else:
            assert kafka_type is not None, f"{cls.__name__}.{f.name} has no kafka_type"
            wire = KIO_WIRE_TYPE.get(kafka_type, kafka_type)
        out.append(
            Field(
                name=kio_spec_name(f),
                type=wire,
                array=array,
                nullable=None if wire == "uuid" else nullable,
                tag=f.metadata.get("tag"),
                children=children,
            )
        )
    return tuple(out)


def kio_versions(package: str) -> list[int]:
    pkg = importlib.import_module(f"kio.schema.{package}")
    names = [m.name for m in pkgutil.iter_modules(pkg.__path__)]
    return sorted(int(n[1:]) for n in names if re.fullmatch(r"v\d+", n))


def kio_class(name: str, version: int) -> type:
    package, kind = OWN_SPECS[name]
    module = importlib.import_module(f"kio.schema.{package}.v{version}.{kind}")
    return getattr(module, name)


def spec_versions(name: str) -> list[int]:
    rng = version_range(load_spec(name)["validVersions"])
    assert rng is not None
    return list(range(rng[0], rng[1] + 1))


CASES = [(name, v) for name in OWN_SPECS for v in spec_versions(name)]


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_every_spec_file_is_covered() -> None:
    """A spec dropped into wire/specs without a kio counterpart here would go unchecked."""
    on_disk = {p.stem for p in SPEC_DIR.glob("*.json")}
    assert set(OWN_SPECS) <= on_disk


@pytest.mark.parametrize("name", sorted(OWN_SPECS))
def test_header(name: str) -> None:
    spec = load_spec(name)
    api_key, valid = EXPECTED_HEADER[name]
    assert spec["name"] == name
    assert spec["apiKey"] == api_key
    assert spec["type"] == OWN_SPECS[name][1]
    assert spec["validVersions"] == valid
    assert spec["flexibleVersions"] == "0+"
    assert isinstance(spec.get("about"), str) and spec["about"]
    # kio has exactly the versions we claim, no more and no fewer.
    assert kio_versions(OWN_SPECS[name][0]) == spec_versions(name)


@pytest.mark.parametrize("name", sorted(OWN_SPECS))
def test_well_formed(name: str) -> None:
    """Every field's version ranges sit inside the message's, and every field is documented."""
    spec = load_spec(name)
    valid = version_range(spec["validVersions"])
    assert valid is not None
    common = common_structs(spec)

    def walk(fields: list[dict[str, Any]]) -> None:
        names = [f["name"] for f in fields]
        assert len(names) == len(set(names)), names
        for f in fields:
            assert f.get("about"), f["name"]
            rng = version_range(f["versions"])
            assert rng is not None and rng[0] >= valid[0], f["name"]
            nullable = version_range(f.get("nullableVersions"))
            if nullable is not None:
                assert rng[0] <= nullable[0], f["name"]
            elem = f["type"].removeprefix("[]")
            if elem not in PRIMITIVES:
                assert "fields" in f or elem in common, f["name"]
                walk(f.get("fields", []))

    walk(spec["fields"])
    for fields in common.values():
        walk(fields)


@pytest.mark.parametrize(("name", "version"), CASES)
def test_fields_match_kio(name: str, version: int) -> None:
    spec = load_spec(name)
    cls = kio_class(name, version)
    assert cls.__api_key__ == spec["apiKey"]
    assert cls.__version__ == version
    assert cls.__flexible__ == in_versions(version, spec["flexibleVersions"])
    ours = spec_fields(spec["fields"], version, common_structs(spec))
    theirs = kio_fields(cls)
    assert ours == theirs


@pytest.mark.parametrize(("name", "version"), CASES)
def test_scalar_defaults_match_kio(name: str, version: int) -> None:
    """Defaults matter on the wire: they are what an older version's missing field decodes to."""
    spec = load_spec(name)
    common = common_structs(spec)

    def check(fields: list[dict[str, Any]], cls: type) -> None:
        hints = typing.get_type_hints(cls)
        by_name = {kio_spec_name(f): f for f in dataclasses.fields(cls)}
        for f in fields:
            if not in_versions(version, f["versions"]):
                continue
            kf = by_name[snake(f["name"])]
            elem = f["type"].removeprefix("[]")
            if elem not in PRIMITIVES:
                sub_cls, _, _ = unwrap(hints[kf.name])
                check(f.get("fields", common.get(elem, [])), sub_cls)
                continue
            if "default" not in f or f["type"].startswith("[]"):
                continue
            want = f["default"]
            have = kf.default
            if want == "null":
                assert have is None, f["name"]
            elif isinstance(have, datetime.timedelta):
                assert have // datetime.timedelta(milliseconds=1) == int(want), f["name"]
            elif isinstance(have, bool):
                assert have == (str(want).lower() == "true"), f["name"]
            else:
                assert have == int(want), f["name"]

    check(spec["fields"], kio_class(name, version))


def test_heartbeat_v1_adds_only_subscribed_topic_regex() -> None:
    """Spot check of the KIP-848 v1 change, independent of kio."""
    spec = load_spec("ConsumerGroupHeartbeatRequest")
    common = common_structs(spec)
    v0 = [f.name for f in spec_fields(spec["fields"], 0, common)]
    v1 = [f.name for f in spec_fields(spec["fields"], 1, common)]
    assert [n for n in v1 if n not in v0] == ["subscribed_topic_regex"]
    assert v1.index("subscribed_topic_regex") == v1.index("subscribed_topic_names") + 1


def test_describe_v1_adds_only_member_type() -> None:
    """Spot check of the KIP-1099 v1 change: MemberType at the end of each member, default -1."""
    spec = load_spec("ConsumerGroupDescribeResponse")
    common = common_structs(spec)
    member = {
        v: next(f for f in spec_fields(spec["fields"], v, common) if f.name == "groups").children
        for v in (0, 1)
    }
    members_v0 = next(f for f in member[0] or () if f.name == "members").children or ()
    members_v1 = next(f for f in member[1] or () if f.name == "members").children or ()
    assert [f.name for f in members_v1] == [f.name for f in members_v0] + ["member_type"]
    assert members_v1[-1].type == "int8"
