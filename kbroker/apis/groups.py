"""Classic group membership: JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16). Decoding and encoding only; the state machine lives
in kbroker.coordinator.groups."""

from __future__ import annotations

from kbroker.apis.registry import client_host, handles
from kbroker.authorization import ResourceType, authorized_operations
from kbroker.broker import Broker
from kbroker.coordinator.groups import GroupState
from wire import messages
from wire.errors import ErrorCode


def _not_coordinator(broker: Broker, group_id: str) -> ErrorCode | None:
    """NOT_COORDINATOR when another broker leads the group's __consumer_offsets partition, or its log
    dir failed here: as Kafka, this broker does not coordinate the group."""
    return ErrorCode.NOT_COORDINATOR if broker.coordinator.offsets.not_coordinating(group_id) else None


@handles(11)
async def join_group(broker: Broker, header, request):
    Response = messages.JoinGroupResponse
    version = header.request_api_version
    refused = _not_coordinator(broker, request.group_id) or broker.coordinator.classic_join_error(request.group_id)
    if refused is not None:
        return Response(error_code=refused, generation_id=-1, protocol_name=None if version >= 7 else "",
                        leader="", member_id="", members=[])
    result = await broker.coordinator.groups.join(
        request.group_id, request.member_id, request.group_instance_id if version >= 5 else None,
        header.client_id or "", client_host.get(), request.session_timeout_ms,
        request.rebalance_timeout_ms if version >= 1 else -1, request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols], require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9)
    response = Response(
        error_code=result.error_code, generation_id=result.generation_id,
        protocol_name=result.protocol_name if result.protocol_name is not None or version >= 7 else "",
        leader=result.leader, member_id=result.member_id,
        members=[Response.JoinGroupResponseMember(
            member_id=member_id, metadata=metadata,
            **({"group_instance_id": instance} if version >= 5 else {}))
            for member_id, instance, metadata in result.members])
    if version >= 7:
        response.protocol_type = result.protocol_type
    if version >= 9:
        response.skip_assignment = result.skip_assignment
    return response


@handles(14)
async def sync_group(broker: Broker, header, request):
    Response = messages.SyncGroupResponse
    version = header.request_api_version
    if _not_coordinator(broker, request.group_id):
        return Response(error_code=ErrorCode.NOT_COORDINATOR, assignment=b"")
    result = await broker.coordinator.groups.sync(
        request.group_id, request.member_id, request.generation_id,
        request.protocol_type if version >= 5 else None, request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
        request.group_instance_id if version >= 3 else None)
    response = Response(error_code=result.error_code, assignment=result.assignment)
    if version >= 5:
        response.protocol_type, response.protocol_name = result.protocol_type, result.protocol_name
    return response


@handles(12)
async def heartbeat(broker: Broker, header, request):
    Response = messages.HeartbeatResponse
    instance = request.group_instance_id if header.request_api_version >= 3 else None
    if _not_coordinator(broker, request.group_id):
        return Response(error_code=ErrorCode.NOT_COORDINATOR)
    error = broker.coordinator.groups.heartbeat(request.group_id, request.member_id, request.generation_id, instance)
    return Response(error_code=error)


@handles(13)
async def leave_group(broker: Broker, header, request):
    Response = messages.LeaveGroupResponse
    version = header.request_api_version
    groups = broker.coordinator.groups
    if _not_coordinator(broker, request.group_id):
        return Response(error_code=ErrorCode.NOT_COORDINATOR, **({"members": []} if version >= 3 else {}))
    if version < 3:
        return Response(error_code=groups.leave(request.group_id, request.member_id))
    members = [Response.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                       error_code=groups.leave(request.group_id, m.member_id, m.group_instance_id))
               for m in request.members]
    return Response(throttle_time_ms=0, error_code=0, members=members)


@handles(15)
async def describe_groups(broker: Broker, header, request):
    Response = messages.DescribeGroupsResponse
    version = header.request_api_version
    Group_ = Response.DescribedGroup
    Member_ = Response.DescribedGroupMember
    described = []
    for group_id in request.groups:
        if _not_coordinator(broker, group_id):
            described.append(Group_(error_code=ErrorCode.NOT_COORDINATOR, group_id=group_id, group_state="",
                                    protocol_type="", protocol_data="", members=[]))
            continue
        group = broker.coordinator.groups.group(group_id)
        kip848 = broker.coordinator.consumer_groups.group(group_id) is not None  # not a classic group: Dead
        if group is None:
            # a group known only by its committed offsets (e.g. after a restart) is Empty
            known = not kip848 and bool(broker.coordinator.offsets.group_offsets(group_id))
            state = GroupState.EMPTY.value if known else GroupState.DEAD.value
            members, protocol_type, protocol = [], "", ""
        else:
            state, protocol_type = group.state.value, group.protocol_type or ""
            protocol = (group.protocol_name or "") if group.state != GroupState.PREPARING_REBALANCE else ""
            stable = group.state == GroupState.STABLE
            members = [Member_(
                member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                member_metadata=m.metadata_for(protocol) if stable and protocol else b"",
                member_assignment=m.assignment if stable else b"",
                **({"group_instance_id": m.group_instance_id} if version >= 4 else {}))
                for m in group.members.values()]
        missing = state == GroupState.DEAD.value
        error = ErrorCode.GROUP_ID_NOT_FOUND if missing and version >= 6 else ErrorCode.NONE
        entry = Group_(error_code=error, group_id=group_id, group_state=state, protocol_type=protocol_type,
                       protocol_data=protocol, members=members)
        if kip848 and version >= 6:
            entry.error_message = f"Group {group_id} is not a classic group."
        elif error == ErrorCode.GROUP_ID_NOT_FOUND:
            entry.error_message = f"Group {group_id} not found."
        if version >= 3 and request.include_authorized_operations and error == ErrorCode.NONE:
            entry.authorized_operations = authorized_operations(ResourceType.GROUP, group_id)
        described.append(entry)
    return Response(groups=described)


@handles(16)
async def list_groups(broker: Broker, header, request):
    Response = messages.ListGroupsResponse
    version = header.request_api_version
    # Kafka matches both filters case-insensitively
    wanted_states = {s.strip().lower() for s in request.states_filter} if version >= 4 else set()
    wanted_types = {t.strip().lower() for t in request.types_filter} if version >= 5 else set()
    coordinator = broker.coordinator
    known = {g.group_id: (g.state.value, g.protocol_type or "", "classic") for g in coordinator.groups.groups.values()}
    for group_id, consumer_group in coordinator.consumer_groups.groups.items():  # KIP-848 groups
        known[group_id] = (consumer_group.state.value, "consumer", "consumer")
    for group_id in coordinator.offsets.offsets:
        known.setdefault(group_id, (GroupState.EMPTY.value, "", "classic"))  # offsets only, e.g. after a restart
    listed = []
    for group_id, (state, protocol_type, group_type) in sorted(known.items()):
        if wanted_states and state.lower() not in wanted_states:
            continue
        if wanted_types and group_type not in wanted_types:
            continue
        entry = Response.ListedGroup(group_id=group_id, protocol_type=protocol_type)
        if version >= 4:
            entry.group_state = state
        if version >= 5:
            entry.group_type = group_type
        listed.append(entry)
    return Response(error_code=0, groups=listed)


__all__ = ["describe_groups", "heartbeat", "join_group", "leave_group", "list_groups", "sync_group"]
