"""scripts/client_suites.py: which outcomes of the client projects' own suites fail the run, and the pinned suite."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "client_suites.py"
_spec = importlib.util.spec_from_file_location("client_suites", SCRIPT)
suites = importlib.util.module_from_spec(_spec)
sys.modules["client_suites"] = suites  # dataclasses look their module up by name
_spec.loader.exec_module(suites)

GAP = next(iter(suites.KNOWN_GAPS))
OTHER = "test/integration/test_consumer_integration.py::test_consumer"


def _run(target: str, outcomes: dict[str, str] | None = None) -> suites.SuiteRun:
    run = suites.SuiteRun("kafka-python", target, "4.4.0", exit_code=1)
    run.outcomes = {node: {"outcome": outcome, "message": "why"} for node, outcome in (outcomes or {}).items()}
    return run


def test_a_known_gap_failing_on_kbroker_is_no_problem():
    assert suites.problems([_run("kbroker", {GAP: "failed", OTHER: "passed"})]) == []


def test_any_other_kbroker_failure_is_a_problem():
    found = suites.problems([_run("kbroker", {OTHER: "error"})])
    assert len(found) == 1 and OTHER in found[0]


def test_a_known_gap_that_passes_must_leave_the_list():
    found = suites.problems([_run("kbroker", {GAP: "passed"})])
    assert len(found) == 1 and "take it off KNOWN_GAPS" in found[0]


def test_a_failure_on_kafka_is_a_problem_of_the_setup():
    found = suites.problems([_run("kafka-4", {GAP: "failed"})])
    assert len(found) == 1 and "fails on Kafka" in found[0]


def test_a_run_that_ran_nothing_or_timed_out_is_a_problem():
    empty = _run("kafka-4")
    timed_out = _run("kbroker", {OTHER: "passed"})
    timed_out.timed_out = True
    assert len(suites.problems([empty])) == 1 and len(suites.problems([timed_out])) == 1


def test_the_suite_is_the_kafka_python_release_installed():
    assert suites.pinned_version("kafka-python") == importlib.metadata.version("kafka-python")
