"""Exceptions the storage layer raises, each tagged with the Kafka error code it stands for.

The request handlers catch these and put `error_code` in the response; nothing here knows
about responses. Corrupt batches raise `wire.exceptions.CorruptRecordError` (CORRUPT_MESSAGE)
unchanged, since that is the type the codec already uses.
"""

from __future__ import annotations

from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "InconsistentMetadataError",
    "InvalidRecordError",
    "LogDirLockedError",
    "LogError",
    "LogSegmentOffsetOverflowError",
    "OffsetOutOfRangeError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "UnsupportedMessageFormatError",
]


class LogError(Exception):
    """Base of every storage error; `error_code` is what a client should be told."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """A fetch/seek offset outside [log start offset, log end offset]."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(LogError):
    """One batch is larger than the topic's max.message.bytes."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(LogError):
    """The produced records are larger than a whole segment (segment.bytes)."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidRecordError(LogError):
    """A batch that is intact (CRC passes) but breaks Kafka's rules for what a client may write."""

    error_code = ErrorCode.INVALID_RECORD


class UnsupportedMessageFormatError(LogError):
    """Legacy message format v0/v1 on the produce path; kbroker stores magic 2 only."""

    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class CorruptIndexError(LogError):
    """An index file fails its sanity checks; the loader rebuilds it from the log."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogSegmentOffsetOverflowError(LogError):
    """An offset does not fit the int32 relative offset a segment's indexes store."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogDirLockedError(LogError):
    """Another process holds the log directory's `.lock`, as Kafka refuses to share one."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class InconsistentMetadataError(LogError):
    """`meta.properties` disagrees with this broker (broker.id) or across log dirs (cluster.id)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
