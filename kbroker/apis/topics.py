"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37)."""

from __future__ import annotations

import uuid

from kbroker.apis.configs import topic_entries
from kbroker.apis.registry import handles
from kbroker.broker import Broker, TopicError, topic_name_problem
from kbroker.cluster.topic_admin import TopicAdmin
from kbroker.topic_configs import validate_topic_configs
from wire import messages
from wire.errors import ErrorCode
from wire.schema import ZERO_UUID

DEFAULT = -1  # num_partitions / replication_factor of -1: use the broker's default
REPORTS_CONFIGS = 5  # CreateTopics v5+ answers every config of the new topic
# Kafka's texts for a topic DeleteTopics cannot find, by name and by id
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."


def _validate_creation(broker: Broker, topic) -> tuple[int, int, dict[str, str]]:
    problem = topic_name_problem(topic.name)
    if problem:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if topic.name in broker.topics:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
    if topic.assignments:
        partitions = len(topic.assignments)
        replication = len(topic.assignments[0].broker_ids)
    else:
        partitions = int(broker.config["num.partitions"]) if topic.num_partitions == DEFAULT else topic.num_partitions
        replication = (int(broker.config["default.replication.factor"])
                       if topic.replication_factor == DEFAULT else topic.replication_factor)
    if partitions < 1:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication != 1:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication} larger than available brokers: 1."
                         if replication > 1 else "Replication factor must be larger than 0.")
    configs = {c.name: c.value for c in topic.configs}
    validate_topic_configs(configs)
    return partitions, replication, configs


def _created_configs(broker: Broker, overrides: dict[str, str]) -> list:
    """Every config of the new topic, as DescribeConfigs would describe it, by name as Kafka lists them."""
    Config = messages.CreateTopicsResponse.CreatableTopicConfigs
    return [Config(name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                   is_sensitive=e.sensitive)
            for e in sorted(topic_entries(broker, overrides), key=lambda entry: entry.name)]


@handles(19)
async def create_topics(broker: Broker, header, request):
    R = messages.CreateTopicsResponse
    version = header.request_api_version
    if _cluster_admin(broker) is not None:
        return R(throttle_time_ms=0, topics=await _create_topics_in_cluster(broker, request, version))
    results = []
    for topic in request.topics:
        result = R.CreatableTopicResult(name=topic.name, topic_id=ZERO_UUID, error_code=0, error_message=None,
                                        num_partitions=-1, replication_factor=-1, configs=[])
        try:
            partitions, replication, configs = _validate_creation(broker, topic)
            if request.validate_only:
                result.topic_id = uuid.uuid4()  # Kafka names the topic it would create with a fresh id
            else:
                result.topic_id = broker.create_topic(topic.name, partitions, configs).topic_id
            result.num_partitions, result.replication_factor = partitions, replication
            if version >= REPORTS_CONFIGS:
                result.configs = _created_configs(broker, configs)
        except TopicError as error:
            result.error_code, result.error_message = error.error_code, str(error)
        results.append(result)
    return R(throttle_time_ms=0, topics=results)


@handles(20)
async def delete_topics(broker: Broker, header, request):
    R = messages.DeleteTopicsResponse
    version = header.request_api_version
    wanted = ([(t.name, t.topic_id) for t in request.topics] if version >= 6
              else [(name, ZERO_UUID) for name in request.topic_names])
    if not broker.config["delete.topic.enable"]:
        # Kafka's answer to every topic (before v3, whose clients do not know the code: INVALID_REQUEST)
        error = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        return R(throttle_time_ms=0, responses=[R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=error,
                                                                       error_message=None)
                                                for name, topic_id in wanted])
    if _cluster_admin(broker) is not None:
        return R(throttle_time_ms=0, responses=await _delete_topics_in_cluster(broker, request, wanted))
    results = []
    for name, topic_id in wanted:
        topic = broker.topics.get(name) if name else broker.topics_by_id.get(topic_id)
        if topic is None:
            error, message = ((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE) if name
                              else (ErrorCode.UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID_MESSAGE))
            results.append(R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=error,
                                                  error_message=message))
            continue
        broker.delete_topic(topic.name)
        results.append(R.DeletableTopicResult(name=topic.name, topic_id=topic.topic_id, error_code=0,
                                              error_message=None))
    return R(throttle_time_ms=0, responses=results)


@handles(37)
async def create_partitions(broker: Broker, header, request):
    R = messages.CreatePartitionsResponse
    if _cluster_admin(broker) is not None:
        return R(throttle_time_ms=0, results=await _create_partitions_in_cluster(broker, request))
    results = []
    for topic in request.topics:
        error, message = ErrorCode.NONE, None
        known = broker.topics.get(topic.name)
        if known is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # Kafka sends no message
        elif topic.count <= known.partitions:
            error = ErrorCode.INVALID_PARTITIONS
            message = (f"Topic currently has {known.partitions} partitions, which is higher than or equal "
                       f"to the requested {topic.count}.")
        elif topic.assignments and any(len(a.broker_ids) != 1 for a in topic.assignments):
            error, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Only one replica per partition here."
        elif not request.validate_only:
            broker.add_partitions(topic.name, topic.count)
        results.append(R.CreatePartitionsTopicResult(name=topic.name, error_code=error, error_message=message))
    return R(throttle_time_ms=0, results=results)


# ---------------------------------------------------------------------------------------------- cluster mode


def _cluster_admin(broker: Broker) -> TopicAdmin | None:
    member = getattr(broker, "cluster", None)
    return None if member is None else TopicAdmin(member)


async def _create_topics_in_cluster(broker: Broker, request, version: int) -> list:
    """Kafka 3.9's ZooKeeper-mode CreateTopics (kbroker/cluster/topic_admin.py)."""
    R = messages.CreateTopicsResponse
    admin = _cluster_admin(broker)
    assert admin is not None
    results, waiting = [], {}
    for topic in request.topics:
        result = R.CreatableTopicResult(name=topic.name, topic_id=ZERO_UUID, error_code=0, error_message=None,
                                        num_partitions=-1, replication_factor=-1, configs=[])
        results.append(result)
        if not admin.is_controller:
            result.error_code = ErrorCode.NOT_CONTROLLER
            continue
        try:
            replicas, configs = _planned_topic(broker, admin, topic)
            result.num_partitions, result.replication_factor = len(replicas), len(replicas[0])
            if version >= REPORTS_CONFIGS:
                result.configs = _created_configs(broker, configs)
            if not request.validate_only:
                result.topic_id = await admin.create(topic.name, replicas, configs)
                waiting[topic.name] = (result, len(replicas))
        except TopicError as error:
            result.error_code, result.error_message = error.error_code, str(error) or None
            result.num_partitions, result.replication_factor, result.configs = -1, -1, []
    await _answer_when(admin, {name: (result, lambda n=name, c=count: admin.has_leaders(n, c))
                               for name, (result, count) in waiting.items()}, request.timeout_ms)
    return results


def _planned_topic(broker: Broker, admin: TopicAdmin, topic) -> tuple[dict[int, tuple[int, ...]], dict[str, str]]:
    problem = topic_name_problem(topic.name)
    if problem:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    unset = [c.name for c in topic.configs if c.value is None]
    if unset:
        raise TopicError(ErrorCode.INVALID_REQUEST, f"Null value not supported for topic configs : {','.join(unset)}")
    if topic.assignments and (topic.num_partitions != DEFAULT or topic.replication_factor != DEFAULT):
        raise TopicError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments "
                                                    "were set. Both cannot be used at the same time.")
    partitions = int(broker.config["num.partitions"]) if topic.num_partitions == DEFAULT else topic.num_partitions
    replication = (int(broker.config["default.replication.factor"])
                   if topic.replication_factor == DEFAULT else topic.replication_factor)
    replicas = admin.place(topic.name, partitions, replication,
                           {a.partition_index: list(a.broker_ids) for a in topic.assignments})
    configs = {c.name: c.value for c in topic.configs}
    validate_topic_configs(configs)
    return replicas, configs


async def _delete_topics_in_cluster(broker: Broker, request, wanted: list[tuple[str, uuid.UUID]]) -> list:
    """Kafka 3.9's ZooKeeper-mode DeleteTopics: the topic is marked in /admin/delete_topics and the answer waits
    until the metadata cache no longer holds it."""
    R = messages.DeleteTopicsResponse
    admin = _cluster_admin(broker)
    assert admin is not None
    results, waiting = [], {}
    for name, topic_id in wanted:
        result = R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=0, error_message=None)
        results.append(result)
        found = admin.topic_of(name, topic_id)
        if not admin.is_controller:
            result.error_code = ErrorCode.NOT_CONTROLLER
        elif found is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        else:
            result.name = found
            await admin.mark_for_deletion(found)
            waiting[found] = (result, lambda n=found: admin.is_gone(n))
    await _answer_when(admin, waiting, request.timeout_ms)
    return results


async def _create_partitions_in_cluster(broker: Broker, request) -> list:
    """Kafka 3.9's ZooKeeper-mode CreatePartitions: the new partitions written to the topic znode, the answer
    once the metadata cache shows them all with leaders."""
    R = messages.CreatePartitionsResponse
    admin = _cluster_admin(broker)
    assert admin is not None
    results, waiting = [], {}
    for topic in request.topics:
        result = R.CreatePartitionsTopicResult(name=topic.name, error_code=0, error_message=None)
        results.append(result)
        if not admin.is_controller:
            result.error_code = ErrorCode.NOT_CONTROLLER
            continue
        manual = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        try:
            await admin.add_partitions(topic.name, topic.count, manual, request.validate_only)
        except TopicError as error:
            result.error_code, result.error_message = error.error_code, str(error) or None
            continue
        if not request.validate_only:
            waiting[topic.name] = (result, lambda n=topic.name, c=topic.count: admin.has_leaders(n, c))
    await _answer_when(admin, waiting, request.timeout_ms)
    return results


async def _answer_when(admin: TopicAdmin, waiting: dict, timeout_ms: int) -> None:
    """Kafka's delayed topic operations: results whose change did not show within the timeout (or at all, with
    a timeout of 0 or less) answer REQUEST_TIMED_OUT."""
    if not waiting:
        return
    if timeout_ms > 0:
        await admin.wait_until(lambda: all(done() for _, done in waiting.values()), timeout_ms)
    for result, done in waiting.values():
        if timeout_ms <= 0 or not done():
            result.error_code, result.error_message = ErrorCode.REQUEST_TIMED_OUT, None
