"""InitProducerId (22): producer ids for idempotent producers."""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.producer_ids import ProducerIdsUnavailable
from wire import messages
from wire.errors import ErrorCode


# v6 (KIP-939, two-phase commit) needs the transaction coordinator, and Kafka 4.4 does not serve it either
@handles(22, versions=(0, 5))
async def init_producer_id(broker: Broker, header, request):
    R = messages.InitProducerIdResponse
    if request.transactional_id is not None:
        # transactions arrive with the transaction coordinator; until then say so plainly
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                 producer_epoch=-1)
    if request.producer_id >= 0:
        # an idempotent producer bumping its epoch after an error keeps its id
        return R(throttle_time_ms=0, error_code=0, producer_id=request.producer_id,
                 producer_epoch=(request.producer_epoch + 1) % 32767)
    member = getattr(broker, "cluster", None)
    if member is None:
        return R(throttle_time_ms=0, error_code=0, producer_id=broker.allocate_producer_id(), producer_epoch=0)
    try:  # a cluster member's ids come from blocks the controller allocates (kbroker/cluster/producer_ids.py)
        producer_id = await member.producer_ids.generate()
    except ProducerIdsUnavailable:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1,
                 producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
