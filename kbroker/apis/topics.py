"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37)."""

from __future__ import annotations

import uuid

from kbroker.apis.configs import topic_entries
from kbroker.apis.registry import handles
from kbroker.broker import Broker, TopicError, topic_name_problem
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
