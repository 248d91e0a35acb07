"""`python -m bench --quick`: the whole benchmark harness, every suite, as a smoke test.

Not a timed test: it checks that every suite runs against real brokers (a `kbroker serve`
subprocess and librdkafka's mock cluster) and reports figures, that the JSON holds them, and
that --no-docs leaves docs/ alone. The figures themselves are noise on a busy CI machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = sorted(p.stem for p in (REPO / "bench" / "suites").glob("*.py") if not p.stem.startswith("_"))
COMPARED_WITH_MOCK = ("produce", "consume", "latency")


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _harness_docs() -> dict[str, str]:
    """What `python -m bench` writes without --no-docs: docs/performance.md and docs/img/."""
    files = [REPO / "docs" / "performance.md", *sorted((REPO / "docs" / "img").glob("*"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_run_reports_figures_from_every_suite_and_leaves_docs_alone(tmp_path: Path) -> None:
    docs_before = _harness_docs()
    completed = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path), "--no-docs"],
                               cwd=REPO, capture_output=True, text=True, timeout=290)
    output = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, output

    (result_file,) = tmp_path.glob("*.json")
    run = json.loads(result_file.read_text())
    assert run["quick"] is True
    assert sorted(run["suites"]) == SUITES
    for name, suite in run["suites"].items():
        assert suite["error"] is None, f"{name}: {suite['error']}"
        figures = [r.get("kbroker") if r.get("kbroker") is not None else r.get("reference") for r in suite["results"]]
        assert any(_finite(f) for f in figures), f"{name} reported no figure: {suite['results']}"

    for name in COMPARED_WITH_MOCK:
        for result in run["suites"][name]["results"]:
            assert _finite(result["kbroker"]) and result["kbroker"] > 0, result
            assert _finite(result["peer"]) and result["peer"] > 0, result
            assert result["peer_name"] == "librdkafka mock"
            assert _finite(result["ratio"])
    assert all(_finite(r["reference"]) and r["reference"] > 0 for r in run["suites"]["limits"]["results"])

    assert _harness_docs() == docs_before, "--no-docs must leave docs/performance.md and docs/img alone"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    drawn = {p.name for p in (tmp_path / "img").glob("*.png")}
    assert {"bench-throughput.png", "bench-latency.png"} <= drawn
