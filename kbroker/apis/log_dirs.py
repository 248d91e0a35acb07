"""The log dirs of this broker: AlterReplicaLogDirs (34) moves a partition's log to another of them
(kbroker.log_dir_mover does the copying), DescribeLogDirs (35) lists each log dir, the partitions it holds (and
the copies under way into it) with their sizes, and (v4+) the size and free space of its volume."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from kbroker.log.errors import LogDirOfflineError
from kbroker.log.manager import future_dir_name
from wire import messages
from wire.errors import ErrorCode

Response = messages.DescribeLogDirsResponse
MAX_DIR_NAME = 255  # a future log's directory name must fit (Kafka's KAFKA-4893 check)


def _volume(log_dir: Path) -> tuple[int, int]:
    """(total, usable) bytes of the volume, as Java's FileStore reports them."""
    stats = os.statvfs(log_dir)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


@handles(35)
async def describe_log_dirs(broker: Broker, header, request):
    version = header.request_api_version
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, dict[str, list]] = {d: defaultdict(list) for d in broker.logs.log_dirs}
    for (topic, partition), log in sorted(broker.logs.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_dir[broker.logs.log_dir_of(topic, partition)][topic].append(Response.DescribeLogDirsPartition(
            partition_index=partition, partition_size=log.size,
            offset_lag=max(0, log.high_watermark - log.log_end_offset), is_future_key=False))
        future = broker.logs.future(topic, partition)
        if future is not None:  # Kafka's lag of a copy: how far it is behind the current log's end
            by_dir[future.log_dir][topic].append(Response.DescribeLogDirsPartition(
                partition_index=partition, partition_size=future.log.size,
                offset_lag=max(0, log.log_end_offset - future.log.log_end_offset), is_future_key=True))
    results = []
    offline = set(broker.logs.offline_log_dirs)
    for log_dir, topics in by_dir.items():
        if log_dir in offline:  # as Kafka reports a failed dir: the error, no partitions, no sizes
            results.append(Response.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                                                          log_dir=str(log_dir.absolute()), topics=[]))
            continue
        result = Response.DescribeLogDirsResult(
            error_code=0, log_dir=str(log_dir.absolute()),
            topics=[Response.DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in topics.items()])
        if version >= 4:
            try:
                result.total_bytes, result.usable_bytes = _volume(log_dir)
            except OSError:
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        results.append(result)
    return Response(throttle_time_ms=0, error_code=0, results=results)


@handles(34)
async def alter_replica_log_dirs(broker: Broker, header, request):
    AlterResponse = messages.AlterReplicaLogDirsResponse
    wanted = {(topic.name, partition): entry.path
              for entry in request.dirs for topic in entry.topics for partition in topic.partitions}
    by_topic: dict[str, list] = defaultdict(list)
    for (topic, partition), path in wanted.items():
        by_topic[topic].append(AlterResponse.AlterReplicaLogDirPartitionResult(
            partition_index=partition, error_code=_move(broker, topic, partition, path)))
    broker.log_dir_mover.start()
    return AlterResponse(throttle_time_ms=0, results=[
        AlterResponse.AlterReplicaLogDirTopicResult(topic_name=name, partitions=partitions)
        for name, partitions in by_topic.items()])


def _move(broker: Broker, topic: str, partition: int, path: str) -> ErrorCode:
    """Start moving one replica's log to the log dir `path`, with Kafka's ReplicaManager.alterReplicaLogDirs
    answers: moving it where it is already is NONE, and so is asking again while it moves."""
    if len(future_dir_name(topic, partition)) > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    log_dir = broker.logs.resolve_log_dir(path)
    if log_dir is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if log_dir not in broker.logs.live_log_dirs:
        return ErrorCode.KAFKA_STORAGE_ERROR
    broker.logs.prefer_log_dir(topic, partition, log_dir)  # a replica not hosted yet is created there
    hosted = broker.replicas.lookup(topic, partition)
    if isinstance(hosted, ErrorCode):  # Kafka keeps REPLICA_NOT_AVAILABLE here for older clients
        return ErrorCode.REPLICA_NOT_AVAILABLE if hosted is ErrorCode.NOT_LEADER_OR_FOLLOWER else hosted
    if broker.logs.get(topic, partition) is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    try:
        broker.logs.create_future(topic, partition, log_dir)
    except LogDirOfflineError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE
