"""Exceptions the storage layer raises, each tagged with the Kafka error code it stands for.

The request handlers catch these and put `error_code` in the response; nothing here knows
about responses. Corrupt batches raise `wire.exceptions.CorruptRecordError` (CORRUPT_MESSAGE)
unchanged, since that is the type the codec already uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "InconsistentMetadataError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "LogDirLockedError",
    "LogDirOfflineError",
    "LogError",
    "LogSegmentOffsetOverflowError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordError",
    "RecordTooLargeError",
    "RecordValidationError",
    "TransactionCoordinatorFencedError",
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


class RecordError(NamedTuple):
    """One refused record (KIP-467): its place in its batch and why, as Kafka's ProduceResponse.RecordError."""

    batch_index: int
    message: str

    def __str__(self) -> str:
        return f"RecordError(batchIndex={self.batch_index}, message='{self.message}')"  # Java's toString


class RecordValidationError(LogError):
    """Records of an intact batch that break Kafka's per-record rules (a compacted topic's missing
    key, a timestamp out of bounds). Kafka refuses the whole batch, lists every offending record in
    the produce response's record_errors, and sums them up in its error_message: INVALID_TIMESTAMP if
    any timestamp is at fault, else INVALID_RECORD with the first three listed."""

    def __init__(self, record_errors: Sequence[RecordError], invalid_timestamp: bool) -> None:
        self.record_errors = tuple(record_errors)
        self.error_code = ErrorCode.INVALID_TIMESTAMP if invalid_timestamp else ErrorCode.INVALID_RECORD
        if invalid_timestamp:
            summary = "One or more records have been rejected due to invalid timestamp"
        else:
            first = ", ".join(str(error) for error in self.record_errors[:3])
            summary = (f"One or more records have been rejected due to {len(self.record_errors)} record errors "
                       f"in total, and only showing the first three errors at most: [{first}]")
        super().__init__(summary)


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


class LogDirOfflineError(LogError):
    """The partition's log dir went offline after an I/O error (Kafka's KafkaStorageException):
    its logs are closed until the broker restarts, and clients are told KAFKA_STORAGE_ERROR."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class InconsistentMetadataError(LogError):
    """`meta.properties` disagrees with this broker (broker.id) or across log dirs (cluster.id)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidProducerEpochError(LogError):
    """A batch's producer epoch is below the one stored for its producer id (a zombie).

    Kafka (since 2.7) answers a produce request with INVALID_PRODUCER_EPOCH here rather than
    PRODUCER_FENCED, so the client may abort and retry instead of treating it as fatal.
    """

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class OutOfOrderSequenceError(LogError):
    """A batch's first sequence does not follow the producer's last one (a gap or a reorder),
    or a new epoch does not start at sequence 0."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidTxnStateError(LogError):
    """A non-transactional batch from a producer whose transaction is still open."""

    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(LogError):
    """A COMMIT/ABORT marker whose coordinator epoch is below the one stored for its producer: it comes
    from a transaction coordinator that has since been replaced (Kafka's TransactionCoordinatorFencedException)."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class CorruptSnapshotError(LogError):
    """A `.snapshot` producer-state file fails its version, length or CRC check; the loader
    deletes it and falls back to an older snapshot or the log itself."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
