"""How `python -m bench` judges targets and rewrites the generated part of docs/performance.md."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """(bench.harness, bench.report), imported from this checkout."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench.harness"), importlib.import_module("bench.report")


def _run(command: str) -> dict:
    machine = {"cpu_model": "test CPU", "logical_cpus": 2, "memory_gib": 4, "kernel": "6.1", "python": "3.11.7",
               "confluent-kafka": "2.4.0", "librdkafka": "2.4.0"}
    return {"command": command, "started": "2026-01-01 00:00 UTC", "quick": False, "rounds": 3, "peer": None,
            "commit": "abc1234", "machine": machine}


def _suite(results: list) -> dict:
    return {"seconds": 1.0, "error": None, "notes": [], "load_before": 0.5, "load_after": 0.6,
            "results": [r.as_json() for r in results]}


def test_a_missed_throughput_target_says_by_how_much_and_whether_the_floor_held(bench) -> None:
    harness, _ = bench
    result = harness.Result("produce", "produce 100 B", "msgs/s", 90.0, 100.0, "librdkafka mock",
                            target_ratio=1.0, floor_ratio=0.8)
    assert result.verdict == "missed by 10% (0.90x against 1x; above the 0.8x floor)"


def test_a_latency_target_is_judged_on_kbrokers_own_figure(bench) -> None:
    harness, _ = bench
    met = harness.Result("latency", "e2e at 10,000 msgs/s", "p99 ms", 4.2, 0.5, "mock", higher_is_better=False,
                         target_value=5.0)
    missed = harness.Result("latency", "e2e at 10,000 msgs/s", "p99 ms", 7.5, 0.5, "mock", higher_is_better=False,
                            target_value=5.0)
    assert met.verdict.startswith("met")
    assert missed.verdict == "missed by 2.5 ms (7.5 against 5)"


def test_updating_the_docs_replaces_only_the_suites_that_ran(bench, tmp_path: Path) -> None:
    harness, report = bench
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\nHand-written intro.\n\n## Wire codecs\n\nHand-written analysis.\n")
    old = harness.Result("produce", "produce 100 B", "msgs/s", 1.0, 2.0, "librdkafka mock")
    kept = harness.Result("latency", "e2e at 1,000 msgs/s", "p99 ms", 3.0, 4.0, "librdkafka mock",
                          higher_is_better=False)
    first = _run("python -m bench produce latency")
    report.update_docs(page, {"produce": report.suite_block("produce", _suite([old]), first, None),
                              "latency": report.suite_block("latency", _suite([kept]), first, None)},
                       ["produce", "latency"], [])
    new = harness.Result("produce", "produce 100 B", "msgs/s", 123_456.0, 100_000.0, "librdkafka mock")
    report.update_docs(page, {"produce": report.suite_block("produce", _suite([new]), _run("python -m bench produce"),
                                                            None)}, ["produce", "latency"], [])

    text = page.read_text()
    assert "Hand-written intro." in text and "Hand-written analysis." in text
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    assert "123,456" in text and "1.23x" in text
    assert text.count("| produce 100 B |") == 1  # the old produce row is gone
    assert "`python -m bench produce latency`" in text  # the latency block keeps the command that made it
    assert text.index("bench:suite produce") < text.index("bench:suite latency")
