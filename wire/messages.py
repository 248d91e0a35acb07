"""Every Kafka message by name and every API by key, with codecs generated on first use.

    from wire import messages
    request, end = messages.decode("ProduceRequest", 9, buf)
    body = messages.encode(response, 9)            # bytearray
    messages.ProduceRequest                        # the generated class (lazy)

Each (message, version) is compiled once, the first time it is needed, and cached; the
broker thus starts without compiling the few thousand codecs it may never use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from wire.codegen import GeneratedCodec, Message, build_classes, generate
from wire.exceptions import EncodeError
from wire.schema import MessageSpec, Versions, all_specs

# Header versions outside the spec's validVersions that Kafka still parses: request header
# v0 (no client id) and response header v0.
_EXTRA_VERSIONS = {"RequestHeader": Versions(0, 2), "ResponseHeader": Versions(0, 1)}


class UnsupportedVersion(LookupError):
    """The spec does not define this version of the message."""


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str                 # "Produce", "Metadata", ...
    request: MessageSpec
    response: MessageSpec

    @property
    def versions(self) -> Versions:
        return self.request.valid_versions

    def is_flexible(self, version: int) -> bool:
        return self.request.is_flexible(version)


@functools.cache
def apis() -> dict[int, Api]:
    """Every API key that has both a request and a response spec."""
    specs = all_specs()
    found: dict[int, Api] = {}
    for name, request in specs.items():
        if request.kind != "request" or request.api_key is None:
            continue
        base = name.removesuffix("Request")
        response = specs.get(base + "Response")
        if response is not None:
            found[request.api_key] = Api(request.api_key, base, request, response)
    return dict(sorted(found.items()))


def api(key: int) -> Api:
    return apis()[key]


def valid_versions(name: str) -> Versions:
    return _EXTRA_VERSIONS.get(name) or all_specs()[name].valid_versions


@functools.cache
def classes(name: str) -> dict[str, type]:
    """The generated classes of one message: the top-level one is `classes(name)[name]`."""
    return build_classes(all_specs()[name])


@functools.cache
def codec(name: str, version: int) -> GeneratedCodec:
    if version not in valid_versions(name):
        raise UnsupportedVersion(f"{name} has no version {version}")
    return generate(all_specs()[name], version, classes(name))


def decode(name: str, version: int, buf, pos: int = 0):
    """Decode one message body at `pos`; returns `(obj, end_position)`."""
    return codec(name, version).decode(buf, pos)


def encode(obj: Message, version: int, out: bytearray | None = None,
           regions: list | None = None) -> bytearray:
    """Append `obj` encoded at `version` to `out` (a new bytearray if None) and return it.

    A `records` value that is not bytes-like is left out and noted in `regions` (see
    wire.codegen); passing no `regions` list then raises EncodeError.
    """
    if out is None:
        out = bytearray()
    deferred: list = [] if regions is None else regions
    codec(type(obj).__name__, version).encode(obj, out, deferred)
    if deferred and regions is None:
        raise EncodeError("records value is not bytes-like and no regions list was given")
    return out


def __getattr__(name: str) -> type:
    if name in all_specs():
        return classes(name)[name]
    raise AttributeError(f"module 'wire.messages' has no attribute {name!r}")
