"""Storage: Kafka's on-disk log format, byte for byte (segments, indexes, checkpoints).

Knows nothing of sockets. The request handlers use `LogManager` to find a `PartitionLog`,
call `append` on produce and `read` on fetch (which returns a `FileSlice` for sendfile).
`LogManager.start_cleaner` compacts `cleanup.policy=compact` logs in the background.
"""

from kbroker.log.cleaner import CleanerConfig, LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InconsistentMetadataError,
    InvalidRecordError,
    LogDirLockedError,
    LogError,
    LogSegmentOffsetOverflowError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordError,
    RecordTooLargeError,
    RecordValidationError,
    TransactionCoordinatorFencedError,
    UnsupportedMessageFormatError,
)
from kbroker.log.file_slice import FileSlice
from kbroker.log.manager import LogManager
from kbroker.log.offset_index import OffsetIndex, OffsetPosition
from kbroker.log.partition_log import AppendInfo, OffsetAndTimestamp, PartitionLog
from kbroker.log.segment import LogSegment
from kbroker.log.time_index import TimeIndex, TimestampOffset
from kbroker.log.transaction_index import AbortedTxn, TransactionIndex

__all__ = [
    "AbortedTxn",
    "AppendInfo",
    "CleanerConfig",
    "CorruptIndexError",
    "CorruptRecordError",
    "FileSlice",
    "InconsistentMetadataError",
    "InvalidRecordError",
    "LogCleaner",
    "LogConfig",
    "LogDirLockedError",
    "LogError",
    "LogManager",
    "LogSegment",
    "LogSegmentOffsetOverflowError",
    "OffsetAndTimestamp",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OffsetPosition",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "RecordError",
    "RecordTooLargeError",
    "RecordValidationError",
    "TimeIndex",
    "TimestampOffset",
    "TransactionCoordinatorFencedError",
    "TransactionIndex",
    "UnsupportedMessageFormatError",
]
