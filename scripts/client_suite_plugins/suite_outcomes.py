"""pytest plugin (`-p suite_outcomes`): each test's outcome, as JSON in $KBROKER_SUITE_OUTCOMES.

{node id: {"outcome": "passed" | "failed" | "error" | "skipped", "message": first line of the reason}}.
Written after every test, so a run stopped by scripts/client_suites.py's time limit still leaves what it did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_outcomes: dict[str, dict[str, str]] = {}


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def _outcome(report: pytest.TestReport) -> str | None:
    """The test's outcome as pytest's summary counts it; None while nothing is decided yet."""
    if report.when == "call":
        return "skipped" if report.skipped else report.outcome
    if report.failed:
        return "error"  # a fixture failed in setup or teardown
    if report.skipped and report.when == "setup":
        return "skipped"
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = _outcome(report)
    if outcome is None or _outcomes.get(report.nodeid, {}).get("outcome") == "error":
        return
    _outcomes[report.nodeid] = {"outcome": outcome, "message": _message(report) if outcome != "passed" else ""}
    path = os.environ.get("KBROKER_SUITE_OUTCOMES")
    if path:
        Path(path).write_text(json.dumps(_outcomes, indent=1, sort_keys=True))
