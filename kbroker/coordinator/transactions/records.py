"""`__transaction_state` records in Kafka's format: TransactionLogKey (version 0) -> TransactionLogValue
(version 0, as Kafka 3.9 writes it; version 1 read too), each behind its int16 version, so Kafka's tools
and brokers read kbroker's log and kbroker loads Kafka's."""

from __future__ import annotations

import struct

from kbroker.coordinator.transactions.metadata import TransactionMetadata, TxnState
from wire import messages

TRANSACTION_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
TRANSACTIONS_V2 = 2
_VERSION = struct.Struct(">h")


def encode_key(transactional_id: str) -> bytes:
    key = messages.TransactionLogKey(transactional_id=transactional_id)
    return _VERSION.pack(KEY_VERSION) + bytes(messages.encode(key, KEY_VERSION))


def decode_key(key: bytes) -> str | None:
    """The transactional id; None for a key of a version Kafka never wrote here."""
    (version,) = _VERSION.unpack_from(key, 0)
    if version != KEY_VERSION:
        return None
    return messages.decode("TransactionLogKey", version, key, 2)[0].transactional_id


def encode_value(metadata: TransactionMetadata) -> bytes:
    """Kafka writes no partitions (null) while Empty, and the partitions grouped by topic otherwise. A transactions v2
    state is version 1, with the client's transactions version and the previous and next producer ids as Kafka 4
    tags them (Kafka 3.9 reads version 1 too); a v1 state stays version 0, as Kafka 3.9 writes it."""
    Partitions = messages.classes("TransactionLogValue")["PartitionsSchema"]
    partitions = None if metadata.state == TxnState.EMPTY else [
        Partitions(topic=topic, partition_ids=ids) for topic, ids in metadata.topics().items()]
    value = messages.TransactionLogValue(
        producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
        transaction_timeout_ms=metadata.timeout_ms, transaction_status=int(metadata.state),
        transaction_partitions=partitions, transaction_last_update_timestamp_ms=metadata.last_update_ms,
        transaction_start_timestamp_ms=metadata.start_ms)
    version = VALUE_VERSION
    if metadata.client_tv >= TRANSACTIONS_V2:
        version = FLEXIBLE_VALUE_VERSION
        value.client_transaction_version = metadata.client_tv
        value.previous_producer_id = metadata.last_producer_id
        value.next_producer_id = metadata.next_producer_id
    return _VERSION.pack(version) + bytes(messages.encode(value, version))


def decode_value(transactional_id: str, value: bytes) -> TransactionMetadata:
    (version,) = _VERSION.unpack_from(value, 0)
    decoded, _ = messages.decode("TransactionLogValue", version, value, 2)
    partitions = frozenset((p.topic, index) for p in decoded.transaction_partitions or () for index in p.partition_ids)
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=decoded.producer_id, producer_epoch=decoded.producer_epoch,
        timeout_ms=decoded.transaction_timeout_ms, state=TxnState(decoded.transaction_status), partitions=partitions,
        start_ms=decoded.transaction_start_timestamp_ms, last_update_ms=decoded.transaction_last_update_timestamp_ms,
        last_producer_id=decoded.previous_producer_id, next_producer_id=decoded.next_producer_id,
        client_tv=decoded.client_transaction_version)
