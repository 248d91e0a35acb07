"""Background fsync of rolled segments: Kafka's one-off "flush-log" task of UnifiedLog.roll.

Rolling must not fsync the segments before the new one inside the produce request: with
1 GiB segments that would stall every client of the broker for as long as the disk takes.
As in Kafka, `PartitionLog.roll` only schedules "flush everything below the new segment's
base offset" (flushUptoOffsetExclusive) and returns. A LogManager owns one `LogFlusher`, a
daemon thread running such one-off tasks in the order they were scheduled (Kafka runs them
on its shared scheduler pool; one thread suffices here since fsync releases the GIL and a
single disk queue orders them anyway).

The task itself is `PartitionLog.flush_segments_below`: it takes duplicated descriptors of
what must be synced under the log's lock (`PendingSync`), fsyncs them without it, so that
produce and fetch on that partition go on, and moves the recovery point forward under the
lock again, only if everything still in the log below that offset was really synced.
Descriptors rather than segment objects make it safe against whatever happens meanwhile:
a segment deleted, compacted away, truncated or closed keeps its open description until
the sync is done, and its fate is judged afterwards under the lock.

A task that raises OSError has hit the disk of the log dir it was scheduled for: it is handed
to `on_io_error`, and the LogManager takes that dir offline (after a failed fsync Linux may
have dropped the dirty pages, so nothing acknowledged there can be vouched for any more).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

__all__ = ["FLUSHER_THREAD_NAME", "LogFlusher", "PendingSync"]

log = logging.getLogger(__name__)

FLUSHER_THREAD_NAME = "kbroker-log-flusher"
_SHUTDOWN_TIMEOUT_S = 60.0


class PendingSync:
    """Descriptors opened under a log's lock and synced later without it. Each belongs to an
    owner (a segment, the directory, a snapshot) that a failure is charged to."""

    def __init__(self) -> None:
        self._targets: list[tuple[int, object, bool]] = []  # (fd, owner, data only)
        self.failures: list[tuple[object, OSError | ValueError]] = []

    def add_fd(self, fd: int, owner: object, *, data_only: bool = False) -> None:
        """Take ownership of `fd`; `data_only` syncs with fdatasync (what Kafka's msync of an
        index amounts to)."""
        self._targets.append((fd, owner, data_only))

    def add_path(self, path: Path, owner: object, *, data_only: bool = False, missing_ok: bool = False) -> None:
        """Open `path` now (read-only is enough to sync it); a missing file is a failure of its
        owner unless `missing_ok` (Kafka's flushFileIfExists)."""
        try:
            self.add_fd(os.open(path, os.O_RDONLY), owner, data_only=data_only)
        except FileNotFoundError as exc:
            if not missing_ok:
                self.fail(owner, exc)
        except OSError as exc:
            self.fail(owner, exc)

    def fail(self, owner: object, error: OSError | ValueError) -> None:
        self.failures.append((owner, error))

    def failed(self, owner: object) -> bool:
        return any(o is owner for o, _ in self.failures)

    def run(self) -> None:
        """Sync every descriptor (the slow part: call it without holding any log's lock)."""
        for fd, owner, data_only in self._targets:
            try:
                (os.fdatasync if data_only else os.fsync)(fd)
            except OSError as exc:
                self.fail(owner, exc)

    def close(self) -> None:
        for fd, _, _ in self._targets:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._targets.clear()


IoErrorHandler = Callable[[Path, OSError, str], object]  # (log dir, error, what was being done)


class _Task(NamedTuple):
    run: Callable[[], object]
    log_dir: Path | None
    action: str


class LogFlusher:
    """One daemon thread running one-off background log tasks in order (see the module docstring).

    The thread starts with the first task. An OSError from a task scheduled with a `log_dir`
    goes to `on_io_error` (called on this thread, holding no log's lock); anything else a task
    raises is logged and the thread goes on. Never wait for it (`wait_idle`) while holding a
    log's lock: its task may be waiting for that lock.
    """

    def __init__(self, name: str = FLUSHER_THREAD_NAME, *, on_io_error: IoErrorHandler | None = None) -> None:
        self.name = name
        self.on_io_error = on_io_error
        # told the seconds each log flush of this broker took, in the background or not (kbroker.metrics)
        self.flush_observers: list[Callable[[float], object]] = []
        self._cond = threading.Condition()
        self._tasks: deque[_Task] = deque()
        self._busy = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    def schedule(self, task: Callable[[], object], *, log_dir: Path | None = None,
                 action: str = "running a background log task") -> bool:
        """Queue `task`, whose OSError is a failure of `log_dir` while doing `action`; False (not
        queued) once shut down, so the caller runs it itself."""
        with self._cond:
            if self._stopped:
                return False
            self._tasks.append(_Task(task, log_dir, action))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every task scheduled so far has run; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._tasks and not self._busy, timeout)

    @property
    def pending(self) -> int:
        """Tasks queued or running."""
        with self._cond:
            return len(self._tasks) + self._busy

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def shutdown(self, timeout: float = _SHUTDOWN_TIMEOUT_S) -> None:
        """Drop the queued tasks, let the running one finish, stop the thread. The owner closes
        (and so fully flushes) its logs, which turns any task left into a no-op anyway."""
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _next_task(self) -> _Task | None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()
            while not self._tasks and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return None
            self._busy = True
            return self._tasks.popleft()

    def _run_one(self, task: _Task) -> None:
        try:
            task.run()
        except OSError as error:
            if task.log_dir is None or self.on_io_error is None:
                log.exception("background log task failed while %s", task.action)
                return
            try:
                self.on_io_error(task.log_dir, error, task.action)
            except Exception:
                log.exception("handling the failure of %s failed", task.log_dir)
        except Exception:
            log.exception("background log task failed while %s", task.action)

    def _run(self) -> None:
        try:
            while (task := self._next_task()) is not None:
                self._run_one(task)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
