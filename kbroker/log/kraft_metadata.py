"""Topics and topic configs read from a KRaft metadata log (`__cluster_metadata-0`) that Apache Kafka left
in a log dir, so kbroker can serve a data directory Kafka wrote (docs/operations.md, "Moving a data
directory between Kafka and kbroker").

Kafka keeps topic names, ids and configs only in its metadata log: the newest snapshot
(`<end offset>-<epoch>.checkpoint`) plus the log's records from that offset on. Each record's value is
an ApiMessageAndVersion: frame version, record type and record version (unsigned varints), then the
record in flexible-version form. Three types matter here: TopicRecord (2: name, topic id),
RemoveTopicRecord (9: topic id) and ConfigRecord (4: resource type 2 = topic, resource name, config
name, value; a null value removes it). Everything else (partitions, brokers, features, control
batches) is skipped. Read only; kbroker never writes this log.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from pathlib import Path

from wire.exceptions import DecodeError
from wire.records import iter_batches, iter_records

METADATA_DIR = "__cluster_metadata-0"
METADATA_TOPIC = "__cluster_metadata"  # as kbroker.log.manager.KRAFT_METADATA_TOPIC
TOPIC_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = 2, 4, 9
TOPIC_RESOURCE = 2
_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

logger = logging.getLogger(__name__)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def compact_string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        text = self.data[self.pos:self.pos + length].decode("utf-8")
        self.pos += length
        return text

    def uuid(self) -> uuid.UUID:
        value = uuid.UUID(bytes=bytes(self.data[self.pos:self.pos + 16]))
        self.pos += 16
        return value

    def int8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value - 256 if value > 127 else value


class KraftTopics:
    """Topic name -> (topic id, configs), replayed from metadata records in log order."""

    def __init__(self) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.configs: dict[str, dict[str, str]] = {}

    def apply(self, value: bytes) -> None:
        reader = _Reader(value)
        reader.uvarint()  # frame version
        record_type = reader.uvarint()
        reader.uvarint()  # record version: the fields read here are the same in every version so far
        if record_type == TOPIC_RECORD:
            name = reader.compact_string()
            self.ids[name] = reader.uuid()
            self.configs.setdefault(name, {})
        elif record_type == REMOVE_TOPIC_RECORD:
            removed = reader.uuid()
            for name in [name for name, topic_id in self.ids.items() if topic_id == removed]:
                del self.ids[name]
                self.configs.pop(name, None)
        elif record_type == CONFIG_RECORD and reader.int8() == TOPIC_RESOURCE:
            topic, key, setting = reader.compact_string(), reader.compact_string(), reader.compact_string()
            configs = self.configs.setdefault(topic, {})
            if setting is None:
                configs.pop(key, None)
            else:
                configs[key] = setting

    def replay(self, path: Path, from_offset: int = 0) -> None:
        data = path.read_bytes()
        for position, header in iter_batches(data):
            if header.attributes & 0x20:  # a control batch (leader change, snapshot header/footer)
                continue
            for record in iter_records(data, position):
                if record.offset >= from_offset and record.value is not None:
                    self.apply(record.value)


def read_kraft_topics(log_dir: Path) -> KraftTopics | None:
    """The topics of the KRaft metadata log in `log_dir`, or None when it has none."""
    metadata = log_dir / METADATA_DIR
    if not metadata.is_dir():
        return None
    topics = KraftTopics()
    snapshots = sorted((int(match.group(1)), path) for path in metadata.iterdir()
                       if (match := _SNAPSHOT.match(path.name)))
    start = 0
    if snapshots:
        start, newest = snapshots[-1]
        topics.replay(newest)
    for segment in sorted(metadata.glob("*.log")):
        topics.replay(segment, start)
    logger.info("read %d topics from Kafka's metadata log in %s", len(topics.ids), metadata)
    return topics


def topics_on_disk(log_dirs: list[Path]) -> list[tuple[str, uuid.UUID, int, dict[str, str]]]:
    """(name, topic id, partition count, configs) of every topic whose partition dirs lie in `log_dirs`: for a
    data directory another broker (Apache Kafka) wrote. The id comes from Kafka's
    metadata log when there is one, else from the partitions' `partition.metadata` (a new one if neither
    has it); configs only from the metadata log (ZooKeeper-mode Kafka kept them in ZooKeeper)."""
    from kbroker.log.checkpoints import CheckpointError, read_partition_metadata
    from kbroker.log.manager import parse_partition_dir

    partitions: dict[str, set[int]] = {}
    recorded: dict[str, str] = {}
    kraft = KraftTopics()
    for log_dir in log_dirs:
        try:
            found = read_kraft_topics(log_dir) if log_dir.is_dir() else None
            children = sorted(log_dir.iterdir()) if log_dir.is_dir() else []
        except (OSError, DecodeError, IndexError, UnicodeDecodeError) as error:
            logger.warning("not adopting topics from %s: %s", log_dir, error)  # the log manager judges the dir
            continue
        if found is not None:
            kraft.ids.update(found.ids)
            kraft.configs.update(found.configs)
        for child in children:
            tp = parse_partition_dir(child.name) if child.is_dir() else None
            if tp is None or tp[0] == METADATA_TOPIC:
                continue
            partitions.setdefault(tp[0], set()).add(tp[1])
            with contextlib.suppress(OSError, CheckpointError, ValueError):
                recorded.setdefault(tp[0], uuid_from_text(read_partition_metadata(child) or ""))
    adopted = []
    for name, numbers in sorted(partitions.items()):
        topic_id = kraft.ids.get(name) or recorded.get(name) or uuid.uuid4()
        adopted.append((name, topic_id, max(numbers) + 1, kraft.configs.get(name, {})))
        logger.warning("adopting topic %s (%d partitions) found on disk without kbroker's topics file", name,
                       max(numbers) + 1)
    return adopted


def uuid_from_text(text: str) -> uuid.UUID:
    """Kafka's Uuid text form (22 chars of unpadded url-safe base64) back to a UUID."""
    import base64

    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
