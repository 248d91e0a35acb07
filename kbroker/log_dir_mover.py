"""Moves partition logs between this broker's log dirs (AlterReplicaLogDirs): Kafka's ReplicaAlterLogDirsThread.

One asyncio task, alive while a move is pending, copies each moving log into its future log
(kbroker.log.future_log) a chunk of replica.fetch.max.bytes at a time, and yields to the event loop after each
chunk so clients are served meanwhile. The copies together stay under the dynamic broker config
replica.alter.log.dirs.io.max.bytes.per.second when it is set, as the quota of Kafka's thread does. A copy that
has caught up is swapped in within the same step, so nothing is appended between the check and the swap, and the
partition's hosted state takes the new log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.log.errors import LogDirOfflineError
from kbroker.log.future_log import FutureLog, copy_step
from kbroker.log.manager import LogManager
from kbroker.log.partition_log import PartitionLog
from kbroker.replication_quotas import ByteRateLimit

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # between rounds in which no copy moved on


class LogDirMover:
    """Runs the pending moves of `logs`; `start` after asking for one (or on opening logs that have some)."""

    def __init__(self, logs: LogManager, replicas: ReplicaManager, chunk_bytes: Callable[[], int],
                 rate: Callable[[], float | None] = lambda: None) -> None:
        """`rate`: the copies' bytes per second at most (None: unlimited), read again before every chunk."""
        self.logs = logs
        self.replicas = replicas
        self.chunk_bytes = chunk_bytes
        self.throttle = ByteRateLimit(rate)
        self.completed = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Run the pending moves, if any (a no-op while they run already)."""
        if self.logs.futures() and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while pending := self.logs.futures():
            progressed = False
            for (topic, partition), future in pending:
                while wait := self.throttle.wait_s():
                    await asyncio.sleep(wait)
                progressed |= self._step(topic, partition, future)
                await asyncio.sleep(0)
            if not progressed:
                await asyncio.sleep(IDLE_WAIT_S)

    def _step(self, topic: str, partition: int, future: FutureLog) -> bool:
        """One chunk of one move (and the swap once it has caught up); whether the copy moved on."""
        current = self.logs.get(topic, partition)
        if current is None or self.logs.future(topic, partition) is not future:
            return False  # given up, or its partition went (deleted, or its dir failed) since the round began
        before, size_before = future.log.log_end_offset, future.log.size
        try:
            caught_up = copy_step(current, future, self.chunk_bytes())
            self.throttle.spend(max(0, future.log.size - size_before))
            if caught_up:
                self._swap(topic, partition, current)
                return True
        except LogDirOfflineError as error:
            logger.warning("Moving %s-%d to %s stopped: %s", topic, partition, future.log_dir, error)
            return False
        except OSError as error:
            self.logs.io_error(future.log, error, f"copying {topic}-{partition} into its future log")
            return False
        except Exception:
            logger.exception("Moving %s-%d to %s failed; the move is given up", topic, partition, future.log_dir)
            self.logs.remove_future(topic, partition)
            return False
        return future.log.log_end_offset != before

    def _swap(self, topic: str, partition: int, current: PartitionLog) -> None:
        moved = self.logs.replace_current_with_future(topic, partition)
        hosted = self.replicas.get(topic, partition)
        if hosted is not None and hosted.log is current:
            hosted.log = moved
        self.completed += 1
