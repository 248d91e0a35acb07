"""A generated message as the JSON Kafka's generated *JsonConverter classes write, for the tools that print it
(kafka-dump-log.sh's --offsets-decoder and --transaction-log-decoder).

Walked from the message's spec, never from a hand-typed field list: fields in schema order, a field outside
`version` left out, a tagged field only when it differs from its default, bytes as base64, uuids as Kafka's
Uuid.toString, and the text compact as Jackson's JsonNode.toString prints it.

    write_json(messages.decode("OffsetCommitValue", 3, value, 2)[0], 3)   # '{"offset":100,...}'
"""

from __future__ import annotations

import base64
import decimal
import math
import uuid
from typing import Any

from wire.schema import FieldSpec, spec

__all__ = ["jackson_string", "java_double", "render", "to_json_tree", "write_json"]

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def write_json(message: Any, version: int) -> str:
    """`message` (a generated message object) at `version`, as Jackson's compact toString."""
    return render(to_json_tree(message, version))


def to_json_tree(message: Any, version: int) -> dict[str, Any]:
    """The converter's tree: plain dicts, lists, str, int, float, bool, None and bytes (base64 when rendered)."""
    return _struct(spec(type(message).__name__).fields, message, version)


def _struct(fields: tuple[FieldSpec, ...], message: Any, version: int) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for field in fields:
        if version not in field.versions:
            continue
        value = getattr(message, field.attr)
        if version in field.tagged_versions and value == field.default:
            continue  # tagged fields are written only when set
        tree[_json_name(field.name)] = _value(field, value, version)
    return tree


def _json_name(spec_name: str) -> str:
    """Kafka's generator names JSON fields in camelCase: `GroupId` -> `groupId`."""
    return spec_name[:1].lower() + spec_name[1:]


def _value(field: FieldSpec, value: Any, version: int) -> Any:
    if value is None:
        return None
    if field.is_array:
        return [_element(field, element, version) for element in value]
    return _element(field, value, version)


def _element(field: FieldSpec, value: Any, version: int) -> Any:
    if field.is_struct:
        return None if value is None else _struct(field.fields or (), value, version)
    if field.element_type == "uuid":
        return _kafka_uuid(value)
    return value


def _kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def render(tree: Any) -> str:
    """Jackson's compact JSON text of a converter tree."""
    if tree is None:
        return "null"
    if isinstance(tree, bool):
        return "true" if tree else "false"
    if isinstance(tree, int):
        return str(tree)
    if isinstance(tree, float):
        return java_double(tree)
    if isinstance(tree, str):
        return jackson_string(tree)
    if isinstance(tree, bytes | bytearray | memoryview):
        return '"' + base64.b64encode(bytes(tree)).decode("ascii") + '"'
    if isinstance(tree, dict):
        return "{" + ",".join(f"{jackson_string(key)}:{render(value)}" for key, value in tree.items()) + "}"
    return "[" + ",".join(render(element) for element in tree) + "]"


def jackson_string(text: str) -> str:
    """A JSON string as Jackson escapes it: short escapes where JSON has them, other control characters as
    \\u00XX (upper-case hex), everything else (non-ASCII included) as is."""
    out = []
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char < " ":
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def java_double(number: float) -> str:
    """Java's Double.toString: shortest digits, plain between 1e-3 and 1e7, else d.dddEn."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0 or 1e-3 <= abs(number) < 1e7:
        text = repr(float(number))
        return text if "." in text else text + ".0"
    sign = "-" if number < 0 else ""
    _, digits, exponent = decimal.Decimal(repr(abs(number))).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{sign}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + int(exponent)}"
