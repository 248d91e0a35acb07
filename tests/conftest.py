"""Shared fixtures (kept minimal)."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest


class _Xxh32Digest:
    """Just enough of the `xxhash.xxh32` object API for kafka.codec's lz4 0.8/0.9 helpers."""

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)

    def digest(self) -> bytes:
        from wire.compression import xxh32

        return xxh32(self._data).to_bytes(4, "big")


@pytest.fixture
def xxhash_shim(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let kafka-python write/read magic-0 lz4 without the optional `xxhash` package.

    kafka-python still decides which bytes to hash and where the checksum goes; only the
    hash primitive is ours, and test_compression checks it against the lz4 C library.
    """
    import kafka.codec

    if kafka.codec.xxhash is None:
        monkeypatch.setattr(kafka.codec, "xxhash", types.SimpleNamespace(xxh32=_Xxh32Digest))
    yield
