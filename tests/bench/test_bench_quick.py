"""`python -m bench --quick`: the whole benchmark harness, every suite, as a smoke test.

Not a timed test: it checks that every suite runs against real brokers (a `kbroker serve`
subprocess, librdkafka's mock cluster and Apache Kafka, a JVM the harness starts) and reports
figures, that the JSON holds them, and that --no-docs leaves docs/ alone. The figures
themselves are noise on a busy CI machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = sorted(p.stem for p in (REPO / "bench" / "suites").glob("*.py") if not p.stem.startswith("_"))
COMPARED_WITH_MOCK = ("produce", "consume", "latency")
COMPARED_WITH_KAFKA = ("produce", "perftest", "consume", "latency", "transactions")
# figures of a second or less, which may be 0 on a busy machine
KAFKA_COLUMN_TOO = ("scale", "groups", "cluster", "cluster_transactions")
MOCK, KAFKA = "librdkafka mock", "Apache Kafka"
CPU_METRIC = "broker CPU s / 1M records"


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _harness_docs() -> dict[str, str]:
    """What `python -m bench` writes without --no-docs: docs/performance.md and docs/img/."""
    files = [REPO / "docs" / "performance.md", *sorted((REPO / "docs" / "img").glob("*"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def _kafka_problem() -> str | None:
    """Why this machine cannot run Apache Kafka (no JDK, no jars), or None. In CI that is a failure."""
    from bench import kafka

    problem = kafka.unavailable()
    if problem is not None and os.environ.get("CI") == "true":
        pytest.fail(f"CI must compare with Apache Kafka: {problem}")
    return problem


def _column(results: list[dict], peer: str) -> list[dict]:
    """The rows against `peer`: there are some, and each has the peer's figure."""
    rows = [r for r in results if (r.get("peer_name") or "").startswith(peer)]
    assert rows, f"no {peer} column in {results}"
    assert all(_finite(row["peer"]) for row in rows), rows
    return rows


def _assert_compared(results: list[dict], peer: str) -> None:
    """Rows against `peer` exist, and each has kbroker's figure, the peer's and their ratio."""
    for row in _column(results, peer):
        assert _finite(row["kbroker"]) and row["kbroker"] > 0, row
        assert _finite(row["peer"]) and row["peer"] > 0, row
        assert _finite(row["ratio"]), row


@pytest.mark.slow
@pytest.mark.timeout(1480)
def test_quick_run_reports_figures_from_every_suite_and_leaves_docs_alone(tmp_path: Path) -> None:
    kafka_problem = _kafka_problem()
    docs_before = _harness_docs()
    completed = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path), "--no-docs"],
                               cwd=REPO, capture_output=True, text=True, timeout=1460)
    output = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, output

    (result_file,) = tmp_path.glob("*.json")
    run = json.loads(result_file.read_text())
    assert run["quick"] is True
    assert sorted(run["suites"]) == SUITES
    for name, suite in run["suites"].items():
        assert suite["error"] is None, f"{name}: {suite['error']}"
        if name == "perftest" and kafka_problem:
            continue  # Kafka's ProducerPerformance needs the JDK and jars Kafka needs
        figures = [r.get("kbroker") if r.get("kbroker") is not None else r.get("reference") for r in suite["results"]]
        assert any(_finite(f) for f in figures), f"{name} reported no figure: {suite['results']}"

    for name in COMPARED_WITH_MOCK:
        _assert_compared(run["suites"][name]["results"], MOCK)
    assert all(_finite(r["reference"]) and r["reference"] > 0 for r in run["suites"]["limits"]["results"])
    cpu_rows = [r for r in run["suites"]["produce"]["results"] if r["metric"] == CPU_METRIC]
    assert cpu_rows and all(_finite(r["kbroker"]) and r["kbroker"] > 0 for r in cpu_rows), cpu_rows
    if kafka_problem is None:
        assert run["kafka"].startswith(KAFKA), run["kafka"]
        for name in COMPARED_WITH_KAFKA:
            _assert_compared(run["suites"][name]["results"], KAFKA)
        for name in KAFKA_COLUMN_TOO:
            _column(run["suites"][name]["results"], KAFKA)
        _assert_compared(cpu_rows, KAFKA)

    assert _harness_docs() == docs_before, "--no-docs must leave docs/performance.md and docs/img alone"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    drawn = {p.name for p in (tmp_path / "img").glob("*.png")}
    assert {"bench-throughput.png", "bench-latency.png"} <= drawn
