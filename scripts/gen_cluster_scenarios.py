"""Regenerate the cluster scenarios table in docs/compatibility.md from a real run of
tests/cluster/test_failover_history.py, test_log_dir_moves_under_load.py, test_reassignment_throttle.py and
test_network_partitions.py, where every scenario runs on three kbroker brokers and on three Apache Kafka 3.9 brokers
in ZooKeeper mode.

    python3 scripts/gen_cluster_scenarios.py            # runs the tests (~7 min), then rewrites the table
    python3 scripts/gen_cluster_scenarios.py --junit F  # renders a run kept with pytest's --junitxml=F

Only the text between the cluster markers is replaced. A failing test still updates the page (its cell shows
❌) and makes the script exit non-zero.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "compatibility.md"
TESTS = ("tests/cluster/test_failover_history.py",  # kbroker and Kafka 3.9 side by side
         "tests/cluster/test_log_dir_moves_under_load.py",  # likewise
         "tests/cluster/test_reassignment_throttle.py",  # likewise
         "tests/cluster/test_network_partitions.py")  # likewise, each broker in a network namespace (needs root)
BEGIN, END = "<!-- cluster:begin -->", "<!-- cluster:end -->"
COLUMNS = {"kbroker": "kbroker", "kafka-3.9": "Apache Kafka 3.9 (ZooKeeper)"}


def outcomes(junit: Path) -> dict[str, dict[str, str]]:
    """test name -> broker kind -> cell text ("✅ figure", "❌ message", "⏭ reason")."""
    table: dict[str, dict[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name, _, params = case.get("name", "").partition("[")
        kind, extra = _kind_and_rest(params.rstrip("]"))
        if extra:  # the scenario's own parameter: a row of its own
            name = f"{name} ({extra})"
        figures = [p.get("value", "") for p in case.iter("property") if p.get("name") == "figure"]
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if failed is not None:
            cell = "❌ " + (failed.get("message") or "failed").splitlines()[0][:80]
        elif skipped is not None:
            cell = "⏭ " + (skipped.get("message") or "skipped")[:80]
        else:
            cell = " ".join(["✅", *figures])
        table.setdefault(name, {})[kind] = cell
    return table


def _kind_and_rest(params: str) -> tuple[str, str]:
    """A test id's broker kind (the cluster fixture's parameter, first) and whatever other parameters follow it."""
    for kind in COLUMNS:
        if params == kind or params.startswith(f"{kind}-"):
            return kind, params[len(kind) + 1:]
    return "kbroker", params


PROPER = {"kill 9": "kill -9", "java": "Java", "spark": "Spark", "zookeeper": "ZooKeeper", "acks all": "acks=all",
          "dead brokers partitions": "dead broker's partitions",
          "kafka reassign partitions": "kafka-reassign-partitions"}


def scenario(test_name: str) -> str:
    """The test's name as a sentence: test_a_java_group_... -> "A Java group ..."."""
    words = f" {test_name.removeprefix('test_').replace('_', ' ')} "
    for plain, proper in PROPER.items():
        words = words.replace(f" {plain} ", f" {proper} ")
    words = words.strip()
    return words[0].upper() + words[1:]


def render(table: dict[str, dict[str, str]]) -> str:
    lines = [f"- **Date:** {datetime.date.today().isoformat()}; `python3 scripts/gen_cluster_scenarios.py`",
             "", "| Scenario (three brokers, real ZooKeeper, stock clients) | " + " | ".join(COLUMNS.values()) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for name, cells in table.items():
        lines.append(f"| {scenario(name)} | " + " | ".join(cells.get(kind, "—") for kind in COLUMNS) + " |")
    return "\n".join(lines)


def splice(document: str, table: str) -> str:
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{BEGIN} ... {END} not found (in that order) in the document")
    return f"{document[:start + len(BEGIN)]}\n{table}\n{document[end:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--junit", type=Path, help="render this junit XML instead of running the tests")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory() as scratch:
        junit = args.junit or Path(scratch) / "cluster.xml"
        if args.junit is None:
            command = [sys.executable, "-m", "pytest", *TESTS, "-m", "slow", "-p", "no:cacheprovider", "-q",
                       "-o", "junit_family=legacy", f"--junitxml={junit}"]  # legacy: keeps record_property's figures
            status = subprocess.run(command, cwd=ROOT, check=False).returncode
            if status not in (0, 1) or not junit.is_file():
                print(f"pytest exited {status} without a complete run; the page is left as it was", file=sys.stderr)
                return status or 1
        table = outcomes(junit)
    args.doc.write_text(splice(args.doc.read_text(), render(table)))
    return 1 if status or any(cell.startswith("❌") for cells in table.values() for cell in cells.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
