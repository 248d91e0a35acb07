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

A partition's log can move to another log dir of the broker (AlterReplicaLogDirs): `create_future` starts a
copy, the "future" log in `<topic>-<partition>.<uuid>-future` (kbroker.log.future_log fills it), and
`replace_current_with_future` swaps it in once it has caught up: the current directory is renamed
`-delete`, the future one takes the partition's name, and the old log's files stay open for reads in flight
until file.delete.delay.ms has passed. A future log found on opening resumes its move; found alone (a swap
cut short between its two renames) it is the partition's log. A partition asked to move before this broker
hosts it is created in that dir (Kafka's preferred log dir).

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
    PARTITION_METADATA,
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
from kbroker.log.future_log import FUTURE_SUFFIX, FutureLog
from kbroker.log.partition_log import PartitionLog

__all__ = ["LogManager", "parse_partition_dir"]

TopicPartition = tuple[str, int]
DirFailureListener = Callable[[Path, bool], object]  # (the failed log dir, whether no live dir is left)

logger = logging.getLogger(__name__)

KRAFT_METADATA_TOPIC = "__cluster_metadata"  # the KRaft metadata log Apache Kafka keeps in a log dir
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETE_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")
_FUTURE_DIR = re.compile(r"^(.+)-(\d+)\.[0-9a-f]{32}-future$")
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


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for the directory of a log being moved to another log dir (UnifiedLog.logFutureDirName)."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"


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
        self._futures: dict[TopicPartition, FutureLog] = {}  # logs being moved -> their copy in the new dir
        self._preferred_dirs: dict[TopicPartition, Path] = {}  # where a partition not hosted yet is to be created
        self._retired: list[tuple[int, PartitionLog, Path]] = []  # logs a move replaced: (delete after, log, dir)
        self._found_futures: list[tuple[TopicPartition, Path]] = []
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
            self._adopt_futures(now)
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
            future = _FUTURE_DIR.match(child.name)
            if future is not None:
                self._found_futures.append(((future.group(1), int(future.group(2))), child))
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

    def _adopt_futures(self, now_ms: int) -> None:
        """The future logs found on opening: see the module docstring."""
        for tp, directory in self._found_futures:
            if tp in self._futures:
                raise LogError(f"partition {tp[0]}-{tp[1]} has two future logs, the second in {directory}")
            log = PartitionLog(directory, self.config_for(tp[0]), now_ms=now_ms, flusher=self.flusher)
            if tp in self._logs:
                self._futures[tp] = FutureLog(log, directory.parent, truncations_seen=-1)
                logger.info("Resuming the move of %s-%d to %s", *tp, directory.parent)
                continue
            log.close()
            final = directory.parent / f"{tp[0]}-{tp[1]}"
            os.rename(directory, final)
            fsync_dir(directory.parent)
            logger.info("Completing the move of %s-%d to %s cut short by a crash", *tp, directory.parent)
            self._register(tp, directory.parent, PartitionLog(final, self.config_for(tp[0]), now_ms=now_ms,
                                                              flusher=self.flusher))
        self._found_futures = []

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
        for log in [*self._logs.values(), *(f.log for f in self._futures.values())]:
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
            # a move into or out of the failed dir stops; its future log is left for a restart to resume
            logs += [self._futures.pop(tp).log for tp, future in list(self._futures.items())
                     if future.log_dir == log_dir or tp in self._offline]
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

    def _next_log_dir(self, tp: TopicPartition) -> Path:
        """The dir an AlterReplicaLogDirs asked for, else the live log dir holding the fewest partitions (first
        listed on a tie), as Kafka picks."""
        if not self._live_dirs:
            raise LogDirOfflineError(f"every log dir has failed: {', '.join(str(d) for d in self.log_dirs)}")
        preferred = self._preferred_dirs.pop(tp, None)
        if preferred in self._live_dirs:
            return preferred
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
            log_dir = self._next_log_dir(tp)
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
        self.remove_future(topic, partition)
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

    # --- moving a log to another log dir (AlterReplicaLogDirs) ---------------------------

    def resolve_log_dir(self, path: str) -> Path | None:
        """The log dir `path` names (compared as absolute paths, as Kafka does), or None."""
        wanted = Path(path).absolute()
        return next((d for d in self.log_dirs if d.absolute() == wanted), None)

    def prefer_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Create the partition in `log_dir` when it comes to be hosted here (Kafka's maybeUpdatePreferredLogDir)."""
        if (topic, partition) not in self._logs:
            self._preferred_dirs[(topic, partition)] = log_dir

    def future(self, topic: str, partition: int) -> FutureLog | None:
        return self._futures.get((topic, partition))

    def futures(self) -> list[tuple[TopicPartition, FutureLog]]:
        return list(self._futures.items())

    def create_future(self, topic: str, partition: int, log_dir: Path) -> bool:
        """Start moving the partition's log to `log_dir` (Kafka's maybeCreateFutureReplica); False when there
        is nothing to start: the log is there already (a move elsewhere is given up) or is on its way there.
        LogDirOfflineError while a log dir is offline, as Kafka then creates no future log anywhere."""
        self._check_open()
        tp = (topic, partition)
        current = self._logs[tp]
        if self._dir_of[tp] == log_dir:
            self.remove_future(topic, partition)
            return False
        pending = self._futures.get(tp)
        if pending is not None and pending.log_dir == log_dir:
            return False
        self.remove_future(topic, partition)
        if self.offline_log_dirs:
            raise LogDirOfflineError(f"cannot create the future log of {topic}-{partition}: log dirs "
                                     f"{', '.join(str(d) for d in self.offline_log_dirs)} are offline")
        directory = log_dir / future_dir_name(topic, partition)
        try:
            log = PartitionLog(directory, self.config_for(topic), flusher=self.flusher)
            metadata = current.dir / PARTITION_METADATA
            if metadata.is_file():
                shutil.copyfile(metadata, directory / PARTITION_METADATA)
            fsync_dir(log_dir)
        except OSError as error:
            self.fail_dir(log_dir, error, f"creating the future log of {topic}-{partition}")
            raise LogDirOfflineError(f"cannot create the future log of {topic}-{partition} in {log_dir}: "
                                     f"{error}") from error
        log.truncate_fully_and_start_at(current.log_start_offset)
        self._futures[tp] = FutureLog(log, log_dir, truncations_seen=current.truncation_count)
        logger.info("Created the future log of %s-%d in %s", topic, partition, directory,
                    extra={"topic": topic, "partition": partition, "dir": str(log_dir)})
        return True

    def remove_future(self, topic: str, partition: int) -> bool:
        """Give up moving the partition's log: its future log is closed and deleted."""
        future = self._futures.pop((topic, partition), None)
        if future is None:
            return False
        future.log.delete()
        logger.info("Removed the future log of %s-%d from %s", topic, partition, future.log_dir)
        return True

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """Swap in the future log, which has caught up with the current one (Kafka's
        replaceCurrentWithFutureLog): the moved log, opened in its new dir, is returned; holders of the old
        log must take it. The old log's files stay open for reads in flight until file.delete.delay.ms."""
        self._check_open()
        tp = (topic, partition)
        current, future = self._logs[tp], self._futures[tp]
        if future.log.log_end_offset != current.log_end_offset:
            raise LogError(f"the future log of {topic}-{partition} has not caught up")
        source_dir, high_watermark = self._dir_of[tp], current.high_watermark
        if self.cleaner is not None:
            self.cleaner.forget(tp, source_dir)
        future.log.close()  # flushed, with a producer snapshot at its end: reopened without recovery
        del self._futures[tp]
        final, doomed = future.log_dir / f"{topic}-{partition}", source_dir / _delete_dir_name(topic, partition)
        # the current log is let go first: a crash between the renames leaves the future log alone, which opening
        # then takes as the partition's (a crash before them, and the move resumes)
        try:
            os.rename(current.dir, doomed)
            fsync_dir(source_dir)
        except OSError as error:
            self.fail_dir(source_dir, error, f"replacing the log of {topic}-{partition} with its future log")
            raise LogDirOfflineError(f"cannot move {topic}-{partition} out of {source_dir}: {error}") from error
        try:
            os.rename(future.log.dir, final)
            fsync_dir(future.log_dir)
        except OSError as error:
            with contextlib.suppress(OSError):  # the current log serves on where it was
                os.rename(doomed, current.dir)
            self.fail_dir(future.log_dir, error, f"replacing the log of {topic}-{partition} with its future log")
            raise LogDirOfflineError(f"cannot move {topic}-{partition} to {future.log_dir}: {error}") from error
        log = PartitionLog(final, self.config_for(topic), recovery_point=future.log.log_end_offset,
                           log_start_offset=future.log.log_start_offset, high_watermark=high_watermark,
                           had_clean_shutdown=True, flusher=self.flusher)
        for epoch, start in current.leader_epoch_cache.entries:  # a leader's epoch begun at the log end: no batch
            if epoch > log.leader_epoch_cache.latest_epoch:  # has it, and reopening a log drops it (as Kafka's)
                log.maybe_assign_epoch_start_offset(epoch, start)
        self._register(tp, future.log_dir, log)
        self._retired.append((_now_ms() + current.config.file_delete_delay_ms, current, doomed))
        self._checkpoint_or_fail(source_dir)
        self._checkpoint_or_fail(future.log_dir)
        logger.info("The current log of %s-%d in %s is replaced by the future log in %s", topic, partition,
                    source_dir, future.log_dir, extra={"topic": topic, "partition": partition,
                                                       "dir": str(future.log_dir)})
        return log

    def purge_retired(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Delete the logs moves replaced once their delay has passed; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        due = [(log, doomed) for deadline, log, doomed in self._retired if force or deadline <= now]
        self._retired = [entry for entry in self._retired if not (force or entry[0] <= now)]
        for log, doomed in due:
            log.close_handles()
            shutil.rmtree(doomed, ignore_errors=True)
        return len(due)

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
        self.purge_retired(now)
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
        self.purge_retired(force=True)
        for (topic, partition), log in [*self._logs.items(), *((tp, f.log) for tp, f in self._futures.items())]:
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
            logs = [*self._logs.values(), *(f.log for f in self._futures.values()), *(r[1] for r in self._retired)]
        for log in logs:
            log.close_handles()
        self._release_locks()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
