"""`<base>.txnindex`: the aborted transactions whose ABORT marker lies in a segment (Kafka's TransactionIndex).

Why it exists: a READ_COMMITTED consumer must learn which producers' records to drop in the range it
fetched without the broker reading those records, and the cleaner must know which transactional
batches it may remove. Each entry is 34 big-endian bytes, Kafka's AbortedTxn: int16 version (0),
int64 producer id, int64 first offset of the transaction, int64 last offset (its ABORT marker's),
int64 last stable offset when the marker was written (the first offset of the oldest other open
transaction, else the marker's offset + 1). Entries are appended in marker order.

As in Kafka the file is created by its first entry only (most segments never see an abort), never
preallocated, cut by `truncate_to`, emptied and rebuilt by recovery, and renamed and deleted with its
segment. Like kbroker's other indexes (kbroker.log._index) it holds no descriptor between operations:
an append opens it in O_APPEND, a lookup preads the whole file, which stays small. Only the entry
count is kept in memory, so a segment without aborts is never read.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from kbroker.log.errors import CorruptIndexError

__all__ = ["ENTRY_SIZE", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult"]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, its offsets, and the LSO when its marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        """The entry's 34 bytes, version 0."""
        return _ENTRY.pack(_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    """Kafka's TxnIndexSearchResult: the overlapping entries, and whether later segments can hold no more."""

    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex:
    """The aborted transactions of one segment; see the module docstring."""

    SUFFIX = TXN_INDEX_SUFFIX

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        try:
            self._size = os.stat(self.path).st_size
            self._exists = True
        except FileNotFoundError:
            self._size, self._exists = 0, False
        self._last_offset: int | None = None  # as Kafka: unknown until the first append after opening
        self._needs_fsync = False

    # --- state ---------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        """Whole entries in the file (a torn trailing entry does not count)."""
        return self._size // ENTRY_SIZE

    @property
    def exists(self) -> bool:
        """Whether the file is there (it is created by the first entry)."""
        return self._exists

    @property
    def size_bytes(self) -> int:
        return self._size

    # --- writing -------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> bool:
        """Add an entry (creating the file if needed); returns whether the file was created, so the
        caller knows the directory changed. Last offsets must increase, as Kafka requires."""
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise ValueError(
                f"{self.path}: last offset {txn.last_offset} of an aborted transaction is not above "
                f"the index's last one {self._last_offset}"
            )
        created = not self._exists
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = memoryview(txn.encode())
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        self._exists = True
        self._size += ENTRY_SIZE
        self._last_offset = txn.last_offset
        self._needs_fsync = True
        return created

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (and everything after the first such one)."""
        if not self.entries:
            return
        previous: int | None = None
        for slot, txn in enumerate(self._read_all()):
            if txn.last_offset >= offset:
                self._truncate(slot * ENTRY_SIZE)
                self._last_offset = previous
                return
            previous = txn.last_offset

    def reset(self) -> None:
        """Forget every entry (recovery rebuilds them); an existing file stays, empty, as in Kafka."""
        self._truncate(0)
        self._last_offset = None

    def _truncate(self, size: int) -> None:
        if self._exists and size != self._size:
            os.truncate(self.path, size)
            self._size = size
            self._needs_fsync = True

    def flush(self) -> None:
        """fsync the file if it changed since the last flush (Kafka forces the channel with metadata)."""
        if not (self._needs_fsync and self._exists):
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._needs_fsync = False

    def close(self) -> None:
        """Nothing is held open; kept for symmetry with the other indexes."""

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._exists, self._size = False, 0

    def rename(self, new_path: Path) -> None:
        """Move the file, if there is one; later writes go to the new name."""
        if self._exists:
            os.rename(self.path, new_path)
        self.path = Path(new_path)

    # --- reading -------------------------------------------------------------------------

    def _read_all(self) -> list[AbortedTxn]:
        count = self.entries
        if not count:
            return []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            parts, done, want = [], 0, count * ENTRY_SIZE
            while done < want:
                chunk = os.pread(fd, want - done, done)
                if not chunk:
                    break
                parts.append(chunk)
                done += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(parts)
        found = []
        for version, *fields in _ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE]):
            if version > _VERSION:
                raise CorruptIndexError(f"{self.path}: unexpected aborted transaction version {version}")
            found.append(AbortedTxn(*fields))
        return found

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return self._read_all()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset); `complete` once an entry's LSO reaches the
        upper bound: no transaction aborted in a later segment can then overlap the range (Kafka's rule)."""
        found: list[AbortedTxn] = []
        if not self._size:
            return TxnIndexSearchResult(found, False)
        for txn in self._read_all():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Kafka's check (no entry ends before the segment starts), plus a whole number of entries;
        CorruptIndexError makes the loader rebuild the segment's indexes."""
        if self._size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {self._size} is not a multiple of {ENTRY_SIZE}")
        for txn in self._read_all():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: last offset of aborted transaction {txn} is below the segment's base "
                    f"offset {self.base_offset}"
                )

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self.path)!r}, entries={self.entries})"
