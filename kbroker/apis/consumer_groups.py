"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): KIP-848 groups, where the broker
runs the assignor (`group.protocol=consumer` in clients). Decoding and encoding only; the state
machine lives in kbroker.coordinator.consumer_groups."""

from __future__ import annotations

from kbroker.apis.registry import client_host, handles
from kbroker.authorization import OPERATIONS_NOT_REQUESTED, ResourceType, authorized_operations
from kbroker.broker import Broker
from kbroker.coordinator.consumer_groups import ConsumerGroup, ConsumerGroupMember, HeartbeatRequest, TopicPartitions
from wire import messages
from wire.errors import ErrorCode

MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1 (KIP-1099): 0 classic, 1 consumer protocol
DISABLED = "The new consumer group protocol is not enabled (group.coordinator.rebalance.protocols)."


@handles(68)
async def consumer_group_heartbeat(broker: Broker, header, request):
    Response = messages.ConsumerGroupHeartbeatResponse
    coordinator = broker.coordinator
    if not coordinator.consumer_protocol_enabled:  # what Kafka's request handler answers then
        return Response(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=DISABLED)
    version = header.request_api_version
    if coordinator.offsets.not_coordinating(request.group_id):  # led elsewhere, or its log dir failed
        return Response(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR, error_message=None,
                        member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    groups = coordinator.consumer_groups
    groups.start()  # timers for the members of groups loaded at start (a no-op once done)
    owned = request.topic_partitions
    result = groups.heartbeat(HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=None if owned is None else [(t.topic_id, list(t.partitions)) for t in owned],
        client_id=header.client_id or "", client_host=client_host.get(), api_version=version))
    assignment = None
    if result.assignment is not None:
        assignment = Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items(), key=lambda item: str(item[0]))])
    return Response(throttle_time_ms=0, error_code=result.error_code, error_message=result.error_message,
                    member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


@handles(69)
async def consumer_group_describe(broker: Broker, header, request):
    Response = messages.ConsumerGroupDescribeResponse
    coordinator = broker.coordinator
    version = header.request_api_version
    described = []
    for group_id in request.group_ids:
        if not coordinator.consumer_protocol_enabled:
            entry = _error(group_id, ErrorCode.UNSUPPORTED_VERSION, DISABLED)
        elif not group_id:
            entry = _error(group_id, ErrorCode.INVALID_GROUP_ID, None)
        elif coordinator.offsets.not_coordinating(group_id):  # led elsewhere, or its log dir failed
            entry = _error(group_id, ErrorCode.NOT_COORDINATOR, None)
        else:
            group = coordinator.consumer_groups.group(group_id)
            if group is not None:
                entry = _described(broker, group, version)
            elif coordinator.groups.group(group_id) is not None or coordinator.offsets.group_offsets(group_id):
                entry = _error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            else:
                entry = _error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if request.include_authorized_operations and entry.error_code == ErrorCode.NONE:
            entry.authorized_operations = authorized_operations(ResourceType.GROUP, group_id)
        described.append(entry)
    return Response(throttle_time_ms=0, groups=described)


def _error(group_id: str, error: int, message: str | None):
    return messages.ConsumerGroupDescribeResponse.DescribedGroup(
        error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=0,
        assignment_epoch=0, assignor_name="", members=[], authorized_operations=OPERATIONS_NOT_REQUESTED)


def _described(broker: Broker, group: ConsumerGroup, version: int):
    Response = messages.ConsumerGroupDescribeResponse
    assignor = broker.coordinator.consumer_groups.preferred_assignor(group.members.values())
    members = [_member(broker, member, group.target.get(member.member_id, {}), version)
               for member in group.members.values()]
    return Response.DescribedGroup(
        error_code=0, error_message=None, group_id=group.group_id, group_state=group.state.value,
        group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=assignor,
        members=members, authorized_operations=OPERATIONS_NOT_REQUESTED)


def _member(broker: Broker, member: ConsumerGroupMember, target: TopicPartitions, version: int):
    Response = messages.ConsumerGroupDescribeResponse
    entry = Response.Member(
        member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex or "",  # Kafka's member default: no regex is ""
        assignment=_assignment(broker, member.assigned), target_assignment=_assignment(broker, target))
    if version >= 1:
        entry.member_type = MEMBER_TYPE_CONSUMER
    return entry


def _assignment(broker: Broker, partitions: TopicPartitions):
    """Partitions by topic, with names; topics deleted since are left out, as Kafka does."""
    Response = messages.ConsumerGroupDescribeResponse
    topics = []
    _, by_id = broker.known_topics()
    for topic_id, indexes in sorted(partitions.items(), key=lambda item: str(item[0])):
        topic = by_id.get(topic_id)
        if topic is not None:
            topics.append(Response.TopicPartitions(topic_id=topic_id, topic_name=topic.name,
                                                   partitions=sorted(indexes)))
    return Response.Assignment(topic_partitions=topics)


__all__ = ["consumer_group_describe", "consumer_group_heartbeat"]
