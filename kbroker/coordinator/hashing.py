"""Which `__consumer_offsets` partition a group lives in, computed exactly as Kafka does.

Kafka uses `Utils.abs(groupId.hashCode()) % partitions`; clients and tools compute the
same value, so ours must match bit for bit (Java's String.hashCode over UTF-16 code units,
with abs(Integer.MIN_VALUE) taken as 0).
"""

from __future__ import annotations

import functools

_INT32_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, in signed 32-bit arithmetic."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)  # every commit, join and fetch of a group asks again
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's partitionFor: Utils.abs (MIN_VALUE maps to 0) of the hash, modulo the count."""
    h = java_string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
