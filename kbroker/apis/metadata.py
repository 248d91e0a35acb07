"""Metadata (3) and DescribeCluster (60): brokers, topics, partition leaders, and on request the
operations the caller may perform on them (kbroker.authorization).

A single node describes itself. A cluster member (`broker.cluster` set) answers from its metadata cache, as
the controller last described the cluster (kbroker.cluster.metadata_cache): the live brokers on the listener
this broker advertises, the controller, and each partition's leader, epoch, replicas, ISR and offline replicas.
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.authorization import CLUSTER_NAME, OPERATIONS_NOT_REQUESTED, ResourceType, authorized_operations
from kbroker.broker import LEADER_EPOCH, Broker, Topic, topic_name_problem
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

Response = messages.MetadataResponse


def _cluster(broker: Broker):
    """The cluster member's metadata cache, or None for a single node."""
    member = getattr(broker, "cluster", None)
    return None if member is None else member.metadata


def _cluster_brokers(broker: Broker, cache) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of each live broker that serves the listener this broker advertises."""
    listener = broker.advertised_listener.name
    found = []
    for registration in cache.alive_brokers():
        endpoint = registration.endpoint(listener)
        if endpoint is not None:
            found.append((registration.broker_id, endpoint.host, endpoint.port, registration.rack))
    return found


def _cluster_partitions(cache, name: str) -> list:
    alive = {b.broker_id for b in cache.alive_brokers()}
    partitions = []
    for p in cache.partitions(name):
        has_leader = p.leader in alive
        partitions.append(Response.MetadataResponsePartition(
            error_code=0 if has_leader else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p.partition,
            leader_id=p.leader if has_leader else -1, leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr), offline_replicas=list(p.offline_replicas)))
    return partitions


def _cluster_topic(cache, name: str) -> object:
    return Response.MetadataResponseTopic(error_code=0, name=name, topic_id=cache.topic_id(name),
                                          is_internal=name.startswith("__"),
                                          partitions=_cluster_partitions(cache, name),
                                          topic_authorized_operations=OPERATIONS_NOT_REQUESTED)


async def _cluster_requested(broker: Broker, cache, requested, allow_auto_create: bool) -> object:
    name = requested.name
    if name is None:
        name = cache.topic_name(requested.topic_id)
        if name is None:
            return _missing(None, requested.topic_id, ErrorCode.UNKNOWN_TOPIC_ID)
    if cache.contains(name):
        return _cluster_topic(cache, name)
    if topic_name_problem(name):
        return _missing(name, None, ErrorCode.INVALID_TOPIC_EXCEPTION)
    if allow_auto_create and broker.config["auto.create.topics.enable"]:
        return _missing(name, None, await _create_in_cluster(broker, name))
    return _missing(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


async def _create_in_cluster(broker: Broker, name: str) -> ErrorCode:
    """Kafka 3.9's auto-creation in ZooKeeper mode: num.partitions x default.replication.factor (the internal
    topic with its own settings); LEADER_NOT_AVAILABLE until it has leaders."""
    from kbroker.cluster.topic_admin import TopicAdmin

    config, admin = broker.config, TopicAdmin(broker.cluster)
    if name == OFFSETS_TOPIC:
        return await admin.create_offsets_topic(config)
    if name == TRANSACTION_TOPIC:
        return await admin.create_transaction_topic(config)
    return await admin.create_automatically(name, int(config["num.partitions"]),
                                            int(config["default.replication.factor"]), {})


async def _cluster_metadata(broker: Broker, cache, request, version: int, all_topics: bool):
    if all_topics:
        topics = [_cluster_topic(cache, name) for name in cache.topics()]
    else:
        allow = request.allow_auto_topic_creation if version >= 4 else True
        topics = [await _cluster_requested(broker, cache, r, allow) for r in request.topics]
    if version >= 8 and request.include_topic_authorized_operations:
        _add_topic_operations(topics)
    brokers = [Response.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
               for i, h, p, r in _cluster_brokers(broker, cache)]
    return Response(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                    controller_id=-1 if cache.controller_id is None else cache.controller_id, topics=topics,
                    cluster_authorized_operations=_cluster_operations(version, request))


def _brokers(broker: Broker) -> list:
    listener = broker.advertised_listener
    return [Response.MetadataResponseBroker(node_id=broker.node_id, host=listener.host,
                                            port=listener.port, rack=None)]


def _partitions(broker: Broker, topic: Topic) -> list:
    nodes = [broker.node_id]
    offline = broker.logs.is_offline
    return [_offline_partition(p, nodes) if offline(topic.name, p) else
            Response.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=broker.node_id,
                                               leader_epoch=LEADER_EPOCH, replica_nodes=nodes, isr_nodes=nodes,
                                               offline_replicas=[])
            for p in range(topic.partitions)]


def _offline_partition(index: int, nodes: list[int]):
    """A partition whose log dir failed: what Kafka shows once its only replica is offline."""
    return Response.MetadataResponsePartition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
                                              leader_id=-1, leader_epoch=LEADER_EPOCH, replica_nodes=nodes,
                                              isr_nodes=nodes, offline_replicas=nodes)


def _topic(broker: Broker, topic: Topic) -> object:
    return Response.MetadataResponseTopic(error_code=0, name=topic.name, topic_id=topic.topic_id,
                                          is_internal=topic.is_internal,
                                          partitions=_partitions(broker, topic),
                                          topic_authorized_operations=OPERATIONS_NOT_REQUESTED)


def _missing(name: str | None, topic_id, error: int) -> object:
    return Response.MetadataResponseTopic(error_code=error, name=name, topic_id=topic_id or ZERO_UUID,
                                          is_internal=False, partitions=[],
                                          topic_authorized_operations=OPERATIONS_NOT_REQUESTED)


def _topics_by_id(broker: Broker, topic_ids: list) -> list:
    """Topics asked for by id (v12+), known ones first, as Kafka answers them."""
    known = [broker.topics_by_id[topic_id] for topic_id in topic_ids if topic_id in broker.topics_by_id]
    unknown = [topic_id for topic_id in topic_ids if topic_id not in broker.topics_by_id]
    return [_topic(broker, topic) for topic in known] + \
        [_missing(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID) for topic_id in unknown]


def _requested_topic(broker: Broker, requested, allow_auto_create: bool, version: int) -> object:
    name = requested.name
    if name is None:  # lookup by topic id (v10+)
        topic = broker.topics_by_id.get(requested.topic_id)
        return _topic(broker, topic) if topic else _missing(None, requested.topic_id, ErrorCode.UNKNOWN_TOPIC_ID)
    topic = broker.topics.get(name)
    if topic is not None:
        return _topic(broker, topic)
    if topic_name_problem(name):
        return _missing(name, None, ErrorCode.INVALID_TOPIC_EXCEPTION)
    if allow_auto_create and broker.auto_create(name) is not None:
        # Kafka answers LEADER_NOT_AVAILABLE for a topic it has just created; clients retry
        return _missing(name, None, ErrorCode.LEADER_NOT_AVAILABLE)
    return _missing(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@handles(3)
async def metadata(broker: Broker, header, request):
    version = header.request_api_version
    # v0 with an empty list, and v1+ with a null list, mean "all topics"
    all_topics = request.topics is None or (version == 0 and not request.topics)
    cache = _cluster(broker)
    if cache is not None:
        return await _cluster_metadata(broker, cache, request, version, all_topics)
    # as Kafka, one topic id in the request makes it a request by id, whatever the names say (the Java
    # consumer asks for the topics of a broker-resolved regex by id, with empty names)
    topic_ids = [] if all_topics or version < 12 else \
        list(dict.fromkeys(r.topic_id for r in request.topics if r.topic_id != ZERO_UUID))
    if all_topics:
        topics = [_topic(broker, t) for t in broker.topics.values()]
    elif topic_ids:
        topics = _topics_by_id(broker, topic_ids)
    else:
        allow = request.allow_auto_topic_creation if version >= 4 else True
        topics = [_requested_topic(broker, r, allow, version) for r in request.topics]
    if version >= 8 and request.include_topic_authorized_operations:
        _add_topic_operations(topics)
    return Response(throttle_time_ms=0, brokers=_brokers(broker), cluster_id=broker.cluster_id,
                    controller_id=broker.node_id, topics=topics,
                    cluster_authorized_operations=_cluster_operations(version, request))


def _add_topic_operations(topics: list) -> None:
    """As Kafka: every topic answered by name gets its operations, errors included (an unknown or
    invalid name too); topic ids the broker does not know (no name) get none."""
    for topic in topics:
        if topic.name is not None:
            topic.topic_authorized_operations = authorized_operations(ResourceType.TOPIC, topic.name)


def _cluster_operations(version: int, request) -> int:
    """Metadata v8-v10 could ask for the cluster's operations; v11 moved that to DescribeCluster."""
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        return authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
    return OPERATIONS_NOT_REQUESTED


@handles(60)
async def describe_cluster(broker: Broker, header, request):
    R = messages.DescribeClusterResponse
    listener = broker.advertised_listener
    cache = _cluster(broker)
    if cache is not None:
        return R(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=request.endpoint_type,
                 cluster_id=broker.cluster_id,
                 controller_id=-1 if cache.controller_id is None else cache.controller_id,
                 brokers=[R.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r, is_fenced=False)
                          for i, h, p, r in _cluster_brokers(broker, cache)],
                 cluster_authorized_operations=authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                 if request.include_cluster_authorized_operations else OPERATIONS_NOT_REQUESTED)
    return R(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=request.endpoint_type,
             cluster_id=broker.cluster_id, controller_id=broker.node_id,
             brokers=[R.DescribeClusterBroker(broker_id=broker.node_id, host=listener.host,
                                              port=listener.port, rack=None, is_fenced=False)],
             cluster_authorized_operations=authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
             if request.include_cluster_authorized_operations else OPERATIONS_NOT_REQUESTED)
