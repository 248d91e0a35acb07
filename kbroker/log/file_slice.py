"""A byte range of a segment file: what a fetch hands to the network layer for sendfile."""

from __future__ import annotations

import os
from typing import BinaryIO

__all__ = ["FileSlice"]


class FileSlice:
    """Bytes [position, position + length) of an open segment file, never read into Python.

    The network layer passes `fileno()`, `position` and `len()` to `os.sendfile`. The slice
    keeps the file object alive, not a bare fd number, so a slice outliving its segment
    fails loudly (ValueError from `fileno()`) instead of sending whatever file reused the
    number. Segments are deleted `file.delete.delay.ms` after they leave the log (as in
    Kafka), so in-flight slices normally stay valid.
    """

    __slots__ = ("file", "length", "position")

    def __init__(self, file: BinaryIO, position: int, length: int) -> None:
        if position < 0 or length < 0:
            raise ValueError(f"bad slice position={position} length={length}")
        self.file = file
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.file.fileno()

    def read_bytes(self) -> bytes:
        """The slice's bytes, for tests and for paths that cannot use sendfile (e.g. TLS)."""
        fd = self.fileno()
        parts: list[bytes] = []
        done = 0
        while done < self.length:
            chunk = os.pread(fd, self.length - done, self.position + done)
            if not chunk:
                raise EOFError(f"segment file ends before slice end ({done} of {self.length} bytes)")
            parts.append(chunk)
            done += len(chunk)
        return b"".join(parts)

    def __bytes__(self) -> bytes:
        return self.read_bytes()

    def __repr__(self) -> str:
        fd = "closed" if self.file.closed else self.file.fileno()
        return f"FileSlice(fd={fd}, position={self.position}, length={self.length})"
