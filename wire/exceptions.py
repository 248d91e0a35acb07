"""The one exception type malformed input raises, whatever part of `wire` read it."""


class DecodeError(ValueError):
    """Input bytes are not a valid encoding of what the caller asked to decode."""


class EncodeError(ValueError):
    """A value cannot be written in the requested version (wrong type, out of range)."""


class CorruptRecordError(DecodeError):
    """A record batch failed its CRC or structural checks (Kafka's CORRUPT_MESSAGE)."""
