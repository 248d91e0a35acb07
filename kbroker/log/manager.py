"""Every partition log in the broker's `log.dirs`, and the files at each log dir's root.

On open, each log dir is locked (`.lock`, flock), its checkpoints read, every
`<topic>-<partition>` directory opened (recovering unless `.kafka_cleanshutdown` is
there), and then the marker removed so a later crash is seen as one. `close()` flushes and
closes every log, writes the three offset checkpoints, then the marker, as Kafka does.

Deleting a partition renames its directory to Kafka's `<topic>-<partition>.<uuid>-delete`
and removes it at once (Kafka waits file.delete.delay.ms); a `-delete` directory left by a
crash is removed on the next open.

Like Kafka's LogManager it owns the log cleaner (kbroker.log.cleaner): `start_cleaner`
starts its thread, deleting a partition aborts its cleaning and drops its checkpoint entry,
and `close` stops the cleaner before it closes the logs.

It also owns the background flusher (kbroker.log.flusher) that every log it opens hands the
fsync after a roll to, as Kafka's roll schedules "flush-log" on the LogManager's scheduler.
`close` closes (and so fully flushes) the logs first, which turns a flush still queued or
under way into a no-op, then stops the flusher's thread.

A log dir that fails goes offline, as in Kafka (LogDirFailureChannel, then
LogManager.handleLogDirFailure): the first OSError from an operation on one of its logs
(handed to `fail_dir`, or `io_error`; the flusher reports its own) closes that dir's logs
without writing anything, releases its `.lock` and keeps every later write out of it; its
partitions are then offline (`is_offline`) until a restart, which recovers the dir since it was
not closed cleanly. New partitions go to the live dirs only. `on_dir_failure` (set by the
broker) hears of each failure, and whether any dir is left live: Kafka halts when none is.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from kbroker.log.checkpoints import (
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    MetaProperties,
    fsync_dir,
    has_clean_shutdown_file,
    new_cluster_id,
    read_meta_properties,
    read_offsets_checkpoint,
    remove_clean_shutdown_file,
    write_clean_shutdown_file,
    write_meta_properties,
    write_offsets_checkpoint,
)
from kbroker.log.cleaner import CleanerConfig, LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.errors import InconsistentMetadataError, LogDirLockedError, LogDirOfflineError, LogError
from kbroker.log.flusher import LogFlusher
from kbroker.log.partition_log import PartitionLog

__all__ = ["LogManager", "parse_partition_dir"]

TopicPartition = tuple[str, int]
DirFailureListener = Callable[[Path, bool], object]  # (the failed log dir, whether no live dir is left)

logger = logging.getLogger(__name__)

KRAFT_METADATA_TOPIC = "__cluster_metadata"  # the KRaft metadata log Apache Kafka keeps in a log dir
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETE_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")
_MAX_NAME = 255


def parse_partition_dir(name: str) -> TopicPartition | None:
    """`my-topic-3` -> ("my-topic", 3); None for anything else (files, `-delete`, `-future`)."""
    match = _PARTITION_DIR.match(name)
    if match is None or match.group(1) == "." or match.group(1) == "..":
        return None
    return match.group(1), int(match.group(2))


def _delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a partition dir being deleted; the topic is cut to fit 255 bytes."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic[: _MAX_NAME - len(suffix)] + suffix


def _log_recovery_plan(log_dir: Path, clean: bool, logs: int) -> None:
    """Kafka's line on opening a log dir: whether its logs are trusted or scanned."""
    if clean:
        logger.info("Skipping recovery of %d logs from %s since clean shutdown file was found", logs, log_dir)
    else:
        logger.info("Attempting recovery of %d logs from %s since no clean shutdown file was found", logs, log_dir)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogManager:
    """Opens, creates, deletes and checkpoints the partition logs of one broker."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig | None = None,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self._topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._locks: dict[Path, int] = {}
        self._live_dirs: list[Path] = list(self.log_dirs)
        self._offline: dict[TopicPartition, Path] = {}  # partitions whose log dir failed -> that dir
        # guards the live/offline state: the flusher thread fails dirs too
        self._state_lock = threading.RLock()
        self._closed = False
        self.on_dir_failure: DirFailureListener | None = None
        self.cleaner: LogCleaner | None = None
        self.flusher = LogFlusher(on_io_error=self.fail_dir)  # its thread starts with the first roll
        now = _now_ms() if now_ms is None else now_ms
        try:
            for log_dir in self.log_dirs:
                self._open_dir(log_dir, now)
        except BaseException:
            self._abort_open()
            raise

    # --- opening ------------------------------------------------------------------------

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise LogDirLockedError(
                f"{log_dir} is in use by another broker (cannot lock {LOCK_FILE})"
            ) from exc
        self._locks[log_dir] = fd

    def _open_dir(self, log_dir: Path, now_ms: int) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._lock(log_dir)
        clean = has_clean_shutdown_file(log_dir)
        try:
            recovery_points = read_offsets_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        except CheckpointError:
            recovery_points, clean = {}, False  # recover everything rather than trust a bad file
        start_offsets = self._read_or_empty(log_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_or_empty(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        children = sorted(log_dir.iterdir())
        _log_recovery_plan(log_dir, clean, sum(parse_partition_dir(c.name) is not None for c in children))
        for child in children:
            if not child.is_dir():
                continue
            if _DELETE_DIR.match(child.name):
                shutil.rmtree(child, ignore_errors=True)
                continue
            tp = parse_partition_dir(child.name)
            if tp is None or tp[0] == KRAFT_METADATA_TOPIC:  # Kafka's Raft log, never a partition to serve
                continue
            if tp in self._logs:
                raise LogError(f"partition {tp[0]}-{tp[1]} is in both {self._dir_of[tp]} and {log_dir}")
            self._register(
                tp,
                log_dir,
                PartitionLog(
                    child,
                    self.config_for(tp[0]),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    high_watermark=high_watermarks.get(tp),
                    had_clean_shutdown=clean,
                    now_ms=now_ms,
                    flusher=self.flusher,
                ),
            )
        remove_clean_shutdown_file(log_dir)

    @staticmethod
    def _read_or_empty(path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offsets_checkpoint(path)
        except CheckpointError:
            return {}

    def _register(self, tp: TopicPartition, log_dir: Path, log: PartitionLog) -> None:
        self._logs[tp] = log
        self._dir_of[tp] = log_dir

    def _abort_open(self) -> None:
        for log in self._logs.values():
            log.close(flush=False)
        self.flusher.shutdown()
        self._release_locks()

    def _release_locks(self) -> None:
        for log_dir in list(self._locks):
            self._release_lock(log_dir)

    def _release_lock(self, log_dir: Path) -> None:
        fd = self._locks.pop(log_dir, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    # --- partitions ---------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply new topic settings to the topic's existing and future partitions."""
        self._topic_configs[topic] = config
        for (name, _), log in list(self._logs.items()):
            if name == topic:
                log.update_config(config)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def __contains__(self, tp: object) -> bool:
        return tp in self._logs

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._logs))

    def __len__(self) -> int:
        return len(self._logs)

    def items(self) -> list[tuple[TopicPartition, PartitionLog]]:
        return list(self._logs.items())

    def log_dir_of(self, topic: str, partition: int) -> Path:
        return self._dir_of[(topic, partition)]

    # --- failed log dirs ----------------------------------------------------------------

    @property
    def live_log_dirs(self) -> list[Path]:
        with self._state_lock:
            return list(self._live_dirs)

    @property
    def offline_log_dirs(self) -> list[Path]:
        with self._state_lock:
            return [d for d in self.log_dirs if d not in self._live_dirs]

    @property
    def has_offline_partitions(self) -> bool:
        return bool(self._offline)

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether the partition's log was in a log dir that failed (Kafka's HostedPartition.Offline)."""
        return (topic, partition) in self._offline

    def offline_partitions(self) -> dict[TopicPartition, Path]:
        with self._state_lock:
            return dict(self._offline)

    def io_error(self, log: PartitionLog, error: OSError, action: str) -> LogDirOfflineError:
        """An OSError from `log` while doing `action` (e.g. "appending records to t-0"): take its
        log dir offline, and return what to tell the client (or raise)."""
        log_dir = log.dir.parent
        self.fail_dir(log_dir, error, action)
        offline = LogDirOfflineError(f"Error while {action} in dir {log_dir}: {error}")
        offline.__cause__ = error
        return offline

    def fail_dir(self, log_dir: Path | str, error: BaseException, action: str) -> None:
        """Take `log_dir` offline after `error` (once; later calls do nothing). Thread-safe, and
        called holding no log's lock: the dir's logs are closed without writing anything."""
        log_dir = Path(log_dir)
        with self._state_lock:
            if self._closed or log_dir not in self._live_dirs:
                return
            logger.error("Error while %s in dir %s", action, log_dir, exc_info=error)
            self._live_dirs.remove(log_dir)
            offline = sorted(tp for tp, d in self._dir_of.items() if d == log_dir)
            logs = [self._logs.pop(tp) for tp in offline]
            for tp in offline:
                del self._dir_of[tp]
                self._offline[tp] = log_dir
            all_failed = not self._live_dirs
        logger.warning("Stopping serving logs in dir %s", log_dir)
        if self.cleaner is not None:
            for tp in offline:
                self.cleaner.abort_cleaning(tp)
        for log in logs:
            log.close_handles()
        self._release_lock(log_dir)
        logger.warning("Logs for partitions %s are offline due to failure on log directory %s",
                       ",".join(f"{t}-{p}" for t, p in offline), log_dir)
        if all_failed:
            logger.critical("Shutdown broker because all log dirs in %s have failed",
                            ", ".join(str(d) for d in self.log_dirs))
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir, all_failed)

    def _next_log_dir(self) -> Path:
        """The live log dir holding the fewest partitions (first listed on a tie), as Kafka picks."""
        if not self._live_dirs:
            raise LogDirOfflineError(f"every log dir has failed: {', '.join(str(d) for d in self.log_dirs)}")
        counts = dict.fromkeys(self._live_dirs, 0)
        for log_dir in self._dir_of.values():
            counts[log_dir] += 1
        return min(self._live_dirs, key=lambda d: counts[d])

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The partition's log, created in the emptiest live log dir if it does not exist yet.
        LogDirOfflineError for a partition that is offline, or whose dir fails on creating it
        (it is offline from then on, as Kafka's getOrCreateLog leaves it)."""
        self._check_open()
        tp = (topic, partition)
        if config is not None:
            self._topic_configs[topic] = config
        with self._state_lock:
            if tp in self._logs:
                return self._logs[tp]
            if tp in self._offline:
                raise LogDirOfflineError(f"partition {topic}-{partition} is offline: log dir {self._offline[tp]} "
                                         "has failed")
            if not topic or "/" in topic or topic in (".", "..") or partition < 0:
                raise ValueError(f"invalid topic partition {topic!r}-{partition}")
            log_dir = self._next_log_dir()
            try:
                log = PartitionLog(log_dir / f"{topic}-{partition}", self.config_for(topic), flusher=self.flusher)
                fsync_dir(log_dir)
            except OSError as error:
                self.fail_dir(log_dir, error, f"creating log for partition {topic}-{partition}")
                self._offline[tp] = log_dir  # a part of it may be there: a restart finds it in that dir
                raise LogDirOfflineError(f"cannot create the log of {topic}-{partition} in {log_dir}: {error}") \
                    from error
            self._register(tp, log_dir, log)
            logger.info("Created log for partition %s-%d in %s", topic, partition, log.dir,
                        extra={"topic": topic, "partition": partition, "dir": str(log_dir)})
            return log

    def delete(self, topic: str, partition: int) -> bool:
        """Close the partition's log and remove its directory; False if there was none."""
        self._check_open()
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        if log is None:
            return False
        log_dir = self._dir_of.pop(tp)
        if self.cleaner is not None:
            self.cleaner.forget(tp, log_dir)
        log.close(flush=False)
        doomed = log_dir / _delete_dir_name(topic, partition)
        try:
            os.rename(log.dir, doomed)
            fsync_dir(log_dir)
        except OSError as error:
            self.fail_dir(log_dir, error, f"deleting log for {topic}-{partition}")
            with self._state_lock:
                self._offline[tp] = log_dir  # still on that disk, for a restart to find
            return True
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("Deleted log for partition %s-%d in %s.", topic, partition, doomed,
                    extra={"topic": topic, "partition": partition, "dir": str(log_dir)})
        self._checkpoint_or_fail(log_dir)
        return True

    # --- the log cleaner ----------------------------------------------------------------

    def start_cleaner(self, config: CleanerConfig | None = None) -> LogCleaner:
        """Start compacting `cleanup.policy=compact` logs in a background thread (once)."""
        self._check_open()
        if self.cleaner is None:
            self.cleaner = LogCleaner(self, config)
            self.cleaner.start()
        return self.cleaner

    def stop_cleaner(self) -> None:
        if self.cleaner is not None:
            self.cleaner.shutdown()

    # --- periodic work ------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the three offset checkpoints in every live log dir (Kafka does this every
        minute); a dir where that fails goes offline."""
        for log_dir in self.live_log_dirs:
            self._checkpoint_or_fail(log_dir)

    def _checkpoint_or_fail(self, log_dir: Path) -> None:
        try:
            self.checkpoint_dir(log_dir)
        except OSError as error:
            self.fail_dir(log_dir, error, "writing offset checkpoints")

    def checkpoint_dir(self, log_dir: Path) -> None:
        """Nothing is written into a dir that has failed."""
        with self._state_lock:
            if log_dir not in self._live_dirs:
                return
            logs = {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == log_dir}
        write_offsets_checkpoint(
            log_dir / RECOVERY_POINT_CHECKPOINT, {tp: log.recovery_point for tp, log in logs.items()}
        )
        write_offsets_checkpoint(
            log_dir / REPLICATION_OFFSET_CHECKPOINT, {tp: log.high_watermark for tp, log in logs.items()}
        )
        # Kafka only records start offsets that differ from the first segment's base offset.
        write_offsets_checkpoint(
            log_dir / LOG_START_OFFSET_CHECKPOINT,
            {
                tp: log.log_start_offset
                for tp, log in logs.items()
                if log.log_start_offset > log.segments[0].base_offset
            },
        )

    def wait_for_flushes(self, timeout: float | None = None) -> bool:
        """Wait until the background flushes scheduled so far (by rolls) are done; False on
        timeout. Not while holding a log's lock: a flush may be waiting for it."""
        return self.flusher.wait_idle(timeout)

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flush logs whose flush.ms has passed; returns how many were flushed. A log whose
        flush fails takes its dir offline."""
        now = _now_ms() if now_ms is None else now_ms
        return self._on_every_log(lambda log: log.maybe_flush(now), "flushing log")

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Run retention on every log; returns the number of segments deleted. A log whose
        retention fails takes its dir offline."""
        now = _now_ms() if now_ms is None else now_ms
        return self._on_every_log(lambda log: log.apply_retention(now), "deleting segments of")

    def _on_every_log(self, work: Callable[[PartitionLog], int], action: str) -> int:
        """The sum of `work` over every log; a log where it meets a disk error takes its dir offline."""
        done = 0
        for (topic, partition), log in list(self._logs.items()):
            try:
                done += work(log)
            except OSError as error:
                self.io_error(log, error, f"{action} {topic}-{partition}")
        return done

    # --- meta.properties ----------------------------------------------------------------

    def ensure_meta_properties(
        self, broker_id: int, cluster_id: str | None = None, *, version: int = 0
    ) -> str:
        """Check every log dir's `meta.properties` against this broker, writing it where
        missing. Returns the cluster id (the given one, the one on disk, or a new one)."""
        found = {d: read_meta_properties(d / META_PROPERTIES) for d in self.log_dirs}
        for log_dir, meta in found.items():
            if meta is not None and meta.node_id != broker_id:
                raise InconsistentMetadataError(
                    f"{log_dir / META_PROPERTIES} has broker id {meta.node_id}, this broker is {broker_id}"
                )
        ids = {m.cluster_id for m in found.values() if m is not None and m.cluster_id}
        if cluster_id is not None:
            ids.add(cluster_id)
        if len(ids) > 1:
            raise InconsistentMetadataError(f"log dirs disagree on the cluster id: {sorted(ids)}")
        chosen = ids.pop() if ids else new_cluster_id()
        for log_dir, meta in found.items():
            if meta is None or meta.cluster_id != chosen:
                write_meta_properties(log_dir / META_PROPERTIES, MetaProperties(version, broker_id, chosen))
        return chosen

    # --- shutdown -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("log manager is closed")

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush and close every log, checkpoint, then mark each dir clean.
        Background flushes left are no-ops on closed logs; their thread is stopped last.
        A failed dir gets nothing: its next start recovers it."""
        if self._closed:
            return
        self.stop_cleaner()
        for (topic, partition), log in list(self._logs.items()):
            try:
                log.close()
            except OSError as error:
                self.io_error(log, error, f"closing log {topic}-{partition}")
        for log_dir in self.live_log_dirs:
            try:
                self.checkpoint_dir(log_dir)
                write_clean_shutdown_file(log_dir, broker_epoch)
            except OSError as error:
                self.fail_dir(log_dir, error, "writing the clean shutdown marker")
        self.flusher.shutdown()
        self._release_locks()
        self._closed = True

    def halt(self) -> None:
        """Stop at once, as Kafka's Exit.halt: close every file without flushing, checkpointing
        or marking any dir clean, so the next start recovers them all."""
        if self._closed:
            return
        self.stop_cleaner()
        self.flusher.shutdown()
        with self._state_lock:
            self._closed = True
            logs = list(self._logs.values())
        for log in logs:
            log.close_handles()
        self._release_locks()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
