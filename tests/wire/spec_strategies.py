"""Hypothesis strategies that build any message at any version straight from its spec."""

from __future__ import annotations

from hypothesis import strategies as st

from wire import messages
from wire.schema import FieldSpec, all_specs

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}
_TEXT = st.text(max_size=12)
_BYTES = st.binary(max_size=24)


def _scalar(kind: str) -> st.SearchStrategy:
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.integers(low, high)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": _TEXT,
        "bytes": _BYTES,
        "records": _BYTES,
        "uuid": st.uuids(),
    }[kind]


def field_strategy(message: str, f: FieldSpec, version: int) -> st.SearchStrategy:
    nullable = version in f.nullable_versions
    if f.is_array:
        if f.is_struct:
            element = struct_strategy(message, f.struct_name, f.fields or (), version)
        else:
            element = _scalar(f.element_type)
        value = st.lists(element, max_size=3)
    elif f.is_struct:
        value = struct_strategy(message, f.struct_name, f.fields or (), version)
    else:
        value = _scalar(f.type)
    return st.one_of(st.none(), value) if nullable else value


def struct_strategy(message: str, struct_name: str, fields: tuple[FieldSpec, ...],
                    version: int) -> st.SearchStrategy:
    cls = messages.classes(message)[struct_name]
    present = {f.attr: field_strategy(message, f, version) for f in fields if version in f.versions}
    return st.fixed_dictionaries(present).map(lambda values: cls(**values))


def message_strategy(name: str, version: int) -> st.SearchStrategy:
    spec = all_specs()[name]
    return struct_strategy(name, name, spec.fields, version)


def plain(value, fields: tuple[FieldSpec, ...], version: int) -> dict:
    """The fields a version carries, as plain Python values, for comparing two codecs."""
    out = {}
    for f in fields:
        if version not in f.versions:
            continue
        out[f.attr] = _plain_value(getattr(value, f.attr), f, version)
    return out


def _plain_value(value, f: FieldSpec, version: int):
    if value is None:
        return None
    if f.is_array:
        if f.is_struct:
            return [plain(v, f.fields or (), version) for v in value]
        return list(value)
    if f.is_struct:
        return plain(value, f.fields or (), version)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value
