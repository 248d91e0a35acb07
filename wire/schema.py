"""Kafka's JSON message specs, loaded as data: the single source of truth for every codec.

The specs come from the installed kafka-python (which ships Apache Kafka's own JSON files)
plus the few files of ours in `wire/specs/` for APIs it lacks. Nothing here is hand-typed
schema: this module only parses the JSON into small frozen objects the generator walks.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

_COMMENT_LINES = re.compile(r"(?m)^\s*//.*\n?")
_UPPER = re.compile(r"(?<!^)(?=[A-Z])")
_MAX_VERSION = 0x7FFF
_SPEC_PACKAGE = "kafka.protocol.schemas.resources"
_OWN_SPECS = Path(__file__).parent / "specs"
ZERO_UUID = uuid.UUID(int=0)

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
     "string", "bytes", "records", "uuid"}
)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `Versions.NONE` contains nothing."""

    low: int
    high: int

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text.strip() in ("", "none"):
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))


NO_VERSIONS = Versions(1, 0)


def attribute_name(spec_name: str) -> str:
    """`ThrottleTimeMs` -> `throttle_time_ms` (the rule kafka-python uses, so names agree)."""
    return _UPPER.sub("_", spec_name).lower()


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str                      # the spec's CamelCase name
    attr: str                      # snake_case attribute on decoded objects
    type: str                      # "int32", "string", "[]int32", "[]Topic", "Topic", ...
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    flexible_versions: Versions | None   # a field-level override of the message's
    default: object
    ignorable: bool
    fields: tuple[FieldSpec, ...] | None  # set for struct and struct-array fields

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.fields is not None

    @property
    def struct_name(self) -> str:
        return self.element_type


@dataclass(frozen=True, slots=True)
class MessageSpec:
    name: str                      # "ProduceRequest"
    api_key: int | None
    kind: str                      # "request", "response", "header" or "data"
    valid_versions: Versions
    flexible_versions: Versions
    fields: tuple[FieldSpec, ...]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _parse_default(raw: object, type_name: str, nullable: bool) -> object:
    """The value a field takes when absent, following Kafka's generator rules."""
    if type_name.startswith("[]"):
        return None if raw == "null" else ()
    if raw == "null":
        return None
    if type_name in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        if raw is None or raw == "":
            return 0
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if type_name == "float64":
        return float(raw) if raw not in (None, "") else 0.0
    if type_name == "bool":
        return raw in (True, "true")
    if type_name == "string":
        return "" if raw is None else str(raw)
    if type_name in ("bytes", "records"):
        return None if nullable and raw is None and type_name == "records" else b""
    if type_name == "uuid":
        return ZERO_UUID
    return None  # structs: built from their own defaults by the generator


def _parse_field(raw: dict, common: dict[str, list]) -> FieldSpec:
    type_name = raw["type"]
    element = type_name[2:] if type_name.startswith("[]") else type_name
    children = raw.get("fields")
    if children is None and element not in PRIMITIVE_TYPES:
        children = common.get(element)
        if children is None:
            raise ValueError(f"field {raw['name']} has unknown type {type_name}")
    nullable_versions = Versions.parse(raw.get("nullableVersions"))
    flexible = raw.get("flexibleVersions")
    return FieldSpec(
        name=raw["name"],
        attr=attribute_name(raw["name"]),
        type=type_name,
        versions=Versions.parse(raw.get("versions")),
        nullable_versions=nullable_versions,
        tagged_versions=Versions.parse(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        flexible_versions=None if flexible is None else Versions.parse(flexible),
        default=_parse_default(raw.get("default"), type_name, not nullable_versions.empty),
        ignorable=bool(raw.get("ignorable", False)),
        fields=None if children is None else tuple(_parse_field(c, common) for c in children),
    )


def parse_spec(text: str) -> MessageSpec:
    raw = json.loads(_COMMENT_LINES.sub("", text))
    common = {s["name"]: s["fields"] for s in raw.get("commonStructs", ())}
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        kind=raw["type"],
        valid_versions=Versions.parse(raw["validVersions"]),
        flexible_versions=Versions.parse(raw.get("flexibleVersions")),
        fields=tuple(_parse_field(f, common) for f in raw["fields"]),
    )


def _spec_texts() -> dict[str, str]:
    texts: dict[str, str] = {}
    for entry in importlib.resources.files(_SPEC_PACKAGE).iterdir():
        if entry.name.endswith(".json"):
            texts[entry.name[:-5]] = entry.read_text(encoding="utf-8")
    for path in sorted(_OWN_SPECS.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        if path.stem not in texts or _newest_version(text) > _newest_version(texts[path.stem]):
            texts[path.stem] = text
    return texts


def _newest_version(text: str) -> int:
    return Versions.parse(json.loads(_COMMENT_LINES.sub("", text))["validVersions"]).high


@functools.cache
def all_specs() -> dict[str, MessageSpec]:
    """Every spec by message name: kafka-python's, and ours for what it lacks or where ours has newer
    versions (Kafka 4's, which the pinned kafka-python release does not ship)."""
    return {name: parse_spec(text) for name, text in sorted(_spec_texts().items())}


def spec(name: str) -> MessageSpec:
    return all_specs()[name]
