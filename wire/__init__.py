"""Kafka's bytes and nothing else: sans-I/O codecs for every API, record batches, compression.

`wire` never opens a socket or a file and never imports `kbroker`.
"""

from wire.exceptions import CorruptRecordError, DecodeError, EncodeError

__all__ = ["CorruptRecordError", "DecodeError", "EncodeError"]
