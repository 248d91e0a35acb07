"""The side-by-side matrix: runs against several brokers saved as JSON and laid out in one table."""

from __future__ import annotations

import datetime
import importlib.util
import re
import sys
from pathlib import Path

import pytest

COMPAT_DIR = Path(__file__).resolve().parents[2] / "compat-tests"
_spec = importlib.util.spec_from_file_location("compat_matrix", COMPAT_DIR / "matrix.py")
matrix = importlib.util.module_from_spec(_spec)
sys.modules["compat_matrix"] = matrix  # dataclasses look their module up by name
_spec.loader.exec_module(matrix)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_compat_matrix.py"
_gen_spec = importlib.util.spec_from_file_location("gen_compat_matrix_for_comparison", SCRIPT)
gen = importlib.util.module_from_spec(_gen_spec)
_gen_spec.loader.exec_module(gen)

TODAY = datetime.date(2026, 1, 2)


def _outcome(scenario: str, status: str = matrix.PASS, detail: str = "", client: str = "alpha"):
    return matrix.Outcome(client, [scenario], status, detail)


KBROKER = matrix.Run("kbroker", "fresh kbroker", [
    _outcome("Headers"),
    _outcome("Explicit timestamps", matrix.KNOWN_FAIL, "expected failure: issue 19"),
    _outcome("Consume from latest"),
])
KAFKA = matrix.Run("Kafka 4.4.0", "Apache Kafka 4.4.0", [
    _outcome("Headers"),
    _outcome("Explicit timestamps"),
])


def _rows(markdown: str) -> dict[str, str]:
    """{scenario: the alpha cell} of the rendered table."""
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| Scenario"):
            scenario, cell = (part.strip() for part in line.strip("|").split("|"))
            rows[scenario] = cell
    return rows


def _differences(markdown: str) -> list[str]:
    return markdown.split("### Differences from Kafka", 1)[1].strip().splitlines()


def test_a_run_saved_as_json_loads_back_the_same(tmp_path: Path) -> None:
    KBROKER.save(tmp_path / "kbroker.json")
    assert matrix.Run.load(tmp_path / "kbroker.json") == KBROKER


def test_a_cell_where_every_broker_agrees_shows_one_symbol() -> None:
    assert _rows(matrix.render_comparison([KBROKER, KAFKA], {}, TODAY))["Headers"] == "✅"


def test_a_cell_where_brokers_differ_shows_each_brokers_symbol_in_run_order() -> None:
    assert _rows(matrix.render_comparison([KBROKER, KAFKA], {}, TODAY))["Explicit timestamps"] == "❌ known[^1] · ✅"


def test_a_run_without_a_test_for_the_cell_shows_a_dash() -> None:
    assert _rows(matrix.render_comparison([KBROKER, KAFKA], {}, TODAY))["Consume from latest"] == "✅ · -"


def test_every_differing_cell_is_listed_with_each_outcome_and_its_reason() -> None:
    assert _differences(matrix.render_comparison([KBROKER, KAFKA], {}, TODAY)) == [
        "- **Explicit timestamps** (alpha): kbroker ❌ known, Kafka 4.4.0 ✅. kbroker: expected failure: issue 19",
        "- **Consume from latest** (alpha): kbroker ✅, Kafka 4.4.0 no test",
    ]


OWN_SKIP = "uses a kbroker of its own, not the broker that --target kafka names"
KBROKER_ONLY = matrix.Run("kbroker", "fresh kbroker", [
    _outcome("Fetch", client="wire"), _outcome("Produce", matrix.KNOWN_FAIL, "expected failure: issue 19", "wire")])
KAFKA_SKIPPING_THEM = matrix.Run("Kafka 4.4.0", "Apache Kafka 4.4.0", [
    _outcome("Fetch", matrix.SKIP, OWN_SKIP, "wire"), _outcome("Produce", matrix.SKIP, OWN_SKIP, "wire")])


def test_a_test_that_brings_its_own_kbroker_shows_kbrokers_cell_alone_with_a_note() -> None:
    page = matrix.render_comparison([KBROKER_ONLY, KAFKA_SKIPPING_THEM], {}, TODAY)
    assert re.search(r"^\| Fetch \| ✅\[\^(\d+)\] \|$", page, re.MULTILINE)
    assert f"]: {matrix.OWN_KBROKER_NOTE}" in page


def test_a_test_that_brings_its_own_kbroker_is_a_difference_only_when_it_fails_or_is_known_to() -> None:
    assert _differences(matrix.render_comparison([KBROKER_ONLY, KAFKA_SKIPPING_THEM], {}, TODAY)) == [
        "- **Produce** (wire): kbroker ❌ known (the test compares kbroker with Kafka itself). "
        "kbroker: expected failure: issue 19"]


def test_runs_that_agree_everywhere_say_there_is_no_difference() -> None:
    assert _differences(matrix.render_comparison([KAFKA, KAFKA], {}, TODAY)) == [
        "None: every scenario has the same outcome on every broker."]


def test_the_header_names_every_broker_with_its_counts() -> None:
    page = matrix.render_comparison([KBROKER, KAFKA], {}, TODAY)
    assert "  - **kbroker**: fresh kbroker; tests 3: 2 passed, 0 failed, 1 known failures (xfail), 0 skipped" in page
    assert "  - **Kafka 4.4.0**: Apache Kafka 4.4.0; tests 2: 2 passed, 0 failed, 0 known failures (xfail), 0 skipped" \
        in page


def test_each_broker_is_one_pytest_run_writing_its_own_outcomes(tmp_path: Path) -> None:
    command = gen.pytest_command("kafka-3.9", tmp_path / "kafka-3.9.json", ["-n", "2"])
    assert command[3:] == ["compat-tests", "-p", "no:cacheprovider", "-q", "--target", "kafka", "--kafka-version",
                           "3.9", f"--outcomes={tmp_path / 'kafka-3.9.json'}", "-n", "2"]


def test_test_paths_given_replace_the_whole_suite(tmp_path: Path) -> None:
    command = gen.pytest_command("kbroker", tmp_path / "kbroker.json", ["compat-tests/test_kcat.py"])
    assert "compat-tests" not in command and command[-1] == "compat-tests/test_kcat.py"


def test_an_unknown_broker_name_is_refused() -> None:
    with pytest.raises(SystemExit):
        gen.parse(["--brokers", "kbroker,redpanda"])


def test_rendering_from_kept_outcomes_splices_the_side_by_side_table(tmp_path: Path) -> None:
    KBROKER.save(tmp_path / "kbroker.json")
    KAFKA.save(tmp_path / "kafka-4.json")
    rendered = gen.render(["kbroker", "kafka-4"], tmp_path)
    assert _rows(rendered)["Explicit timestamps"].startswith("❌ known")
    assert "### Differences from Kafka" in rendered
