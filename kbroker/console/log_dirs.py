"""Partition sizes by DescribeLogDirs, sent with kbroker's own `wire` codecs: confluent-kafka's AdminClient has
no describe_log_dirs. Still the Kafka protocol only, so it works against any broker that allows it."""

from __future__ import annotations

from kbroker.net.one_request import call
from wire import messages

DESCRIBE_LOG_DIRS = 35
VERSION = 1  # the oldest version Kafka 4 still answers, and not yet flexible: the simplest frame


def partition_sizes(host: str, port: int, topic: str, partitions: list[int], timeout: float = 10) -> dict[int, int]:
    """Bytes on disk of those `partitions` of `topic` this broker holds (the largest copy across its log dirs)."""
    described_topic = messages.classes("DescribeLogDirsRequest")["DescribableLogDirTopic"]
    request = messages.DescribeLogDirsRequest(topics=[described_topic(topic=topic, partitions=partitions)])
    response = call(host, port, DESCRIBE_LOG_DIRS, VERSION, request, "kbroker-console", timeout)
    sizes: dict[int, int] = {}
    for result in response.results:
        if result.error_code:
            continue  # an offline log dir
        for described in result.topics:
            if described.name != topic:
                continue
            for part in described.partitions:
                if not part.is_future_key:
                    sizes[part.partition_index] = max(sizes.get(part.partition_index, 0), part.partition_size)
    return sizes
