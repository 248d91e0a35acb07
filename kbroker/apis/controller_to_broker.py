"""LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6): what a ZooKeeper-mode controller tells a broker.

As Kafka 3.9's KafkaApis and ReplicaManager in ZooKeeper mode:
- a request carrying a broker epoch older than this broker's registration (a request meant for an earlier
  incarnation of this broker id) is refused whole with STALE_BROKER_EPOCH (LeaderAndIsr lists every partition
  with it, StopReplica none); -1 makes no claim;
- a controller epoch older than the newest seen is refused whole with STALE_CONTROLLER_EPOCH;
- LeaderAndIsr creates the logs of the partitions assigned here (recording the topic id), makes this broker
  leader or follower at each newer leader epoch, and moves the replica fetchers to match; StopReplica stops
  fetching and, when asked, deletes the partition; UpdateMetadata refreshes the metadata cache.

Served only by a broker with zookeeper.connect: these handlers are registered when the cluster member starts
(`register`), so a single node neither serves them nor, whatever runs in the same process, advertises them
(api_versions.CLUSTER_ONLY_APIS lists them only in cluster mode).
"""

from __future__ import annotations

import logging
import uuid

from kbroker.apis.registry import HANDLERS, Handler
from kbroker.cluster.metadata_cache import from_update_metadata
from kbroker.cluster.model import EndPoint, LeaderAndIsr, PartitionState
from kbroker.cluster.replica_manager import LeaderAndIsrPartition
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
NO_BROKER_EPOCH = -1
ZERO_UUID = uuid.UUID(int=0)
# The versions a Kafka 3.9 broker serves (what its controller may send)
VERSIONS = {LEADER_AND_ISR: (0, 7), STOP_REPLICA: (0, 4), UPDATE_METADATA: (0, 8)}


def is_stale_broker_epoch(member, request_epoch: int) -> bool:
    """Kafka's isBrokerEpochStale: an epoch older than our registration's (-1 claims none)."""
    return request_epoch != NO_BROKER_EPOCH and request_epoch < member.broker_epoch


# --- LeaderAndIsr ----------------------------------------------------------------------------


def _leader_and_isr_response(request, version: int, errors: dict[tuple[str, int], ErrorCode],
                             error: ErrorCode = ErrorCode.NONE):
    """The answer: per partition the error found, or `error` for each when the whole request was refused."""
    R = messages.LeaderAndIsrResponse

    def code(topic: str, index: int) -> int:
        return int(errors.get((topic, index), error))

    if version >= 5:
        return R(error_code=int(error), topics=[R.LeaderAndIsrTopicError(
            topic_id=topic.topic_id, partition_errors=[
                R.LeaderAndIsrPartitionError(partition_index=p.partition_index,
                                             error_code=code(topic.topic_name, p.partition_index))
                for p in topic.partition_states]) for topic in request.topic_states])
    states = [(p.topic_name, p) for p in request.ungrouped_partition_states] if version < 2 else \
        [(topic.topic_name, p) for topic in request.topic_states for p in topic.partition_states]
    return R(error_code=int(error), partition_errors=[
        R.LeaderAndIsrPartitionError(topic_name=name, partition_index=p.partition_index,
                                     error_code=code(name, p.partition_index)) for name, p in states])


def _states(request, version: int) -> list[tuple[str, uuid.UUID, object]]:
    if version < 2:
        return [(p.topic_name, ZERO_UUID, p) for p in request.ungrouped_partition_states]
    return [(topic.topic_name, (topic.topic_id if version >= 5 else None) or ZERO_UUID, p)
            for topic in request.topic_states for p in topic.partition_states]


async def leader_and_isr(broker, header, request):
    version = header.request_api_version
    member = broker.cluster
    if is_stale_broker_epoch(member, request.broker_epoch if version >= 2 else NO_BROKER_EPOCH):
        log.info("LeaderAndIsr with stale broker epoch %d (ours %d)", request.broker_epoch, member.broker_epoch)
        return _leader_and_isr_response(request, version, {}, ErrorCode.STALE_BROKER_EPOCH)
    states = _states(request, version)
    errors: dict[tuple[str, int], ErrorCode] = {}
    items = []
    for topic, topic_id, p in states:
        if not member.check_topic_id(topic, topic_id):
            errors[(topic, p.partition_index)] = ErrorCode.INCONSISTENT_TOPIC_ID
            continue
        leadership = LeaderAndIsr(p.leader, p.leader_epoch, tuple(p.isr),
                                  getattr(p, "leader_recovery_state", 0) or 0, p.partition_epoch)
        items.append(LeaderAndIsrPartition(topic, p.partition_index, PartitionState(leadership, p.controller_epoch),
                                           tuple(p.replicas)))
    log_for = await member.log_opener(dict((t, i) for t, i, _ in states))
    changes = broker.replicas.become_leader_or_follower(request.controller_epoch, items, log_for)
    if changes.error:
        return _leader_and_isr_response(request, version, {}, changes.error)
    errors.update(changes.partition_errors)
    leaders = {b.broker_id: EndPoint(member.inter_broker_listener, b.host_name, b.port, "PLAINTEXT")
               for b in request.live_leaders}
    member.leadership_changed(changes.became_leader, changes.became_follower, leaders)
    await member.move_coordination(changes.became_leader, changes.became_follower)
    return _leader_and_isr_response(request, version, errors)


# --- StopReplica -----------------------------------------------------------------------------


def _stop_replica_partitions(request, version: int) -> list[tuple[str, int, int, bool]]:
    """(topic, partition, leader epoch, delete) of each partition, whatever the version."""
    if version == 0:
        return [(p.topic_name, p.partition_index, -1, request.delete_partitions) for p in request.ungrouped_partitions]
    if version <= 2:
        return [(t.name, index, -1, request.delete_partitions) for t in request.topics for index in t.partition_indexes]
    return [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
            for t in request.topic_states for p in t.partition_states]


def _stop_replica_response(partitions: list[tuple[str, int, int, bool]], errors: dict[tuple[str, int], ErrorCode],
                           error: ErrorCode = ErrorCode.NONE):
    """Per partition its error; a request refused whole (stale broker or controller epoch) lists no partition,
    unlike LeaderAndIsr's refusal (as Kafka 3.9 answers both)."""
    R = messages.StopReplicaResponse
    if error:
        return R(error_code=int(error), partition_errors=[])
    return R(error_code=int(error), partition_errors=[
        R.StopReplicaPartitionError(topic_name=topic, partition_index=index,
                                    error_code=int(errors.get((topic, index), error)))
        for topic, index, _, _ in partitions])


async def stop_replica(broker, header, request):
    version = header.request_api_version
    member = broker.cluster
    partitions = _stop_replica_partitions(request, version)
    if is_stale_broker_epoch(member, request.broker_epoch if version >= 1 else NO_BROKER_EPOCH):
        return _stop_replica_response(partitions, {}, ErrorCode.STALE_BROKER_EPOCH)
    to_delete = {(t, i): e for t, i, e, delete in partitions if delete}
    to_stop = {(t, i): e for t, i, e, delete in partitions if not delete}
    member.fetchers.remove_partitions([(t, i) for t, i, _, _ in partitions])
    errors: dict[tuple[str, int], ErrorCode] = {}
    for group, delete in ((to_stop, False), (to_delete, True)):
        if not group:
            continue
        error, found = broker.replicas.stop_replicas(request.controller_epoch, group, delete)
        if error:
            return _stop_replica_response(partitions, {}, error)
        errors.update(found)
        member.stop_coordinating(key for key, e in found.items() if not e)
        if delete:
            member.delete_logs([key for key, e in found.items() if not e])
    return _stop_replica_response(partitions, errors)


# --- UpdateMetadata --------------------------------------------------------------------------


async def update_metadata(broker, header, request):
    version = header.request_api_version
    member = broker.cluster
    R = messages.UpdateMetadataResponse
    if is_stale_broker_epoch(member, request.broker_epoch if version >= 5 else NO_BROKER_EPOCH):
        return R(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if request.controller_epoch < broker.replicas.controller_epoch:
        return R(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)  # Kafka's ControllerMovedException
    broker.replicas.controller_epoch = request.controller_epoch
    member.metadata_updated(from_update_metadata(request))
    return R(error_code=ErrorCode.NONE)


_HANDLERS = {LEADER_AND_ISR: leader_and_isr, STOP_REPLICA: stop_replica, UPDATE_METADATA: update_metadata}


def register() -> None:
    """Serve (and so advertise) the three APIs: called by a broker that starts in cluster mode."""
    for api_key, handle in _HANDLERS.items():
        low, high = VERSIONS[api_key]
        if api_key not in HANDLERS:
            HANDLERS[api_key] = Handler(api_key, low, high, handle)
