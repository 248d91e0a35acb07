"""The compatibility-matrix plugin of compat-tests/, run by pytester on a tiny fake compat suite.

The fake suite sits next to verbatim copies of compat-tests/conftest.py and compat-tests/matrix.py,
so what runs is the real plugin and the real target selection.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

COMPAT_DIR = Path(__file__).resolve().parents[2] / "compat-tests"
# Plugins the inner runs do not need: hypothesis alone re-imports itself on every in-process run.
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")
INI = """
[pytest]
markers =
    client(name): client column
    scenario(name): scenario row
"""
FAKE_SUITE = """
import pytest

pytestmark = pytest.mark.client("alpha")


@pytest.mark.scenario("Headers")
def test_alpha_headers_pass():
    pass


@pytest.mark.scenario("Headers")
def test_alpha_headers_skip():
    pytest.skip("no header support here")


@pytest.mark.client("beta")
@pytest.mark.scenario("Headers")
def test_beta_headers_pass():
    pass


@pytest.mark.client("beta")
@pytest.mark.scenario("Headers")
def test_beta_headers_fail():
    assert 1 == 2


@pytest.mark.scenario("Explicit timestamps")
def test_alpha_timestamps_skip_one():
    pytest.skip("no clock")


@pytest.mark.scenario("Explicit timestamps")
def test_alpha_timestamps_skip_two():
    pytest.skip("no calendar")


@pytest.mark.scenario("Compression: gzip")
@pytest.mark.xfail(reason="gzip lands later")
def test_alpha_gzip_known_failure():
    assert 1 == 2


@pytest.mark.scenario("Compression: zstd")
@pytest.mark.scenario("Compression: lz4")
def test_alpha_two_rows_at_once():
    pass


@pytest.fixture
def broken():
    raise RuntimeError("setup broke")


@pytest.mark.client("beta")
@pytest.mark.scenario("Compression: zstd")
def test_beta_zstd_setup_error(broken):
    pass


def test_alpha_without_scenario():
    pass
"""
UNMARKED = """
def test_without_any_marker():
    pass
"""


@pytest.fixture
def fake_compat(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makeconftest((COMPAT_DIR / "conftest.py").read_text())
    pytester.makepyfile(**{name: (COMPAT_DIR / f"{name}.py").read_text()  # what conftest.py imports
                           for name in ("matrix", "kafka_process", "maven_jars", "java_harness")})
    pytester.mkdir("java").joinpath("pom.xml").write_text((COMPAT_DIR / "java" / "pom.xml").read_text())
    pytester.makepyfile(test_fake_compat=FAKE_SUITE, test_unmarked=UNMARKED)
    return pytester


def _run_matrix(pytester: pytest.Pytester, *args: str) -> str:
    result = pytester.runpytest(*QUIET, "--matrix=report.md", *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the fake suite has one failure and one error
    return (pytester.path / "report.md").read_text()


def _table(markdown: str) -> dict[tuple[str, str], str]:
    """{(scenario, client): cell text} for every non-empty cell, footnote references resolved to their text."""
    notes = dict(re.findall(r"^\[\^(\d+)\]: (.*)$", markdown, re.MULTILINE))
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Scenario |"))
    clients = [cell.strip() for cell in lines[start].strip("|").split("|")][1:]
    cells = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        scenario, *values = (cell.strip() for cell in line.strip("|").split("|"))
        for client, value in zip(clients, values, strict=True):
            if value:
                cells[scenario, client] = re.sub(r"\[\^(\d+)\]", lambda ref: f" <{notes[ref[1]]}>", value)
    return cells


def _skip_reasons(result: pytest.RunResult) -> dict[str, str]:
    """{test name: skip reason} of an in-process run; every test must have skipped."""
    reports = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "setup"]
    assert all(r.skipped for r in reports)
    return {r.nodeid.rsplit("::", 1)[-1]: r.longrepr[2] for r in reports}


EXPECTED = {
    ("Headers", "alpha"): "✅",
    ("Headers", "beta"): "❌ <test_fake_compat.py::test_beta_headers_fail failed>",
    ("Explicit timestamps", "alpha"): "⏭ <no calendar> <no clock>",
    ("Compression: gzip", "alpha"): "❌ known <expected failure: gzip lands later>",
    ("Compression: lz4", "alpha"): "✅",
    ("Compression: zstd", "alpha"): "✅",
    ("Compression: zstd", "beta"): "❌ <test_fake_compat.py::test_beta_zstd_setup_error failed (error in setup)>",
    ("(unclassified)", "alpha"): "✅",
    ("(unclassified)", "(unclassified)"): "✅",
}


def test_a_cell_with_a_passing_and_a_skipped_test_passes(fake_compat):
    assert _table(_run_matrix(fake_compat))["Headers", "alpha"] == "✅"


def test_a_cell_with_any_failed_test_fails_and_names_it(fake_compat):
    assert _table(_run_matrix(fake_compat))["Headers", "beta"] == EXPECTED["Headers", "beta"]


def test_a_cell_whose_tests_all_skipped_is_skipped_with_each_reason_as_a_footnote(fake_compat):
    assert _table(_run_matrix(fake_compat))["Explicit timestamps", "alpha"] == "⏭ <no calendar> <no clock>"


def test_an_xfail_is_a_known_failure_with_its_reason(fake_compat):
    assert _table(_run_matrix(fake_compat))["Compression: gzip", "alpha"] == EXPECTED["Compression: gzip", "alpha"]


def test_a_setup_error_fails_its_cell(fake_compat):
    assert _table(_run_matrix(fake_compat))["Compression: zstd", "beta"] == EXPECTED["Compression: zstd", "beta"]


def test_a_test_with_two_scenario_markers_fills_both_rows(fake_compat):
    table = _table(_run_matrix(fake_compat))
    assert (table["Compression: lz4", "alpha"], table["Compression: zstd", "alpha"]) == ("✅", "✅")


def test_rows_follow_the_shared_scenario_order_and_unclassified_comes_last(fake_compat):
    rows = list(dict.fromkeys(scenario for scenario, _ in _table(_run_matrix(fake_compat))))
    assert rows == ["Headers", "Explicit timestamps", "Compression: gzip", "Compression: lz4", "Compression: zstd",
                    "(unclassified)"]


def test_tests_without_both_markers_are_reported_unclassified_and_warned_about(fake_compat):
    result = fake_compat.runpytest(*QUIET, "--matrix=report.md")
    table = _table((fake_compat.path / "report.md").read_text())
    assert (table["(unclassified)", "alpha"], table["(unclassified)", "(unclassified)"]) == ("✅", "✅")
    result.stdout.fnmatch_lines(["*test_fake_compat.py:*UnclassifiedCompatTest: no scenario marker*",
                                 "*test_unmarked.py:*UnclassifiedCompatTest: no client and scenario marker*"])


def test_xdist_workers_report_to_the_controller_the_same_matrix(fake_compat):
    assert _table(_run_matrix(fake_compat, "-n", "2")) == EXPECTED


def test_header_names_the_broker_the_counts_and_the_client_versions(fake_compat):
    import confluent_kafka

    import kbroker

    markdown = _run_matrix(fake_compat)
    assert f"- **Broker:** fresh kbroker subprocess (kbroker {kbroker.__version__})" in markdown
    assert "- **Tests:** 11: 5 passed, 2 failed, 1 known failures (xfail), 3 skipped" in markdown
    assert f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})" in markdown
    assert re.search(r"^- \*\*Date:\*\* \d{4}-\d\d-\d\d$", markdown, re.MULTILINE)


def test_header_names_the_bootstrap_address_when_one_is_given(fake_compat):
    fake_compat.runpytest(*QUIET, "--matrix=report.md", "--bootstrap", "127.0.0.1:1")
    markdown = (fake_compat.path / "report.md").read_text()
    assert "- **Broker:** `127.0.0.1:1` given with --bootstrap" in markdown


def test_nothing_is_written_without_the_matrix_option(fake_compat):
    fake_compat.runpytest(*QUIET)
    assert list(fake_compat.path.glob("*.md")) == []


def test_the_matrix_option_without_a_path_writes_compat_report_md(fake_compat):
    fake_compat.runpytest(*QUIET, "test_fake_compat.py", "--matrix")
    assert "| Scenario | alpha | beta |" in (fake_compat.path / "compat-report.md").read_text()


def test_a_directory_given_to_the_matrix_option_is_a_usage_error(fake_compat):
    result = fake_compat.runpytest(*QUIET, "--matrix", str(fake_compat.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_kafka_container_target_skips_when_docker_is_unreachable(fake_compat, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{fake_compat.path}/no-docker.sock")
    fake_compat.makepyfile(test_fake_compat="""
        import pytest

        pytestmark = [pytest.mark.client("alpha"), pytest.mark.scenario("Headers")]

        def test_using_the_broker(bootstrap):
            pass

        def test_not_asking_for_the_broker():
            pass
    """)
    result = fake_compat.runpytest(*QUIET, "--target", "kafka-container", "--matrix=r.md", "test_fake_compat.py")
    reasons = _skip_reasons(result)
    assert reasons["test_using_the_broker"].startswith("Skipped: Docker engine not reachable: ")
    assert reasons["test_not_asking_for_the_broker"] == (
        "Skipped: uses a kbroker of its own, not the broker that --target kafka-container names")
    assert "- **Broker:** kafka-container `confluentinc/cp-kafka:" in (fake_compat.path / "r.md").read_text()


def test_a_test_not_using_bootstrap_skips_against_a_given_broker(fake_compat):
    fake_compat.makepyfile(test_fake_compat="""
        import pytest

        pytestmark = [pytest.mark.client("alpha"), pytest.mark.scenario("Headers")]

        def test_starting_its_own_kbroker(tmp_path):
            pass
    """)
    result = fake_compat.runpytest(*QUIET, "--bootstrap", "127.0.0.1:1", "test_fake_compat.py")
    assert _skip_reasons(result) == {
        "test_starting_its_own_kbroker": "Skipped: uses a kbroker of its own, not the broker that --bootstrap names"}


def test_bootstrap_and_kafka_container_target_together_are_a_usage_error(fake_compat):
    result = fake_compat.runpytest(*QUIET, "--bootstrap", "127.0.0.1:1",
                                   "--target", "kafka-container")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
