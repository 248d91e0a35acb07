"""Fetch (1): byte ranges of segment files up to the high watermark, long-polled.

Records are handed to the encoder as file slices, so the network layer can `sendfile` them
straight from the page cache. Fetch sessions (KIP-227) are declined the way Kafka declines
them when its session cache is full: session id 0 in the response, and the client simply
keeps sending full fetches.
"""

from __future__ import annotations

import asyncio
import contextlib

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.log.errors import OffsetOutOfRangeError
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

Response = messages.FetchResponse
NO_SESSION, FULL_FETCH_EPOCH, INITIAL_EPOCH = 0, -1, 0


def _partition(index: int, error: int, log=None, records=b""):
    high_watermark = log.high_watermark if log is not None else -1
    return Response.PartitionData(
        partition_index=index, error_code=error, high_watermark=high_watermark,
        last_stable_offset=high_watermark, log_start_offset=log.log_start_offset if log is not None else -1,
        aborted_transactions=None, preferred_read_replica=-1, records=records)


def _read_all(broker: Broker, request, version: int) -> tuple[list, int]:
    """One pass over the requested partitions; returns the topics and the bytes found."""
    budget = request.max_bytes
    found = 0
    topics = []
    for fetch_topic in request.topics:
        name = fetch_topic.topic
        if version >= 13:
            known = broker.topics_by_id.get(fetch_topic.topic_id)
            name = known.name if known else None
        partitions = []
        for p in fetch_topic.partitions:
            if name is None:
                partitions.append(_partition(p.partition, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            log = broker.partition_log(name, p.partition)
            if log is None:
                partitions.append(_partition(p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            limit = min(p.partition_max_bytes, budget)
            try:
                chunk = log.read(p.fetch_offset, limit, log.high_watermark) if limit > 0 or found == 0 else None
            except OffsetOutOfRangeError:
                partitions.append(_partition(p.partition, ErrorCode.OFFSET_OUT_OF_RANGE, log))
                continue
            size = len(chunk) if chunk is not None else 0
            found += size
            budget = max(0, budget - size)
            partitions.append(_partition(p.partition, ErrorCode.NONE, log, chunk if size else b""))
        topics.append(Response.FetchableTopicResponse(topic=fetch_topic.topic,
                                                      topic_id=fetch_topic.topic_id or ZERO_UUID,
                                                      partitions=partitions))
    return topics, found


@handles(1)
async def fetch(broker: Broker, header, request):
    version = header.request_api_version
    if request.session_id != NO_SESSION or request.session_epoch not in (FULL_FETCH_EPOCH, INITIAL_EPOCH):
        return Response(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                        session_id=0, responses=[])
    deadline = now_ms() + max(0, request.max_wait_ms)
    while True:
        appended = broker.appended
        topics, found = _read_all(broker, request, version)
        remaining = deadline - now_ms()
        if found >= request.min_bytes or remaining <= 0 or broker.closing:
            return Response(throttle_time_ms=0, error_code=0, session_id=NO_SESSION, responses=topics)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(appended.wait(), remaining / 1000)
