"""The one exception type malformed input raises, whatever part of `wire` read it."""


class DecodeError(ValueError):
    """Input bytes are not a valid encoding of what the caller asked to decode."""


class EncodeError(ValueError):
    """A value cannot be written in the requested version (wrong type, out of range)."""


class CorruptRecordError(DecodeError):
    """A record batch failed its CRC or structural checks (Kafka's CORRUPT_MESSAGE)."""


class RecordLayoutError(CorruptRecordError):
    """A batch whose CRC holds but whose records disagree with its header: fewer or more records
    than its count, a record length outside the batch, bytes after the last record. Kafka
    refuses such a produced batch with INVALID_RECORD, not CORRUPT_MESSAGE."""
