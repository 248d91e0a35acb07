"""Produce (0): validate batches, append them to partition logs, answer per partition."""

from __future__ import annotations

import logging

from kbroker.apis.registry import handles
from kbroker.broker import LEADER_EPOCH, Broker, now_ms
from kbroker.log.errors import LogError, RecordError, RecordValidationError
from wire import messages
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError, DecodeError
from wire.schema import ZERO_UUID

Response = messages.ProduceResponse
logger = logging.getLogger(__name__)


_LEADER_UNCHANGED = Response.LeaderIdAndEpoch()  # (-1, -1): read only by the encoder, so one will do


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
    topic = broker.topics.get(topic_name) if topic_name is not None else None
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if acks == -1 and int(topic.configs.get("min.insync.replicas", broker.config["min.insync.replicas"])) > 1:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return None


def _append(broker: Broker, topic_name: str, partition, now: int):
    log = broker.partition_log(topic_name, partition.index)
    if log is None:
        return _partition_response(partition.index, broker.partition_error(topic_name, partition.index))
    records = partition.records
    if records is None or len(records) == 0:
        return _partition_response(partition.index, ErrorCode.CORRUPT_MESSAGE, message="no records")
    try:
        info = log.append(records, now, leader_epoch=LEADER_EPOCH)
    except (CorruptRecordError, DecodeError) as error:
        return _partition_response(partition.index, ErrorCode.CORRUPT_MESSAGE, message=str(error))
    except RecordValidationError as error:  # the records at fault, each named, and Kafka's summary
        return _partition_response(partition.index, error.error_code, message=str(error),
                                   record_errors=error.record_errors)
    except LogError as error:
        return _partition_response(partition.index, error.error_code, message=str(error))
    except OSError as error:  # the disk refused the write (full, failing): its log dir goes offline, as in Kafka
        offline = broker.logs.io_error(log, error, f"appending records to {topic_name}-{partition.index}")
        return _partition_response(partition.index, offline.error_code, message=str(offline))
    except ValueError:
        if not log.closed:
            raise
        # its dir failed on another thread (the flusher) since the log was looked up
        return _partition_response(partition.index, broker.partition_error(topic_name, partition.index))
    log.update_high_watermark(log.log_end_offset)  # one replica: the ISR is this broker alone
    broker.notify_appended(topic_name, partition.index)
    return _partition_response(partition.index, ErrorCode.NONE, info.first_offset, info.log_append_time,
                               info.log_start_offset)


@handles(0)
async def produce(broker: Broker, header, request):
    version = header.request_api_version
    now = now_ms()  # one append time for the whole request
    topics = []
    for topic_data in request.topic_data:
        name = topic_data.name
        if version >= 13:
            known = broker.topics_by_id.get(topic_data.topic_id)
            name = known.name if known else None
        refusal = _topic_refusal(broker, name, request.acks)
        if refusal is None:
            partitions = [_append(broker, name, p, now) for p in topic_data.partition_data]
        else:
            partitions = [_partition_response(p.index, refusal) for p in topic_data.partition_data]
        if name is None and version >= 13:
            for p in partitions:
                p.error_code = ErrorCode.UNKNOWN_TOPIC_ID
        topics.append(Response.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id or ZERO_UUID,
                                                    partition_responses=partitions))
    if request.acks == 0:
        return None  # acks=0: the client expects no response at all
    return Response(responses=topics, throttle_time_ms=0)
