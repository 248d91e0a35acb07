"""ElectLeaders (43): give partitions their preferred replica as leader, or any live replica when theirs is gone
(unclean), as Kafka's controller does.

A single node is every partition's only replica and leader: each answers ELECTION_NOT_NEEDED (or that no leader
is available, for a partition in a failed log dir). In a cluster the active controller elects
(kbroker/cluster/controller_events.process_replica_leader_election) and, as Kafka's DelayedElectLeader, the answer
waits until this broker's metadata shows each new leader; other brokers answer NOT_CONTROLLER per partition. A
request naming no partitions means all of them, and then partitions that needed no election are left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kbroker.apis.controller import active_controller
from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.cluster.controller_context import TopicPartition
from kbroker.cluster.controller_core import NOT_CONTROLLER_MESSAGE, UNKNOWN_PARTITION
from kbroker.cluster.controller_events import ELECTION_NOT_NEEDED_MESSAGE
from kbroker.cluster.controller_store import ControllerMovedError
from wire import messages
from wire.errors import ErrorCode

ELECTION_TYPES = {0: "preferred", 1: "unclean"}
LEADER_CHECK_S = 0.05
Outcome = tuple[int, str | None]


def _all_partitions(broker: Broker) -> list[TopicPartition]:
    member = getattr(broker, "cluster", None)
    if member is None:
        return [TopicPartition(name, index) for name, topic in broker.topics.items()
                for index in range(topic.partitions)]
    cache = member.metadata
    return [TopicPartition(name, p.partition) for name in cache.topics() for p in cache.partitions(name)]


def _requested(broker: Broker, request) -> list[TopicPartition]:
    if request.topic_partitions is None:
        return _all_partitions(broker)
    return list(dict.fromkeys(TopicPartition(t.topic, index) for t in request.topic_partitions
                              for index in t.partitions))


def _on_single_node(broker: Broker, partitions: Iterable[TopicPartition], kind: str) -> dict[TopicPartition, Outcome]:
    not_available = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if kind == "preferred" \
        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    results: dict[TopicPartition, Outcome] = {}
    for tp in partitions:
        topic = broker.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.partitions:
            results[tp] = UNKNOWN_PARTITION
        elif broker.logs.is_offline(tp.topic, tp.partition):
            results[tp] = (not_available, f"No leader is available for {tp.topic}-{tp.partition}")
        else:
            results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    return results


async def _in_cluster(broker: Broker, partitions: list[TopicPartition], kind: str,
                      timeout_ms: int) -> dict[TopicPartition, Outcome]:
    controller = active_controller(broker)
    not_controller = {tp: (ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE) for tp in partitions}
    if controller is None or not partitions:
        return not_controller
    try:
        outcome = await controller.elect_leaders(partitions, kind)
    except ControllerMovedError:
        return not_controller
    results = {tp: value for tp, value in outcome.items() if not isinstance(value, int)}
    elected = {tp: value for tp, value in outcome.items() if isinstance(value, int)}
    results.update(await _wait_for_metadata(broker, elected, timeout_ms))
    return results


async def _wait_for_metadata(broker: Broker, elected: dict[TopicPartition, int],
                             timeout_ms: int) -> dict[TopicPartition, Outcome]:
    """Kafka's DelayedElectLeader: NONE once this broker's metadata names each new leader, REQUEST_TIMED_OUT for
    those it does not within the request's timeout."""
    cache = broker.cluster.metadata
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000

    def shown(tp: TopicPartition, leader: int) -> bool:
        state = cache.partition(tp.topic, tp.partition)
        return state is not None and state.leader == leader

    waiting = dict(elected)
    results: dict[TopicPartition, Outcome] = {}
    while waiting:
        for tp in [tp for tp, leader in waiting.items() if shown(tp, leader)]:
            del waiting[tp]
            results[tp] = (ErrorCode.NONE, None)
        if waiting and loop.time() >= deadline:
            results.update({tp: (ErrorCode.REQUEST_TIMED_OUT, None) for tp in waiting})
            break
        if waiting:
            await asyncio.sleep(LEADER_CHECK_S)
    return results


@handles(43)
async def elect_leaders(broker: Broker, header, request):
    R = messages.ElectLeadersResponse
    kind = ELECTION_TYPES.get(request.election_type if header.request_api_version >= 1 else 0)
    if kind is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, replica_election_results=[])
    partitions = _requested(broker, request)
    if getattr(broker, "cluster", None) is None:
        results = _on_single_node(broker, partitions, kind)
    else:
        results = await _in_cluster(broker, partitions, kind, request.timeout_ms)
    # an election over all partitions reports only those that needed one; their topics stay listed on a single
    # node (as Kafka 4's KRaft controller answers) and go in a cluster (as Kafka 3.9's ZooKeeper-mode KafkaApis)
    everything, keep_topics = request.topic_partitions is None, getattr(broker, "cluster", None) is None
    by_topic: dict[str, list] = {}
    for tp in partitions:
        if tp not in results:
            continue  # the controller's state machine left it out (a partition still New): Kafka omits it too
        error, message = results[tp]
        if everything and error == ErrorCode.ELECTION_NOT_NEEDED:
            if keep_topics:
                by_topic.setdefault(tp.topic, [])
            continue
        by_topic.setdefault(tp.topic, []).append(R.PartitionResult(partition_id=tp.partition, error_code=error,
                                                                   error_message=message))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=[
        R.ReplicaElectionResult(topic=topic, partition_result=found) for topic, found in by_topic.items()])
