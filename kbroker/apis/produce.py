"""Produce (0): validate batches, append them as the partitions' leader, answer per partition.

The replica manager decides whether this broker may append (NOT_LEADER_OR_FOLLOWER), whether the ISR
is large enough for acks=all (NOT_ENOUGH_REPLICAS, before anything is written), and when an
acks=all append is acknowledged: once every partition's high watermark reaches the end of what it
appended, or the request's timeout_ms passes (REQUEST_TIMED_OUT). A single node's ISR is itself,
so its acks=all answers at once.
"""

from __future__ import annotations

import asyncio
import logging

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.cluster.partition import Partition, ReplicationError
from kbroker.coordinator.transactions.records import TRANSACTIONS_V2
from kbroker.log.errors import LogError, RecordError, RecordValidationError
from wire import messages
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError, DecodeError
from wire.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_batch_header
from wire.schema import ZERO_UUID

Response = messages.ProduceResponse
logger = logging.getLogger(__name__)


_LEADER_UNCHANGED = Response.LeaderIdAndEpoch()  # (-1, -1): read only by the encoder, so one will do
VALID_ACKS = (-1, 0, 1)


def _partition_response(index: int, error: int, base_offset: int = -1, append_time: int = -1,
                        log_start: int = -1, message: str | None = None, record_errors: tuple[RecordError, ...] = ()):
    return Response.PartitionProduceResponse(index=index, error_code=error, base_offset=base_offset,
                                             log_append_time_ms=append_time, log_start_offset=log_start,
                                             record_errors=[_record_error(e) for e in record_errors],
                                             error_message=message, current_leader=_LEADER_UNCHANGED)


def _record_error(error: RecordError):
    """One refused record as the response lists it (KIP-467, v8+)."""
    return Response.BatchIndexAndErrorMessage(batch_index=error.batch_index,
                                              batch_index_error_message=error.message)


def _topic_refusal(broker: Broker, topic_name: str | None, acks: int) -> ErrorCode | None:
    """The error every partition of a topic gets before any append, if there is one."""
    if topic_name is None or topic_name not in broker.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if acks not in VALID_ACKS:
        return ErrorCode.INVALID_REQUIRED_ACKS
    return None


def _append(broker: Broker, topic_name: str, partition, now: int, acks: int):
    """(the partition's answer, the offset its HW must reach for acks=all, or None if nothing was appended)."""
    found = broker.replicas.lookup(topic_name, partition.index)
    if not isinstance(found, Partition):
        return _partition_response(partition.index, found), None
    records = partition.records
    if records is None or len(records) == 0:
        return _partition_response(partition.index, ErrorCode.CORRUPT_MESSAGE, message="no records"), None
    log = found.log
    try:
        info = found.append_as_leader(records, now, acks)
    except ReplicationError as error:  # Kafka sends no message with these
        return _partition_response(partition.index, error.error_code), None
    except (CorruptRecordError, DecodeError) as error:
        return _partition_response(partition.index, ErrorCode.CORRUPT_MESSAGE, message=str(error)), None
    except RecordValidationError as error:  # the records at fault, each named, and Kafka's summary
        return _partition_response(partition.index, error.error_code, message=str(error),
                                   record_errors=error.record_errors), None
    except LogError as error:
        return _partition_response(partition.index, error.error_code, message=str(error)), None
    except OSError as error:  # the disk refused the write (full, failing): its log dir goes offline, as in Kafka
        offline = broker.logs.io_error(log, error, f"appending records to {topic_name}-{partition.index}")
        return _partition_response(partition.index, offline.error_code, message=str(offline)), None
    except ValueError:
        if not log.closed:
            raise
        # its dir failed on another thread (the flusher) since the log was looked up
        return _partition_response(partition.index, broker.partition_error(topic_name, partition.index)), None
    broker.notify_appended(topic_name, partition.index)  # followers and long-polling fetches
    if broker.metrics is not None and not info.duplicate:
        broker.metrics.produced(topic_name, info.record_count, len(records))
    return (_partition_response(partition.index, ErrorCode.NONE, info.first_offset, info.log_append_time,
                                info.log_start_offset), info.last_offset + 1)


_MAGIC_OFFSET, _ATTRIBUTES_LOW = 16, 22  # a batch's magic byte; the low byte of its attributes (codec, flags)
CODEC_MASK, TRANSACTIONAL_FLAG = 0x07, 0x10
ZSTD_CODEC, ZSTD_FROM = 4, 7  # Produce v7 is the first that may carry zstd batches (KIP-110)
MIN_RECORD_OVERHEAD = 14  # LegacyRecord.RECORD_OVERHEAD_V0: the least size field Kafka's batch iterator takes


class CorruptBatch(Exception):
    """Kafka's batch iterator (ByteBufferLogInputStream) refuses a header: CorruptRecordException, its message."""


def _batch_end(records, position: int) -> int | None:
    """Where the whole batch at `position` ends, as Kafka's batch iterator reads it; None when no whole batch is
    left (a cut tail ends the walk)."""
    remaining = len(records) - position
    if remaining < LOG_OVERHEAD:
        return None
    size = int.from_bytes(records[position + 8:position + LOG_OVERHEAD], "big", signed=True)
    if size < MIN_RECORD_OVERHEAD:
        raise CorruptBatch(f"Record size {size} is less than the minimum record overhead ({MIN_RECORD_OVERHEAD})")
    if remaining <= _MAGIC_OFFSET:
        return None
    magic = int.from_bytes(records[position + _MAGIC_OFFSET:position + _MAGIC_OFFSET + 1], "big", signed=True)
    if not 0 <= magic <= 2:
        raise CorruptBatch(f"Invalid magic found in record: {magic}")
    return position + LOG_OVERHEAD + size if remaining >= LOG_OVERHEAD + size else None


def _records_refusal(version: int, records) -> int | None:
    """Kafka's ProduceRequest.validateRecords, before anything else looks at a partition's records: exactly one
    magic-2 batch, and no zstd below v7. Kafka answers with the error alone (no message)."""
    if records is None:
        return None  # refused on append, as before
    try:
        first_end = _batch_end(records, 0)
        if first_end is None or records[_MAGIC_OFFSET] != 2:
            return ErrorCode.INVALID_RECORD
        if version < ZSTD_FROM and records[_ATTRIBUTES_LOW] & CODEC_MASK == ZSTD_CODEC:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if _batch_end(records, first_end) is not None:
            return ErrorCode.INVALID_RECORD
    except CorruptBatch:
        return ErrorCode.CORRUPT_MESSAGE
    return None


def _invalid_partitions(broker: Broker, request, version: int) -> dict[tuple[str, int], object]:
    """The answers of the existing partitions whose records Kafka's validateRecords refuses."""
    refused: dict[tuple[str, int], object] = {}
    for topic_data in request.topic_data:
        name = _topic_name(broker, topic_data, version)
        for partition in topic_data.partition_data:
            error = _records_refusal(version, partition.records)  # header bytes only: cheap for every partition
            if error is None or name is None \
                    or broker.replicas.lookup(name, partition.index) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # Kafka answers a partition it does not know before looking at its records
            refused[(name, partition.index)] = _partition_response(partition.index, error)
    return refused


def _has_transactional_batch(request) -> bool:
    """Whether any partition's first whole batch is transactional (Kafka's RequestUtils.hasTransactionalRecords,
    which runs before anything else: CorruptBatch from a corrupt first header fails the whole request)."""
    for topic in request.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if records is not None and _batch_end(records, 0) is not None and records[_MAGIC_OFFSET] == 2 \
                    and len(records) > _ATTRIBUTES_LOW and records[_ATTRIBUTES_LOW] & TRANSACTIONAL_FLAG:
                return True
    return False


def _topic_name(broker: Broker, topic_data, version: int) -> str | None:
    if version >= 13:
        known = broker.topics_by_id.get(topic_data.topic_id)
        return known.name if known else None
    return topic_data.name


PRODUCE_KNOWS_ABORTABLE_FROM = 11  # older clients are told INVALID_TXN_STATE (Kafka's defaultError operation)


TRANSACTIONS_V2_PRODUCE = 12  # Produce v12+ comes from transactions v2 producers: the leader adds the partition
ADD_RETRY_S, ADD_RETRY_FOR_S = 0.02, 0.1  # add.partitions.to.txn.retry.backoff.ms and .backoff.max.ms
UNVERIFIED = "Unable to verify the partition has been added to the transaction. Underlying error: {}"


def _transactional_header(broker: Broker, topic_name: str, partition) -> BatchHeader | None:
    """The header of a transactional batch that would open a transaction in this partition, else None."""
    records = partition.records
    if not records or len(records) < HEADER_SIZE:
        return None
    try:
        header = read_batch_header(records, 0)
    except (CorruptRecordError, DecodeError, ValueError):
        return None  # the append refuses it with Kafka's answer
    if header.magic != 2 or not header.is_transactional or header.producer_id < 0:
        return None
    plog = broker.partition_log(topic_name, partition.index)
    entry = plog.producer_state.producers.get(header.producer_id) if plog is not None else None
    if entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == header.producer_epoch:
        return None  # its transaction is open here already: verified (or added) when it began
    if entry is not None and header.producer_epoch < entry.producer_epoch:
        return None  # a fenced producer: the append refuses it (INVALID_PRODUCER_EPOCH), nothing to add
    return header


async def _added_implicitly(broker: Broker, request, version: int,
                            invalid: dict[tuple[str, int], object]) -> dict[tuple[str, int], object]:
    """Transactions v2 (KIP-890 part 2, Produce v12+): the partitions whose batches would open the producer's
    transaction are added to it, all in one coordinator write (Kafka's AddPartitionsToTxnManager with addPartition);
    CONCURRENT_TRANSACTIONS (the previous transaction still ending) is retried here for up to 100 ms first. The
    refused partitions' answers."""
    wanted: dict[tuple[str, int], object] = {}
    everything: dict[tuple[str, int], object] = {}
    producers = set()
    for topic_data in request.topic_data:
        name = _topic_name(broker, topic_data, version)
        if name is None or name not in broker.topics:
            continue
        for partition in topic_data.partition_data:
            if (name, partition.index) in invalid:
                continue
            everything[(name, partition.index)] = partition
            found = _transactional_header(broker, name, partition)
            if found is not None and broker.partition_log(name, partition.index) is not None:  # led here
                producers.add((found.producer_id, found.producer_epoch))
                wanted[(name, partition.index)] = partition
    if not producers:
        return {}
    if len(producers) > 1:  # one transactional producer per request, as Kafka's ReplicaManager insists
        return {key: _partition_response(p.index, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                for key, p in everything.items()}
    ((producer_id, producer_epoch),) = producers
    coordinator = broker.transactions
    deadline = asyncio.get_running_loop().time() + ADD_RETRY_FOR_S
    while True:
        error = await coordinator.add_partitions(request.transactional_id, producer_id, producer_epoch, list(wanted),
                                                 client_tv=TRANSACTIONS_V2)
        if error != ErrorCode.CONCURRENT_TRANSACTIONS or asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(ADD_RETRY_S)
    if error == ErrorCode.NONE:
        return {}
    if error == ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    message = None
    if error == ErrorCode.INVALID_TXN_STATE:
        message = "Partition was not added to the transaction"
    elif error in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                   ErrorCode.NOT_COORDINATOR):
        error, message = ErrorCode.NOT_ENOUGH_REPLICAS, UNVERIFIED.format(ErrorCode(error).name)
    return {key: _partition_response(partition.index, error, message=message) for key, partition in wanted.items()}


async def _unverified(broker: Broker, transactional_id: str, topic_name: str, partition, version: int):
    """KIP-890 part 1 (Kafka 3.6+, `transaction.partition.verification.enable`): a transactional batch that would open
    a transaction in this partition is appended only if the coordinator has the partition in the producer's ongoing
    transaction, so a late or stray batch cannot leave an open transaction no marker will ever end. The refusal, as
    Kafka words it for producers (ReplicaManager.appendRecords), or None."""
    header = _transactional_header(broker, topic_name, partition)
    if header is None:
        return None
    error = await _verify(broker, transactional_id, header.producer_id, header.producer_epoch,
                          (topic_name, partition.index))
    if error == ErrorCode.NONE:
        return None
    if error == ErrorCode.PRODUCER_FENCED:
        return _partition_response(partition.index, ErrorCode.INVALID_PRODUCER_EPOCH)
    if error == ErrorCode.TRANSACTION_ABORTABLE and version < PRODUCE_KNOWS_ABORTABLE_FROM:
        error = ErrorCode.INVALID_TXN_STATE
    if error == ErrorCode.INVALID_TXN_STATE:
        return _partition_response(partition.index, error, message="Partition was not added to the transaction")
    if error in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                 ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):  # retried by every client
        return _partition_response(partition.index, ErrorCode.NOT_ENOUGH_REPLICAS,
                                   message=UNVERIFIED.format(error.name))
    return _partition_response(partition.index, error)


def _producer_mark(broker: Broker, topic_name: str, index: int, producer_id: int) -> tuple | None:
    """What the partition knows of the producer now; a marker or batch appended for it changes it."""
    plog = broker.partition_log(topic_name, index)
    entry = plog.producer_state.producers.get(producer_id) if plog is not None else None
    if entry is None:
        return None
    return (entry.producer_epoch, entry.coordinator_epoch, entry.last_timestamp, entry.current_txn_first_offset,
            entry.last_seq)


async def _verify(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                  partition: tuple[str, int]) -> ErrorCode:
    """The coordinator's verify-only answer: this broker's own, or (a cluster member that does not coordinate the
    id) its coordinator's over AddPartitionsToTxn v4, as Kafka's AddPartitionsToTxnManager asks it. If a marker (or
    batch) of the producer lands in the partition while a remote coordinator is asked, the answer may describe a
    transaction that has ended (Kafka's VerificationGuard): CONCURRENT_TRANSACTIONS, so the client asks again."""
    coordinator = broker.transactions
    member = getattr(broker, "cluster", None)
    if member is None or coordinator.coordinator_error(transactional_id) is None:
        return coordinator.verify(transactional_id, producer_id, producer_epoch, partition)
    before = _producer_mark(broker, *partition, producer_id)
    error = await member.transaction_channel.verify(transactional_id, producer_id, producer_epoch, partition)
    if error == ErrorCode.NONE and _producer_mark(broker, *partition, producer_id) != before:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    return error


async def _await_acks(broker: Broker, waiting: dict[tuple[str, int], tuple[object, int]], timeout_ms: int) -> None:
    """acks=all: hold the answer until the ISR has every partition's records; each partition then gets
    the purgatory's verdict (its base offset stays, as Kafka's answer keeps it)."""
    errors = await broker.replicas.wait_for_acks({key: offset for key, (_, offset) in waiting.items()}, timeout_ms)
    for key, error in errors.items():
        if error:
            waiting[key][0].error_code = error


def failed_response(request, error: int, message: str | None = None):
    """Every partition of the request answers `error` (ProduceRequest.getErrorResponse); acks=0 gets nothing."""
    if request.acks == 0:
        return None
    return Response(throttle_time_ms=0, responses=[
        Response.TopicProduceResponse(name=topic.name, topic_id=topic.topic_id or ZERO_UUID, partition_responses=[
            _partition_response(partition.index, error, message=message) for partition in topic.partition_data])
        for topic in request.topic_data])


@handles(0, failed=failed_response)
async def produce(broker: Broker, header, request):
    version = header.request_api_version
    now = now_ms()  # one append time for the whole request
    acks = request.acks
    try:
        transactional = _has_transactional_batch(request)
    except CorruptBatch as corrupt:
        return failed_response(request, ErrorCode.CORRUPT_MESSAGE, str(corrupt))
    if transactional and request.transactional_id is None:
        return failed_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    invalid = _invalid_partitions(broker, request, version)
    topics = []
    waiting: dict[tuple[str, int], tuple[object, int]] = {}  # acks=all: partition -> (its answer, offset to reach)
    # transactions v2 producers (a single node's; a cluster serves v1) have their partitions added by the leader,
    # whatever transaction.partition.verification.enable says; others are verified if it says so
    implicit = request.transactional_id is not None and version >= TRANSACTIONS_V2_PRODUCE and \
        getattr(broker, "cluster", None) is None
    added = await _added_implicitly(broker, request, version, invalid) if implicit else {}
    verify = request.transactional_id is not None and broker.config["transaction.partition.verification.enable"] \
        and not implicit
    for topic_data in request.topic_data:
        name = _topic_name(broker, topic_data, version)
        refusal = _topic_refusal(broker, name, acks)
        if refusal is None:
            partitions = []
            for p in topic_data.partition_data:
                if (name, p.index) in invalid:
                    partitions.append(invalid[(name, p.index)])
                    continue
                unverified = added.get((name, p.index)) if implicit else \
                    await _unverified(broker, request.transactional_id, name, p, version) if verify else None
                if unverified is not None:
                    partitions.append(unverified)
                    continue
                answer, required_offset = _append(broker, name, p, now, acks)
                partitions.append(answer)
                if required_offset is not None and acks == -1:
                    waiting[(name, p.index)] = (answer, required_offset)
        else:  # records Kafka's validateRecords refused keep that answer, whatever acks says
            partitions = [invalid.get((name, p.index)) or _partition_response(p.index, refusal)
                          for p in topic_data.partition_data]
        if name is None and version >= 13:
            for p in partitions:
                p.error_code = ErrorCode.UNKNOWN_TOPIC_ID
        topics.append(Response.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id or ZERO_UUID,
                                                    partition_responses=partitions))
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    if waiting:
        await _await_acks(broker, waiting, request.timeout_ms)
    return Response(responses=topics, throttle_time_ms=0)
