"""DescribeLogDirs (35): each log dir, the partitions it holds and their sizes, and (v4+) the
size and free space of its volume."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from wire import messages
from wire.errors import ErrorCode

Response = messages.DescribeLogDirsResponse


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
            offset_lag=max(0, log.log_end_offset - log.high_watermark), is_future_key=False))
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
