"""The whole suite's safety net. pytest-timeout fails a test through SIGALRM, which Python only handles between
bytecodes: a test stuck inside one C call (a librdkafka destroy, a wedged native thread join) never sees it, and
its worker hangs the run until CI's own limit. Here a watchdog thread in C (faulthandler) gives each test its
timeout plus a grace, then writes every thread's stack and ends the process; xdist reports the test as crashed,
the run goes on, and the stacks are printed in the summary."""

from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO

import pytest

GRACE_SECONDS = 120  # past the test's own timeout: pytest-timeout's failure, with its teardown, comes first
STACKS_DIR = "KBROKER_TEST_STACKS_DIR"  # where xdist workers write the stacks; the controller prints them
_stacks: IO[str] | None = None  # where the watchdog writes
_stacks_in_file = False  # a worker's file, emptied after each test that ended


def pytest_configure(config: pytest.Config) -> None:
    global _stacks, _stacks_in_file
    if not hasattr(config, "workerinput"):
        if STACKS_DIR not in os.environ:
            os.environ[STACKS_DIR] = tempfile.mkdtemp(prefix="kbroker-stuck-")
            config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(STACKS_DIR), ignore_errors=True))
        _stacks = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")  # the terminal's, not a test's captured stderr
    else:  # a worker's stderr goes nowhere the run's output shows
        _stacks = open(Path(os.environ[STACKS_DIR]) / f"{config.workerinput['workerid']}-{os.getpid()}.txt", "w")  # noqa: SIM115 - open for the worker's life
        _stacks_in_file = True


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or STACKS_DIR not in os.environ:
        return
    for dump in sorted(Path(os.environ[STACKS_DIR]).glob("*.txt")):
        if text := dump.read_text(errors="replace").strip():
            terminalreporter.section(f"stacks of a stuck test ({dump.stem})", sep="-", red=True)
            terminalreporter.line(text)


def _timeout(item: pytest.Item) -> float:
    """The item's pytest-timeout limit: its marker, else --timeout, else the ini's; 0 for none."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float(marker.args[0] if marker.args else marker.kwargs["timeout"] or 0)
    configured = item.config.getoption("timeout", None) or item.config.getini("timeout")
    return float(configured or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    limit = _timeout(item)
    if limit > 0 and _stacks is not None:
        if _stacks_in_file:
            print(f"stuck in {item.nodeid}:", file=_stacks, flush=True)
        faulthandler.dump_traceback_later(limit + GRACE_SECONDS, exit=True, file=_stacks)
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()
            if _stacks_in_file:
                _stacks.seek(0)
                _stacks.truncate()
