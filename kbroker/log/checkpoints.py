"""Kafka's small text files at the root of a log dir (and, in a partition dir, `partition.metadata`
and `leader-epoch-checkpoint`).

Offset checkpoints (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
`log-start-offset-checkpoint`, and the log cleaner's `cleaner-offset-checkpoint`) are::

    0                     <- format version
    2                     <- number of entries
    my-topic 0 1234       <- topic, partition, offset; one line each, "\\n" endings
    my-topic 1 99

A partition dir's `leader-epoch-checkpoint` has the same frame with `epoch start-offset`
lines (kbroker.log.leader_epoch_cache keeps it).

They are replaced atomically: write `<name>.tmp`, fsync, rename over, fsync the directory.
`meta.properties` is a java.util.Properties file (Kafka writes it with `store(out, "")`).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOCK_FILE",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointError",
    "MetaProperties",
    "atomic_write",
    "format_checkpoint",
    "format_leader_epoch_checkpoint",
    "format_offsets_checkpoint",
    "format_properties",
    "fsync_dir",
    "has_clean_shutdown_file",
    "new_cluster_id",
    "parse_checkpoint",
    "parse_leader_epoch_checkpoint",
    "parse_offsets_checkpoint",
    "parse_properties",
    "read_leader_epoch_checkpoint",
    "read_meta_properties",
    "read_offsets_checkpoint",
    "read_partition_metadata",
    "remove_clean_shutdown_file",
    "uuid_text",
    "write_clean_shutdown_file",
    "write_leader_epoch_checkpoint",
    "write_meta_properties",
    "write_offsets_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # first dirty offset per compacted partition
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"  # in each partition dir
LOCK_FILE = ".lock"

_OFFSETS_VERSION = 0
_LEADER_EPOCH_VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointError(ValueError):
    """A checkpoint or properties file that does not parse."""


# --- atomic replace -----------------------------------------------------------------------


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a crash leaves either the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


# --- offset checkpoints -------------------------------------------------------------------


def format_checkpoint(version: int, lines: Sequence[str]) -> str:
    """Version line, count line, then one line per entry, each ending in a newline."""
    return f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)


def parse_checkpoint(text: str, version: int, where: str = "checkpoint") -> list[str]:
    """The entry lines of a checkpoint; an empty file (or one without a count) has none."""
    lines = text.splitlines()
    if not lines:
        return []
    try:
        found_version = int(lines[0])
        expected = int(lines[1]) if len(lines) > 1 else 0
    except ValueError as exc:
        raise CheckpointError(f"malformed header in {where}: {exc}") from exc
    if found_version != version:
        raise CheckpointError(f"unrecognized version {found_version} of {where} (expected {version})")
    entries = lines[2:]
    if len(entries) != expected:
        raise CheckpointError(f"expected {expected} entries in {where}, found {len(entries)}")
    return entries


def format_offsets_checkpoint(offsets: Mapping[TopicPartition, int]) -> str:
    lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    return format_checkpoint(_OFFSETS_VERSION, lines)


def parse_offsets_checkpoint(text: str, where: str = "checkpoint") -> dict[TopicPartition, int]:
    result: dict[TopicPartition, int] = {}
    for line in parse_checkpoint(text, _OFFSETS_VERSION, where):
        parts = line.split()
        try:
            topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
        except (IndexError, ValueError) as exc:
            raise CheckpointError(f"malformed line in {where}: {line!r}") from exc
        if len(parts) != 3:
            raise CheckpointError(f"malformed line in {where}: {line!r}")
        result[(topic, partition)] = offset
    return result


def write_offsets_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    atomic_write(path, format_offsets_checkpoint(offsets).encode("utf-8"))


def read_offsets_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The checkpoint's entries; a missing file has none."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return {}
    return parse_offsets_checkpoint(text, str(path))


# --- leader-epoch-checkpoint ----------------------------------------------------------------


def format_leader_epoch_checkpoint(entries: Sequence[tuple[int, int]]) -> str:
    """Kafka's LeaderEpochCheckpointFile: `epoch start-offset` lines, in the order given."""
    return format_checkpoint(_LEADER_EPOCH_VERSION, [f"{epoch} {start_offset}" for epoch, start_offset in entries])


def parse_leader_epoch_checkpoint(text: str, where: str = "leader-epoch-checkpoint") -> list[tuple[int, int]]:
    entries: list[tuple[int, int]] = []
    for line in parse_checkpoint(text, _LEADER_EPOCH_VERSION, where):
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected two fields")
            entries.append((int(parts[0]), int(parts[1])))
        except ValueError as exc:
            raise CheckpointError(f"malformed line in {where}: {line!r}") from exc
    return entries


def write_leader_epoch_checkpoint(path: Path, entries: Sequence[tuple[int, int]]) -> None:
    atomic_write(path, format_leader_epoch_checkpoint(entries).encode("utf-8"))


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """The (epoch, start offset) entries, or None when there is no file: unlike an empty file
    (which Kafka creates for a partition without epochs), a missing one means "never written"."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return None
    return parse_leader_epoch_checkpoint(text, str(path))


# --- java.util.Properties -----------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_SPECIAL = "=:#!"
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _escape(text: str, is_key: bool) -> str:
    """Properties.store's escaping: backslash escapes, \\uXXXX outside printable ASCII."""
    out = []
    for i, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch in _SPECIAL:
            out.append("\\" + ch)
        elif not " " <= ch <= "~":
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    raw = ch.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def _java_date(moment: datetime) -> str:
    """`java.util.Date.toString()` in UTC, e.g. "Mon Jan 01 00:00:00 UTC 2024"."""
    moment = moment.astimezone(UTC)
    return (
        f"{_DAYS[moment.weekday()]} {_MONTHS[moment.month - 1]} {moment.day:02d} "
        f"{moment:%H:%M:%S} UTC {moment.year}"
    )


def format_properties(props: Mapping[str, str], now: datetime | None = None) -> str:
    """What `Properties.store(out, "")` writes: "#", "#<date>", then key=value lines."""
    lines = ["#", "#" + _java_date(now or datetime.now(UTC))]
    lines += [f"{_escape(key, True)}={_escape(value, False)}" for key, value in props.items()]
    return "".join(line + "\n" for line in lines)


def _logical_lines(text: str) -> list[str]:
    """Join continuation lines (odd number of trailing backslashes), drop blanks and comments."""
    result: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        result.append(pending + line)
        pending = ""
    if pending:
        result.append(pending)
    return result


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
            except ValueError as exc:
                raise CheckpointError(f"bad \\u escape in properties line {text!r}") from exc
            i += 6
            continue
        out.append(_UNESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _split_key(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped '=', ':' or whitespace; one separator is skipped."""
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Parse the java.util.Properties text format (the parts Kafka's files use, and escapes)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        props[_unescape(key)] = _unescape(value)
    return props


# --- meta.properties ----------------------------------------------------------------------


def uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid text form (Uuid.toString): 22 chars of unpadded url-safe base64."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def new_cluster_id() -> str:
    """A random id in Kafka's Uuid text form, with no leading '-'."""
    while True:
        text = uuid_text(uuid.uuid4())
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class MetaProperties:
    """`meta.properties`: version 0 (ZooKeeper mode: broker.id) or 1 (KRaft: node.id)."""

    version: int
    node_id: int
    cluster_id: str | None = None
    directory_id: str | None = None

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MetaProperties:
        try:
            version = int(props["version"])
            if version == 0:
                node_id = int(props["broker.id"])
            elif version == 1:
                node_id = int(props["node.id"])
            else:
                raise CheckpointError(f"unsupported meta.properties version {version}")
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"invalid meta.properties: {exc}") from exc
        return cls(version, node_id, props.get("cluster.id"), props.get("directory.id"))


def write_meta_properties(path: Path, meta: MetaProperties, now: datetime | None = None) -> None:
    atomic_write(path, format_properties(meta.to_properties(), now).encode("utf-8"))


def read_meta_properties(path: Path) -> MetaProperties | None:
    """The file's contents, or None when it does not exist."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return None
    return MetaProperties.from_properties(parse_properties(text))


# --- partition.metadata -------------------------------------------------------------------


def write_partition_metadata(partition_dir: Path, topic_id: str) -> None:
    """Kafka's `partition.metadata` (topic id of the partition); no trailing newline, as Kafka."""
    atomic_write(Path(partition_dir) / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}".encode())


def read_partition_metadata(partition_dir: Path) -> str | None:
    """The topic id recorded in the partition dir, or None when there is no file."""
    try:
        text = (Path(partition_dir) / PARTITION_METADATA).read_text("utf-8")
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointError(f"malformed {PARTITION_METADATA} in {partition_dir}: {text!r}")
    return fields["topic_id"].strip()


# --- clean shutdown marker ----------------------------------------------------------------


def write_clean_shutdown_file(log_dir: Path, broker_epoch: int = -1) -> None:
    """`.kafka_cleanshutdown`: Kafka's JSON form ({"version":"0","broker_epoch":"N"}), fsynced."""
    payload = json.dumps({"version": "0", "broker_epoch": str(broker_epoch)}, separators=(",", ":"))
    atomic_write(Path(log_dir) / CLEAN_SHUTDOWN_FILE, payload.encode("utf-8"))


def has_clean_shutdown_file(log_dir: Path) -> bool:
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def remove_clean_shutdown_file(log_dir: Path) -> None:
    """Delete the marker durably, so a crash from now on is seen as unclean."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE
    if path.exists():
        path.unlink()
        fsync_dir(path.parent)
