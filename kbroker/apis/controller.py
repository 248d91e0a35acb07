"""The requests a ZooKeeper-mode controller serves to the other brokers: ControlledShutdown (7), AlterPartition (56)
and AllocateProducerIds (67), as Kafka 3.9's KafkaApis hands them to its KafkaController.

They reach the controller's event queue (cluster/controller.py) through `broker.controller`, which a broker in
cluster mode sets; a broker that is not the active controller answers NOT_CONTROLLER, so the asking broker looks
the controller up again. ApiVersions lists these APIs only in cluster mode (api_versions.CLUSTER_ONLY_APIS).
"""

from __future__ import annotations

import logging

from kbroker.apis.registry import handles
from kbroker.cluster.controller_alter_partition import (
    AlterPartitionPartitionData,
    AlterPartitionRequestData,
    AlterPartitionResponseData,
    AlterPartitionTopicData,
    BrokerState,
)
from kbroker.cluster.controller_store import ControllerMovedError
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)


def active_controller(broker):
    """The broker's controller if it is the active one, else None."""
    controller = getattr(broker, "controller", None)
    return controller if controller is not None and controller.is_active else None


# ---------------------------------------------------------------------------------------------- ControlledShutdown


@handles(7)
async def controlled_shutdown(broker, header, request):
    """A broker shutting down asks the controller to move its leaderships; the answer lists those it still has."""
    response = messages.ControlledShutdownResponse
    controller = active_controller(broker)
    if controller is None:
        return response(error_code=ErrorCode.NOT_CONTROLLER)
    broker_epoch = request.broker_epoch if header.request_api_version >= 2 else -1
    try:
        error, remaining = await controller.controlled_shutdown(request.broker_id, broker_epoch)
    except ControllerMovedError:
        return response(error_code=ErrorCode.NOT_CONTROLLER)
    return response(error_code=error, remaining_partitions=[
        response.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition) for tp in remaining])


# ---------------------------------------------------------------------------------------------- AlterPartition


def alter_partition_request(request, version: int) -> AlterPartitionRequestData:
    """The wire request as the controller's dataclasses (names before v2, ids from v2, ISR with epochs from v3)."""
    return AlterPartitionRequestData(request.broker_id, request.broker_epoch, tuple(
        AlterPartitionTopicData(topic_name=t.topic_name or "", topic_id=t.topic_id, partitions=tuple(
            AlterPartitionPartitionData(
                partition_index=p.partition_index, leader_epoch=p.leader_epoch, new_isr=tuple(p.new_isr or ()),
                partition_epoch=p.partition_epoch, leader_recovery_state=p.leader_recovery_state,
                new_isr_with_epochs=tuple(BrokerState(b.broker_id, b.broker_epoch)
                                          for b in (p.new_isr_with_epochs or ()) if version >= 3))
            for p in t.partitions))
        for t in request.topics))


def alter_partition_response(data: AlterPartitionResponseData):
    response = messages.AlterPartitionResponse
    return response(throttle_time_ms=0, error_code=data.error_code, topics=[
        response.TopicData(topic_name=t.topic_name, topic_id=t.topic_id, partitions=[
            response.PartitionData(partition_index=p.partition_index, error_code=p.error_code, leader_id=p.leader_id,
                                   leader_epoch=p.leader_epoch, isr=list(p.isr),
                                   leader_recovery_state=p.leader_recovery_state, partition_epoch=p.partition_epoch)
            for p in t.partitions])
        for t in data.topics])


@handles(56)
async def alter_partition(broker, header, request):
    """A partition leader proposes a new ISR; the controller writes it (or says why not) and tells every broker."""
    controller = active_controller(broker)
    if controller is None:
        return messages.AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER)
    version = header.request_api_version
    try:
        answer = await controller.alter_partition(alter_partition_request(request, version), version)
    except ControllerMovedError:
        return messages.AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER)
    return alter_partition_response(answer)


# ---------------------------------------------------------------------------------------------- AllocateProducerIds


@handles(67)
async def allocate_producer_ids(broker, header, request):
    """A broker's next block of producer ids (its idempotent and transactional producers draw from it)."""
    response = messages.AllocateProducerIdsResponse
    controller = active_controller(broker)
    if controller is None:
        return response(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER)
    try:
        error, block = await controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    except ControllerMovedError:
        return response(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER)
    if block is None:
        return response(throttle_time_ms=0, error_code=error)
    return response(throttle_time_ms=0, error_code=error, producer_id_start=block.first_producer_id,
                    producer_id_len=block.size)
