"""Turns a MessageSpec into plain Python: one class per struct, one decoder and one encoder
per (message, version).

Why generate source: a generic codec walks the schema for every message, which costs
microseconds per field. The generated functions are straight-line code with the version
decisions already taken, consecutive fixed-width fields merged into one `struct` call, and
nested structs inlined as loops, so decoding a ProduceRequest is a handful of C calls.

Decoders take `(buf, pos)` (bytes, bytearray or memoryview) and return `(obj, new_pos)`; `records`
fields come back as zero-copy slices of `buf`. Encoders take `(obj, out, regions)` and
append to the bytearray `out`; a `records` value that is not bytes-like (for example a
file range the network layer will `sendfile`) is not copied: its position in `out` is
appended to `regions` as `(offset_in_out, value)` and only its length prefix is written.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from wire.exceptions import DecodeError, EncodeError
from wire.schema import ZERO_UUID, FieldSpec, MessageSpec
from wire.varint import encode_uvarint, read_uvarint

_FIXED_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "float64": "d", "uuid": "16s",
}
_BYTES_LIKE = (bytes, bytearray, memoryview)


# ---------------------------------------------------------------------------------------
# Runtime helpers the generated code calls
# ---------------------------------------------------------------------------------------

_new_object = object.__new__
_set_attribute = object.__setattr__
_UUID_SAFETY = uuid.SafeUUID.unknown


_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_LIMIT = 65536


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """uuid.UUID(bytes=...) made cheap: topic ids repeat across requests, so most are cached."""
    value = _UUID_CACHE.get(raw)
    if value is not None:
        return value
    value = _new_object(uuid.UUID)
    _set_attribute(value, "int", int.from_bytes(raw, "big"))
    _set_attribute(value, "is_safe", _UUID_SAFETY)
    if len(_UUID_CACHE) >= _UUID_CACHE_LIMIT:
        _UUID_CACHE.clear()
    _UUID_CACHE[raw] = value
    return value


def write_tagged_fields(out: bytearray, tagged: list[tuple[int, bytes]]) -> None:
    tagged.sort(key=_first)
    out += encode_uvarint(len(tagged))
    for tag, payload in tagged:
        out += encode_uvarint(tag)
        out += encode_uvarint(len(payload))
        out += payload


def _first(item: tuple[int, bytes]) -> int:
    return item[0]


def truncated(what: str) -> DecodeError:
    return DecodeError(f"truncated or oversized {what}")


_RUNTIME = {
    "_S": struct.Struct,
    "_uvarint": read_uvarint,
    "_enc_uvarint": encode_uvarint,
    "_uuid": uuid_from_bytes,
    "_ZERO_UUID": ZERO_UUID,
    "_ZERO_UUID_BYTES": bytes(16),
    "_write_tags": write_tagged_fields,
    "_truncated": truncated,
    "DecodeError": DecodeError,
    "EncodeError": EncodeError,
    "_struct_error": struct.error,
    "_BYTES_LIKE": _BYTES_LIKE,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
}


# ---------------------------------------------------------------------------------------
# Data classes: one per struct, version independent (the union of all versions' fields)
# ---------------------------------------------------------------------------------------

class Message:
    """Base of every generated struct class: value equality, repr and dict conversion."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict:
        return {f: _plain(getattr(self, f)) for f in self._fields}


def _plain(value: object) -> object:
    if isinstance(value, Message):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def _default_expression(f: FieldSpec, classes: dict[str, type]) -> str:
    """Source for a fresh default value (fresh, so no two objects share a list)."""
    if f.is_array:
        return "None" if f.default is None else "[]"
    if f.is_struct:
        return "None" if f.default is None and not f.nullable_versions.empty else f"{f.struct_name}()"
    if f.type == "uuid":
        return "_ZERO_UUID"
    return repr(f.default)


def build_classes(message: MessageSpec) -> dict[str, type]:
    """One slotted class per struct name in the message; the top-level one is message.name."""
    classes: dict[str, type] = {}
    namespace: dict[str, object] = {"_ZERO_UUID": ZERO_UUID}

    def make(name: str, fields: tuple[FieldSpec, ...]) -> type:
        if name in classes:
            return classes[name]
        for f in fields:
            if f.is_struct:
                make(f.struct_name, f.fields or ())
        attrs = tuple(f.attr for f in fields)
        params = ", ".join(f"{f.attr}=_UNSET" if _needs_fresh(f) else f"{f.attr}={_default_literal(f)}"
                           for f in fields)
        lines = [f"def __init__(self{', ' if params else ''}{params}, _unknown_tags=None):"]
        for f in fields:
            if _needs_fresh(f):
                lines.append(f"    self.{f.attr} = {_default_expression(f, classes)} "
                             f"if {f.attr} is _UNSET else {f.attr}")
            else:
                lines.append(f"    self.{f.attr} = {f.attr}")
        lines.append("    self._unknown_tags = _unknown_tags")
        namespace["_UNSET"] = _UNSET
        namespace.update(classes)
        exec("\n".join(lines), namespace)  # source built from the spec above
        cls = type(name, (Message,), {
            "__slots__": (*attrs, "_unknown_tags"),
            "_fields": attrs,
            "__init__": namespace.pop("__init__"),
            "__module__": "wire.messages",
            "__qualname__": name,
        })
        classes[name] = cls
        namespace[name] = cls
        return cls

    make(message.name, message.fields)
    top = classes[message.name]
    for name, cls in classes.items():
        if cls is not top:
            setattr(top, name, cls)
    return classes


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _needs_fresh(f: FieldSpec) -> bool:
    return (f.is_array and f.default is not None) or (f.is_struct and not f.is_array) or f.type == "uuid"


def _default_literal(f: FieldSpec) -> str:
    if f.is_array or f.is_struct:
        return "None"
    return repr(f.default)


# ---------------------------------------------------------------------------------------
# Source emitter
# ---------------------------------------------------------------------------------------

@dataclass
class _Source:
    lines: list[str] = field(default_factory=list)
    constants: dict[str, object] = field(default_factory=dict)
    counter: int = 0

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def local(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    def array_packer(self, element_format: str) -> str:
        """A cached `length -> Struct.pack` lookup, so arrays skip format-string building."""
        name = "_pack_array_" + element_format.replace("?", "B_")
        if name not in self.constants:
            self.constants[name] = functools.cache(
                lambda n, f=element_format: struct.Struct(f">{n}{f}").pack)
        return name

    def struct_constant(self, fmt: str) -> str:
        name = "_S_" + fmt.replace("?", "B_").replace("16s", "U")
        self.constants[name] = struct.Struct(">" + fmt)
        return name


@dataclass(frozen=True)
class _Context:
    version: int
    flexible: bool


def _present(fields: tuple[FieldSpec, ...], version: int) -> Iterator[FieldSpec]:
    return (f for f in fields if version in f.versions)


def _is_tagged(f: FieldSpec, ctx: _Context) -> bool:
    return ctx.flexible and f.tag is not None and ctx.version in f.tagged_versions


def _compact(f: FieldSpec, ctx: _Context) -> bool:
    if f.flexible_versions is not None:
        return ctx.version in f.flexible_versions
    return ctx.flexible


def _fixed(f: FieldSpec) -> str | None:
    return None if f.is_array else _FIXED_FORMATS.get(f.type)


def _groups(fields: list[FieldSpec]) -> Iterator[list[FieldSpec]]:
    """Runs of consecutive fixed-width fields (one struct call each), other fields alone."""
    run: list[FieldSpec] = []
    for f in fields:
        if _fixed(f):
            run.append(f)
            continue
        if run:
            yield run
            run = []
        yield [f]
    if run:
        yield run


# ---------------------------------------------------------------------------------------
# Decoder generation
# ---------------------------------------------------------------------------------------

def _emit_length(src: _Source, d: int, target: str, compact: bool, wide: bool) -> None:
    """Read a length prefix into `target`; compact lengths arrive as N+1 (0 means null)."""
    if compact:
        src.emit(d, f"{target} = buf[pos]")
        src.emit(d, f"if {target} < 128: pos += 1")
        src.emit(d, f"else: {target}, pos = _uvarint(buf, pos)")
        src.emit(d, f"{target} -= 1")
    else:
        fmt = src.struct_constant("i" if wide else "h")
        src.emit(d, f"{target}, = {fmt}.unpack_from(buf, pos)")
        src.emit(d, f"pos += {4 if wide else 2}")


def _emit_decode_value(src: _Source, d: int, f: FieldSpec, target: str, ctx: _Context,
                       classes: dict[str, type], element_of_array: bool = False) -> None:
    kind = f.element_type if element_of_array else f.type
    nullable = ctx.version in f.nullable_versions and not element_of_array
    compact = _compact(f, ctx)
    if kind in ("string", "bytes", "records"):
        n = src.local("n")
        _emit_length(src, d, n, compact, wide=kind != "string")
        src.emit(d, f"if {n} < 0:")
        if nullable:
            src.emit(d + 1, f"{target} = None")
        else:
            src.emit(d + 1, f"raise DecodeError('non-nullable field {f.name} was serialized as null')")
        src.emit(d, "else:")
        src.emit(d + 1, f"if pos + {n} > end: raise _truncated('{f.name}')")
        if kind == "string":
            src.emit(d + 1, f"{target} = buf[pos:pos + {n}].decode()")
        elif kind == "bytes":
            src.emit(d + 1, f"{target} = bytes(buf[pos:pos + {n}])")
        else:
            src.emit(d + 1, f"{target} = view[pos:pos + {n}]")
        src.emit(d + 1, f"pos += {n}")
        return
    if kind in _FIXED_FORMATS:
        fmt = src.struct_constant(_FIXED_FORMATS[kind])
        size = struct.calcsize(">" + _FIXED_FORMATS[kind])
        src.emit(d, f"{target}, = {fmt}.unpack_from(buf, pos)")
        src.emit(d, f"pos += {size}")
        if kind == "uuid":
            src.emit(d, f"{target} = _uuid({target})")
        return
    if f.is_array and not element_of_array:
        _emit_decode_array(src, d, f, target, ctx, classes, nullable, compact)
        return
    # a single (non-array) struct, possibly nullable: Kafka writes an int8 presence marker
    if nullable:
        marker = src.local("m")
        src.emit(d, f"{marker} = buf[pos]")
        src.emit(d, "pos += 1")
        src.emit(d, f"if {marker} >= 128:")
        src.emit(d + 1, f"{target} = None")
        src.emit(d, "else:")
        _emit_decode_struct(src, d + 1, f.struct_name, f.fields or (), target, ctx, classes)
    else:
        _emit_decode_struct(src, d, f.struct_name, f.fields or (), target, ctx, classes)


def _emit_decode_array(src: _Source, d: int, f: FieldSpec, target: str, ctx: _Context,
                       classes: dict[str, type], nullable: bool, compact: bool) -> None:
    n = src.local("n")
    _emit_length(src, d, n, compact, wide=True)
    src.emit(d, f"if {n} < 0:")
    if nullable:
        src.emit(d + 1, f"{target} = None")
    else:
        src.emit(d + 1, f"raise DecodeError('non-nullable array {f.name} was serialized as null')")
    src.emit(d, f"elif {n} > end - pos:")
    src.emit(d + 1, f"raise _truncated('{f.name}')")
    element_format = _FIXED_FORMATS.get(f.element_type)
    if element_format and f.element_type != "uuid":
        size = struct.calcsize(">" + element_format)
        src.emit(d, "else:")
        src.emit(d + 1, f"{target} = list(_unpack_from('>%d{element_format}' % {n}, buf, pos))")
        src.emit(d + 1, f"pos += {size} * {n}")
        return
    src.emit(d, "else:")
    src.emit(d + 1, f"{target} = []")
    item = src.local("item")
    src.emit(d + 1, f"for _ in range({n}):")
    if f.is_struct:
        _emit_decode_struct(src, d + 2, f.struct_name, f.fields or (), item, ctx, classes)
    else:
        _emit_decode_value(src, d + 2, f, item, ctx, classes, element_of_array=True)
    src.emit(d + 2, f"{target}.append({item})")


def _emit_decode_struct(src: _Source, d: int, name: str, fields: tuple[FieldSpec, ...],
                        target: str, ctx: _Context, classes: dict[str, type]) -> None:
    values: dict[str, str] = {}
    present = [f for f in _present(fields, ctx.version) if not _is_tagged(f, ctx)]
    tagged = [f for f in _present(fields, ctx.version) if _is_tagged(f, ctx)]
    groups = list(_groups(present))
    tag_count = None
    for index, group in enumerate(groups):
        if len(group) > 1 or _fixed(group[0]):
            fmt = "".join(_FIXED_FORMATS[f.type] for f in group)
            names = [src.local(f.attr[:12] + "_") for f in group]
            if ctx.flexible and index == len(groups) - 1:
                # the tagged-field count byte (almost always 0) rides along in the same call
                tag_count = src.local("ntag")
                fmt += "B"
                names.append(tag_count)
            const = src.struct_constant(fmt)
            src.emit(d, f"{', '.join(names)}, = {const}.unpack_from(buf, pos)")
            src.emit(d, f"pos += {struct.calcsize('>' + fmt)}")
            if tag_count:
                names.pop()
            for f, local in zip(group, names, strict=True):
                if f.type == "uuid":
                    src.emit(d, f"{local} = _uuid({local})")
                values[f.attr] = local
        else:
            f = group[0]
            local = src.local(f.attr[:12] + "_")
            _emit_decode_value(src, d, f, local, ctx, classes)
            values[f.attr] = local
    unknown = "None"
    if ctx.flexible:
        unknown = src.local("unknown")
        for f in tagged:
            local = src.local(f.attr[:12] + "_")
            src.emit(d, f"{local} = {_default_expression(f, classes)}")
            values[f.attr] = local
        src.emit(d, f"{unknown} = None")
        if tag_count:
            src.emit(d, f"if {tag_count}:")
            src.emit(d + 1, "pos -= 1")
        else:
            src.emit(d, "if buf[pos] == 0:")
            src.emit(d + 1, "pos += 1")
            src.emit(d, "else:")
        _emit_decode_tagged(src, d + 1, tagged, values, unknown, ctx, classes)
    args = []
    for f in fields:
        args.append(values.get(f.attr) or _default_expression(f, classes))
    if unknown != "None":
        args.append(unknown)
    src.emit(d, f"{target} = {name}({', '.join(args)})")


def _emit_decode_tagged(src: _Source, d: int, tagged: list[FieldSpec], values: dict[str, str],
                        unknown: str, ctx: _Context, classes: dict[str, type]) -> None:
    count, tag, size, tag_end = (src.local(h) for h in ("ntags", "tag", "size", "tagend"))
    src.emit(d, f"{count}, pos = _uvarint(buf, pos)")
    src.emit(d, f"if {count} > end - pos: raise _truncated('tagged fields')")
    src.emit(d, f"for _ in range({count}):")
    src.emit(d + 1, f"{tag}, pos = _uvarint(buf, pos)")
    src.emit(d + 1, f"{size}, pos = _uvarint(buf, pos)")
    src.emit(d + 1, f"{tag_end} = pos + {size}")
    src.emit(d + 1, f"if {tag_end} > end: raise _truncated('tagged field')")
    keyword = "if"
    for f in tagged:
        src.emit(d + 1, f"{keyword} {tag} == {f.tag}:")
        _emit_decode_value(src, d + 2, f, values[f.attr], ctx, classes)
        src.emit(d + 2, f"if pos != {tag_end}: raise DecodeError('tagged field {f.name} has wrong size')")
        keyword = "elif"
    src.emit(d + 1, "else:" if tagged else "if True:")
    src.emit(d + 2, f"if {unknown} is None: {unknown} = {{}}")
    src.emit(d + 2, f"{unknown}[{tag}] = bytes(buf[pos:{tag_end}])")
    src.emit(d + 2, f"pos = {tag_end}")


# ---------------------------------------------------------------------------------------
# Encoder generation
# ---------------------------------------------------------------------------------------

def _emit_write_length(src: _Source, d: int, length_expr: str, compact: bool, wide: bool,
                       out: str) -> None:
    if compact:
        n = src.local("n")
        src.emit(d, f"{n} = {length_expr} + 1")
        src.emit(d, f"if {n} < 128: {out}.append({n})")
        src.emit(d, f"else: {out} += _enc_uvarint({n})")
    else:
        fmt = src.struct_constant("i" if wide else "h")
        src.emit(d, f"{out} += {fmt}.pack({length_expr})")


def _emit_write_null(src: _Source, d: int, compact: bool, wide: bool, out: str) -> None:
    if compact:
        src.emit(d, f"{out}.append(0)")
    else:
        null_length = b"\xff" * (4 if wide else 2)
        src.emit(d, f"{out} += {null_length!r}")


def _emit_encode_value(src: _Source, d: int, f: FieldSpec, value: str, ctx: _Context,
                       out: str, element_of_array: bool = False) -> None:
    kind = f.element_type if element_of_array else f.type
    nullable = ctx.version in f.nullable_versions and not element_of_array
    compact = _compact(f, ctx)
    if kind in ("string", "bytes", "records"):
        wide = kind != "string"
        src.emit(d, f"if {value} is None:")
        if nullable:
            _emit_write_null(src, d + 1, compact, wide, out)
        else:
            src.emit(d + 1, f"raise EncodeError('field {f.name} is not nullable in version {ctx.version}')")
        if kind == "string":
            raw = src.local("raw")
            src.emit(d, "else:")
            src.emit(d + 1, f"{raw} = {value}.encode()")
            _emit_write_length(src, d + 1, f"len({raw})", compact, wide, out)
            src.emit(d + 1, f"{out} += {raw}")
        elif kind == "bytes":
            src.emit(d, "else:")
            _emit_write_length(src, d + 1, f"len({value})", compact, wide, out)
            src.emit(d + 1, f"{out} += {value}")
        else:
            src.emit(d, f"elif isinstance({value}, _BYTES_LIKE):")
            _emit_write_length(src, d + 1, f"len({value})", compact, wide, out)
            src.emit(d + 1, f"{out} += {value}")
            src.emit(d, "else:")
            _emit_write_length(src, d + 1, f"len({value})", compact, wide, out)
            src.emit(d + 1, f"regions.append((len({out}), {value}))")
        return
    if kind in _FIXED_FORMATS:
        fmt = src.struct_constant(_FIXED_FORMATS[kind])
        arg = _uuid_bytes_expression(value) if kind == "uuid" else value
        src.emit(d, f"{out} += {fmt}.pack({arg})")
        return
    if f.is_array and not element_of_array:
        src.emit(d, f"if {value} is None:")
        if nullable:
            _emit_write_null(src, d + 1, compact, True, out)
        else:
            src.emit(d + 1, f"raise EncodeError('array {f.name} is not nullable in version {ctx.version}')")
        src.emit(d, "else:")
        _emit_write_length(src, d + 1, f"len({value})", compact, True, out)
        element_format = _FIXED_FORMATS.get(f.element_type)
        if element_format and f.element_type != "uuid":
            packer = src.array_packer(element_format)
            src.emit(d + 1, f"if {value}: {out} += {packer}(len({value}))(*{value})")
            return
        item = src.local("item")
        src.emit(d + 1, f"for {item} in {value}:")
        if f.is_struct:
            _emit_encode_struct(src, d + 2, f.fields or (), item, ctx, out)
        else:
            _emit_encode_value(src, d + 2, f, item, ctx, out, element_of_array=True)
        return
    if nullable:
        src.emit(d, f"if {value} is None:")
        src.emit(d + 1, f"{out}.append(255)")
        src.emit(d, "else:")
        src.emit(d + 1, f"{out}.append(1)")
        _emit_encode_struct(src, d + 1, f.fields or (), value, ctx, out)
    else:
        _emit_encode_struct(src, d, f.fields or (), value, ctx, out)


def _uuid_bytes_expression(value: str) -> str:
    """Inline UUID -> 16 bytes (None, as kio and some callers use, means the zero UUID)."""
    return f"(_ZERO_UUID_BYTES if {value} is None else {value}.int.to_bytes(16, 'big'))"


def _emit_encode_struct(src: _Source, d: int, fields: tuple[FieldSpec, ...], obj: str,
                        ctx: _Context, out: str) -> None:
    for f in fields:
        if ctx.version not in f.versions and not f.ignorable:
            # Kafka refuses to silently drop a non-ignorable field the version cannot carry
            src.emit(d, f"if {_differs_from_default(f'{obj}.{f.attr}', f)}:")
            src.emit(d + 1, f"raise EncodeError('field {f.name} cannot be sent in version {ctx.version}')")
    present = [f for f in _present(fields, ctx.version) if not _is_tagged(f, ctx)]
    tagged = [f for f in _present(fields, ctx.version) if _is_tagged(f, ctx)]
    for group in _groups(present):
        if len(group) > 1 or _fixed(group[0]):
            fmt = "".join(_FIXED_FORMATS[f.type] for f in group)
            const = src.struct_constant(fmt)
            args = ", ".join(_uuid_bytes_expression(f"{obj}.{f.attr}") if f.type == "uuid"
                             else f"{obj}.{f.attr}" for f in group)
            src.emit(d, f"{out} += {const}.pack({args})")
        else:
            f = group[0]
            local = src.local(f.attr[:12] + "_")
            src.emit(d, f"{local} = {obj}.{f.attr}")
            _emit_encode_value(src, d, f, local, ctx, out)
    if not ctx.flexible:
        return
    if not tagged:
        src.emit(d, f"if {obj}._unknown_tags: _write_tags({out}, list({obj}._unknown_tags.items()))")
        src.emit(d, f"else: {out}.append(0)")
        return
    found = src.local("tagged")
    src.emit(d, f"{found} = list({obj}._unknown_tags.items()) if {obj}._unknown_tags else []")
    for f in tagged:
        local = src.local(f.attr[:12] + "_")
        buffer = src.local("tagbuf")
        src.emit(d, f"{local} = {obj}.{f.attr}")
        src.emit(d, f"if {_differs_from_default(local, f)}:")
        src.emit(d + 1, f"{buffer} = bytearray()")
        _emit_encode_value(src, d + 1, f, local, ctx, buffer)
        src.emit(d + 1, f"{found}.append(({f.tag}, {buffer}))")
    src.emit(d, f"if {found}: _write_tags({out}, {found})")
    src.emit(d, f"else: {out}.append(0)")


def _differs_from_default(value: str, f: FieldSpec) -> str:
    """An expression true when a tagged field must be written (Kafka skips default values).

    Written out field by field: building a default object and comparing with __eq__ would
    cost microseconds per partition in a FetchResponse.
    """
    if f.is_array:
        return f"{value} is not None" if f.default is None else f"{value} != []"
    if f.is_struct:
        if f.default is None and not f.nullable_versions.empty:
            return f"{value} is not None"
        parts = [_differs_from_default(f"{value}.{child.attr}", child) for child in f.fields or ()]
        return "(" + " or ".join(parts) + ")" if parts else "False"
    if f.type == "uuid":
        return f"{value} != _ZERO_UUID"
    return f"{value} != {f.default!r}"


# ---------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------

def _has_records(fields: tuple[FieldSpec, ...]) -> bool:
    return any(f.type == "records" or (f.fields is not None and _has_records(f.fields)) for f in fields)


@dataclass(frozen=True)
class GeneratedCodec:
    decode: object   # (buf, pos) -> (obj, pos)
    encode: object   # (obj, out, regions) -> None
    source: str


def generate(message: MessageSpec, version: int, classes: dict[str, type],
             flexible: bool | None = None) -> GeneratedCodec:
    """Compile the decoder and encoder of one message version into plain functions."""
    ctx = _Context(version, message.is_flexible(version) if flexible is None else flexible)
    src = _Source()
    src.emit(0, "def decode(buf, pos=0):")
    if _has_records(message.fields):
        src.emit(1, "view = memoryview(buf)")
    src.emit(1, "if type(buf) is memoryview: buf = bytes(buf)  # bytes and bytearray are read in place")
    src.emit(1, "end = len(buf)")
    src.emit(1, "try:")
    _emit_decode_struct(src, 2, message.name, message.fields, "obj", ctx, classes)
    src.emit(1, "except DecodeError:")
    src.emit(2, "raise")
    src.emit(1, "except (_struct_error, IndexError, ValueError, OverflowError) as error:")
    src.emit(2, f"raise DecodeError('malformed {message.name} v{version}: %s' % error) from None")
    src.emit(1, "return obj, pos")
    src.emit(0, "")
    src.emit(0, "def encode(obj, out, regions):")
    src.emit(1, "try:")
    src.emit(2, "pass")
    _emit_encode_struct(src, 2, message.fields, "obj", ctx, "out")
    src.emit(1, "except EncodeError:")
    src.emit(2, "raise")
    src.emit(1, "except (_struct_error, AttributeError, TypeError, UnicodeError) as error:")
    src.emit(2, f"raise EncodeError('cannot encode {message.name} v{version}: %s' % error) from None")
    source = "\n".join(src.lines) + "\n"
    namespace: dict[str, object] = dict(_RUNTIME)
    namespace.update(src.constants)
    namespace.update(classes)
    code = compile(source, f"<wire {message.name} v{version}>", "exec")
    exec(code, namespace)  # source generated from the spec above
    return GeneratedCodec(namespace["decode"], namespace["encode"], source)
