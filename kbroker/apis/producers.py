"""InitProducerId (22): producer ids for idempotent producers, and for transactional ones from the
transaction coordinator."""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.producer_ids import ProducerIdsUnavailable
from wire import messages
from wire.errors import ErrorCode

FENCED_FROM = 4  # InitProducerId v4 knows PRODUCER_FENCED; older clients are told INVALID_PRODUCER_EPOCH


# v6 (KIP-939, two-phase commit) is not served, as Kafka 4.4 does not serve it either
@handles(22, versions=(0, 5))
async def init_producer_id(broker: Broker, header, request):
    R = messages.InitProducerIdResponse
    version = header.request_api_version
    if request.transactional_id is not None:
        error, producer_id, epoch = await broker.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, request.producer_id if version >= 3 else -1,
            request.producer_epoch if version >= 3 else -1)
        if error == ErrorCode.PRODUCER_FENCED and version < FENCED_FROM:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return R(throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)
    if version >= 3 and (request.producer_id < 0) != (request.producer_epoch < 0):
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    member = getattr(broker, "cluster", None)
    if member is None:
        return R(throttle_time_ms=0, error_code=0, producer_id=broker.allocate_producer_id(), producer_epoch=0)
    try:  # a cluster member's ids come from blocks the controller allocates (kbroker/cluster/producer_ids.py)
        producer_id = await member.producer_ids.generate()
    except ProducerIdsUnavailable:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1,
                 producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
