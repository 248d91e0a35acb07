"""Regenerate the matrix in docs/compatibility.md from real runs of compat-tests/, kbroker beside Kafka.

    python3 scripts/gen_compat_matrix.py -n 2                   # kbroker, Kafka 4.x, Kafka 3.9: three runs
    python3 scripts/gen_compat_matrix.py --brokers kbroker,kafka-4 -n 2 compat-tests/test_kcat.py
    python3 scripts/gen_compat_matrix.py --reports DIR          # keep each run's JSON outcomes in DIR
    python3 scripts/gen_compat_matrix.py --render-only --reports DIR   # re-render from kept outcomes
    python3 scripts/gen_compat_matrix.py --doc /tmp/page.md ...        # splice into another copy of the page

Each broker is one `pytest compat-tests --outcomes=<broker>.json` run (the brokers one after another;
further arguments, test paths included, go to every run). The runs are then laid side by side in one
table by compat-tests/matrix.py, with a "Differences from Kafka" list. Only the part between the
matrix markers is replaced; the hand-written text around it stays. Failing tests still update the page
(their cells show ❌) and make the script exit non-zero.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "compatibility.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
BROKERS = {  # --brokers name -> the pytest options that select that broker
    "kbroker": ("--target", "kbroker"),
    "kafka-4": ("--target", "kafka", "--kafka-version", "4"),
    "kafka-3.9": ("--target", "kafka", "--kafka-version", "3.9"),
    "kafka-zk": ("--target", "kafka-zk"),
}
DEFAULT_BROKERS = "kbroker,kafka-4,kafka-3.9"


def splice(document: str, matrix: str) -> str:
    """`document` with everything between BEGIN and END replaced by `matrix`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{BEGIN} ... {END} not found (in that order) in the document")
    return f"{document[:start + len(BEGIN)]}\n{matrix.strip()}\n{document[end:]}"


def pytest_command(broker: str, outcomes: Path, pytest_args: list[str]) -> list[str]:
    """The pytest run of one broker; the whole compat-tests directory unless the arguments name tests."""
    names_tests = any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in pytest_args)
    return [sys.executable, "-m", "pytest", *([] if names_tests else ["compat-tests"]), "-p", "no:cacheprovider",
            "-q", *BROKERS[broker], f"--outcomes={outcomes}", *pytest_args]


def run_brokers(brokers: list[str], reports: Path, pytest_args: list[str]) -> int:
    """Runs the suite once per broker; the worst pytest exit status (1 = some test failed)."""
    worst = 0
    for broker in brokers:
        outcomes = reports / f"{broker}.json"
        outcomes.unlink(missing_ok=True)
        status = subprocess.run(pytest_command(broker, outcomes, pytest_args), cwd=ROOT, check=False).returncode
        if status not in (0, 1) or not outcomes.is_file():  # interrupted, usage or internal error
            print(f"pytest against {broker} exited {status} without a complete run; the page is left as it was",
                  file=sys.stderr)
            return status or 2
        worst = max(worst, status)
    return worst


def render(brokers: list[str], reports: Path) -> str:
    sys.path.insert(0, str(ROOT / "compat-tests"))
    import matrix

    runs = [matrix.Run.load(reports / f"{broker}.json") for broker in brokers]
    return matrix.render_comparison(runs, matrix.client_versions(ROOT / "compat-tests"))


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--brokers", default=DEFAULT_BROKERS,
                        help=f"comma-separated, kbroker first, from {', '.join(BROKERS)} (default {DEFAULT_BROKERS})")
    parser.add_argument("--reports", type=Path, help="directory for each run's JSON outcomes (default: a temp dir)")
    parser.add_argument("--render-only", action="store_true", help="render from the outcomes in --reports, no runs")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page to splice into (default docs/compatibility.md)")
    options, pytest_args = parser.parse_known_args(argv)
    options.brokers = options.brokers.split(",")
    unknown = [broker for broker in options.brokers if broker not in BROKERS]
    if unknown or (options.render_only and options.reports is None):
        parser.error(f"unknown broker {unknown}" if unknown else "--render-only needs --reports")
    return options, pytest_args


def main(argv: list[str]) -> int:
    options, pytest_args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="compat-outcomes-") as scratch:
        reports = options.reports or Path(scratch)
        reports.mkdir(parents=True, exist_ok=True)
        status = 0 if options.render_only else run_brokers(options.brokers, reports.resolve(), pytest_args)
        if status not in (0, 1):
            return status
        page = options.doc
        page.write_text(splice(page.read_text(encoding="utf-8"), render(options.brokers, reports)), encoding="utf-8")
    print(f"matrix of {', '.join(options.brokers)} spliced into {options.doc}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
