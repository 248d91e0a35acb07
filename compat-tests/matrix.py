"""The compatibility matrix: every compat test's outcome by (scenario, client), written as Markdown.

Each compat test names its column with `@pytest.mark.client("<client>")` and its row (or rows,
when its assertions cover several behaviours) with `@pytest.mark.scenario("<Scenario name>")`.
compat-tests/conftest.py registers `MatrixReport` and the `--matrix [PATH]` option.

Under pytest-xdist the workers collect and run the tests while the controller receives every
report through `pytest_runtest_logreport`; the markers travel with the report as a user property,
so the controller, which collects nothing, still knows each test's cell.

`--outcomes PATH` writes one run's outcomes as JSON (the broker it ran against and every test's cell
and status); `render_comparison` lays several such runs (kbroker, Kafka 4.x, Kafka 3.9) side by side in
one table and lists every cell where they differ, which is what scripts/gen_compat_matrix.py puts in
docs/compatibility.md.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEFAULT_REPORT = "compat-report.md"
PROPERTY = "compat_matrix"  # user property carrying (client, scenarios) from a worker to the controller
UNCLASSIFIED = "(unclassified)"

CLIENT_ORDER = ("confluent-kafka", "kafka-python", "aiokafka", "java", "kcat", "kafkajs", "pyspark", "kafka-tools",
                "kafka-streams", "kbroker-cli", "kbroker-console")
SCENARIO_ORDER = (
    "Metadata and broker discovery",
    "Produce and consume: keys, null keys, null values",
    "Headers",
    "Explicit timestamps",
    "Producer acks=1",
    "Compression: gzip",
    "Compression: snappy",
    "Compression: lz4",
    "Compression: zstd",
    "Message sizes: 1 byte to near max.message.bytes",
    "Consume from earliest",
    "Consume from latest",
    "Consume by timestamp",
    "Consume from explicit offset",
    "Offset out of range: auto.offset.reset",
    "Watermarks: earliest and latest offsets",
    "List offsets: max timestamp",
    "Idempotent producer",
    "Idempotent producer: retries across a broker restart",
    "Create/describe/delete topics",
    "Describe/alter configs",
    "Topic configs Kafka 3.9 deprecates",
    "Create partitions",
    "Delete records",
    "Describe log dirs",
    "Replica moved between log dirs",
    "Consumer group: subscribe and commit",
    "Consumer group: resume from committed offsets",
    "Consumer group: rebalance",
    "Consumer group: static membership",
    "Assignment strategy: range",
    "Assignment strategy: roundrobin",
    "Assignment strategy: cooperative-sticky",
    "Consumer group protocol: consumer (KIP-848)",
    "Consumer group protocol: regex subscriptions (KIP-848)",
    "Consumer group admin: list/describe/delete",
    "Consumer group admin: offsets and lag",
    "Cross-client: produced by another client",
    "Cross-client: committed offsets",
    "Spark batch read: subscribe, subscribePattern, assign",
    "Spark batch read: starting and ending offsets",
    "Spark batch read: minPartitions",
    "Spark failOnDataLoss after DeleteRecords",
    "Spark failOnDataLoss after retention",
    "Spark streaming: availableNow and maxOffsetsPerTrigger",
    "Spark streaming: micro-batches while producing",
    "Spark streaming: checkpoint, stop and restart",
    "Spark streaming: broker restart during a query",
    'Spark write: df.write.format("kafka")',
    "Spark write: streaming kafka sink",
    "Spark pipeline: event-time windows with a watermark, kafka to kafka",
    "Spark offset lookups via Java AdminClient",
    "Spark topic discovery via Java AdminClient",
    "Spark executor reads via Java consumer",
    "Error: unknown topic with auto-create off",
    "Error: message too large",
    "Produce: per-record errors (KIP-467)",
    "Error: invalid topic name",
    "Error: topic already exists",
    "Error: invalid replication factor",
    "CLI: topics",
    "CLI: produce and consume",
    "CLI: consumer groups",
    "CLI: configs",
    "Console: brokers and topics",
    "Console: message browser and produce",
    "Console: consumer groups and lag",
)

# A test's phases (setup, call, teardown) rank by severity: the worst one is the test's outcome.
PASS, SKIP, KNOWN_FAIL, FAIL = "pass", "skip", "known-fail", "fail"
RANK = {PASS: 0, SKIP: 1, KNOWN_FAIL: 2, FAIL: 3}
SYMBOL = {PASS: "✅", SKIP: "⏭", KNOWN_FAIL: "❌ known", FAIL: "❌"}


class UnclassifiedCompatTest(pytest.PytestWarning):
    """A compat test without both a client and a scenario marker: it lands in the (unclassified) cells."""


def add_options(parser: pytest.Parser) -> None:
    parser.getgroup("compatibility matrix").addoption(
        "--matrix", nargs="?", const=DEFAULT_REPORT, default=None, metavar="PATH",
        help=f"write the compatibility matrix as Markdown to PATH (default {DEFAULT_REPORT}); "
             "give it as --matrix=PATH or after the test paths")
    parser.getgroup("compatibility matrix").addoption(
        "--outcomes", default=None, metavar="PATH",
        help="write every compat test's cell and outcome as JSON to PATH, for a side-by-side matrix of several "
             "brokers (scripts/gen_compat_matrix.py)")


def report_path(config: pytest.Config) -> Path | None:
    """Where to write the matrix, or None when --matrix was not given."""
    value = config.getoption("--matrix")
    if value is None:
        return None
    path = Path(value)
    if path.is_dir() or path.suffix == ".py":
        raise pytest.UsageError(f"--matrix takes a Markdown file, got {value!r}: write --matrix=PATH "
                                "or put --matrix after the test paths")
    return path


# ---- classification -------------------------------------------------------------------------

def classify(item: pytest.Item) -> tuple[str | None, list[str]]:
    """(client, scenarios) named by the item's markers; the nearest client marker wins."""
    client_marker = item.get_closest_marker("client")
    client = _single_name(client_marker.args) if client_marker else None
    scenarios: list[str] = []
    for marker in item.iter_markers("scenario"):
        name = _single_name(marker.args)
        if name and name not in scenarios:
            scenarios.append(name)
    return client, scenarios


def codec_params(codecs: Iterable[str | None], *uncompressed: str) -> list:
    """One pytest.param per codec, in the row "Compression: <codec>"; the uncompressed run (None or
    "none") goes in the rows `uncompressed`, the behaviours its assertions check besides compression."""
    params = []
    for codec in codecs:
        name = codec or "none"
        scenarios = uncompressed if name == "none" else (f"Compression: {name}",)
        params.append(pytest.param(codec, id=name, marks=[pytest.mark.scenario(s) for s in scenarios]))
    return params


def _single_name(args: tuple) -> str | None:
    return args[0] if len(args) == 1 and isinstance(args[0], str) and args[0].strip() else None


# ---- outcomes -------------------------------------------------------------------------------

@dataclass
class Outcome:
    client: str
    scenarios: list[str]
    status: str = PASS
    detail: str = ""

    def update(self, status: str, detail: str) -> None:
        if RANK[status] > RANK[self.status]:
            self.status, self.detail = status, detail


def outcome_of(report: pytest.TestReport) -> tuple[str, str] | None:
    """(status, detail) that one phase report contributes, or None for a phase that says nothing."""
    if hasattr(report, "wasxfail"):
        if report.skipped:
            return KNOWN_FAIL, f"expected failure: {report.wasxfail}" if report.wasxfail else "expected failure"
        if report.failed:  # strict xfail that passed
            return FAIL, f"{_short_name(report.nodeid)}: passed although marked xfail (strict)"
    if report.failed:
        phase = "" if report.when == "call" else f" (error in {report.when})"
        return FAIL, f"{_short_name(report.nodeid)} failed{phase}"
    if report.skipped:
        return SKIP, _skip_reason(report)
    if report.passed and report.when == "call":
        return PASS, ""
    return None


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return re.sub(r"^Skipped: ", "", " ".join(str(reason).split()))


def _short_name(nodeid: str) -> str:
    return nodeid.rsplit("/", 1)[-1]


@dataclass
class Cell:
    status: str
    notes: list[str] = field(default_factory=list)


def merge(outcomes: Iterable[Outcome]) -> Cell:
    """One cell from its tests: failed if any failed, skipped only if all skipped, passed otherwise."""
    outcomes = list(outcomes)
    statuses = {o.status for o in outcomes}
    status = next((s for s in (FAIL, KNOWN_FAIL) if s in statuses), SKIP if statuses == {SKIP} else PASS)
    notes = [] if status == PASS else sorted({o.detail for o in outcomes if o.status == status and o.detail})
    return Cell(status, notes)


# ---- the pytest plugin ----------------------------------------------------------------------

class MatrixReport:
    """Tags compat tests with their cell at collection and gathers their outcomes on the controller."""

    def __init__(self, config: pytest.Config, compat_dir: Path, broker: str, path: Path | None,
                 label: str = "broker") -> None:
        self.config = config
        self.compat_dir = compat_dir.resolve()
        self.broker = broker
        self.label = label
        self.path = path
        self.outcomes: dict[str, Outcome] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if not item.path.resolve().is_relative_to(self.compat_dir):
                continue
            client, scenarios = classify(item)
            if client is None or not scenarios:
                missing = " and ".join(name for name, value in (("client", client), ("scenario", scenarios))
                                       if not value)
                item.warn(UnclassifiedCompatTest(
                    f"no {missing} marker: the compatibility matrix reports this test under {UNCLASSIFIED}"))
            item.user_properties.append((PROPERTY, [client or UNCLASSIFIED, scenarios or [UNCLASSIFIED]]))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: the controller sees the same report
        cell = next((value for name, value in report.user_properties if name == PROPERTY), None)
        contribution = outcome_of(report)
        if cell is None or contribution is None:
            return
        client, scenarios = cell
        outcome = self.outcomes.setdefault(report.nodeid, Outcome(client, list(scenarios)))
        outcome.update(*contribution)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return
        outcomes_path = self.config.getoption("--outcomes")
        if outcomes_path:
            Run(self.label, self.broker, list(self.outcomes.values())).save(Path(outcomes_path))
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(render(self.outcomes.values(), self.broker, client_versions(self.compat_dir)),
                             encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.path is not None and not hasattr(self.config, "workerinput"):
            terminalreporter.write_line(f"compatibility matrix written to {self.path}")


# ---- one run as JSON ------------------------------------------------------------------------

@dataclass
class Run:
    """One pytest run of the suite against one broker: `label` heads its column ("kbroker", "Kafka 4.4.0")."""
    label: str
    broker: str
    outcomes: list[Outcome]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        outcomes = [vars(outcome) for outcome in self.outcomes]
        path.write_text(json.dumps({"label": self.label, "broker": self.broker, "outcomes": outcomes}, indent=1),
                        encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Run:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(data["label"], data["broker"], [Outcome(**outcome) for outcome in data["outcomes"]])

    def cells(self) -> dict[tuple[str, str], Cell]:
        """{(scenario, client): merged cell} of every cell this run has a test for."""
        by_cell: dict[tuple[str, str], list[Outcome]] = {}
        for outcome in self.outcomes:
            for scenario in outcome.scenarios:
                by_cell.setdefault((scenario, outcome.client), []).append(outcome)
        return {key: merge(tests) for key, tests in by_cell.items()}

    def counts(self) -> str:
        counts = {status: sum(o.status == status for o in self.outcomes) for status in RANK}
        return (f"{len(self.outcomes)}: {counts[PASS]} passed, {counts[FAIL]} failed, "
                f"{counts[KNOWN_FAIL]} known failures (xfail), {counts[SKIP]} skipped")


# ---- Markdown -------------------------------------------------------------------------------

def _ordered(names: Iterable[str], order: tuple[str, ...]) -> list[str]:
    known = [name for name in order if name in names]
    others = sorted(name for name in names if name not in order and name != UNCLASSIFIED)
    return known + others + ([UNCLASSIFIED] if UNCLASSIFIED in names else [])


def render(outcomes: Iterable[Outcome], broker: str, versions: dict[str, str],
           today: datetime.date | None = None) -> str:
    run = Run("", broker, list(outcomes))
    by_cell = run.cells()
    clients = _ordered({client for _, client in by_cell}, CLIENT_ORDER)
    scenarios = _ordered({scenario for scenario, _ in by_cell}, SCENARIO_ORDER)
    footnotes: dict[str, int] = {}

    def cell_text(scenario: str, client: str) -> str:
        cell = by_cell.get((scenario, client))
        if cell is None:
            return ""
        marks = "".join(f"[^{footnotes.setdefault(note, len(footnotes) + 1)}]" for note in cell.notes)
        return SYMBOL[cell.status] + marks

    rows = [f"| {_escape(scenario)} | " + " | ".join(cell_text(scenario, client) for client in clients) + " |"
            for scenario in scenarios]
    lines = [
        f"- **Broker:** {broker}",
        f"- **Date:** {(today or datetime.datetime.now(datetime.UTC).date()).isoformat()}",
        f"- **Tests:** {run.counts()}",
        "- **Clients:**",
        *(f"  - {name} {version}" for name, version in versions.items()),
        "",
        "✅ passes · ❌ fails · ❌ known: an expected failure (xfail) · ⏭ skipped · empty: no test yet",
        "",
        "| Scenario | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
        *rows,
    ]
    if footnotes:
        lines += ["", *(f"[^{number}]: {_escape(note)}" for note, number in footnotes.items())]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


OWN_KBROKER = "uses a kbroker of its own"  # the start of the skip reason conftest gives such tests off kbroker
OWN_KBROKER_NOTE = ("starts kbroker (and Apache Kafka where it compares them) itself, so it runs in the kbroker "
                    "run only")


def _ran_on_its_target(cell: Cell | None) -> bool:
    """False for a skip that only says the test brings its own kbroker (wire differential, DumpLogSegments,
    data-dir swaps): such a test compares kbroker with Kafka inside one run, and its skip elsewhere is no
    difference from Kafka."""
    return cell is not None and not (cell.status == SKIP and cell.notes
                                     and all(note.startswith(OWN_KBROKER) for note in cell.notes))


def render_comparison(runs: list[Run], versions: dict[str, str], today: datetime.date | None = None) -> str:
    """One table for several runs: a cell per (scenario, client) holds one symbol when every broker agrees,
    else each broker's symbol in the order of `runs` (kbroker first); then every cell where they differ."""
    cells = [run.cells() for run in runs]
    own = {key for key in {key for run_cells in cells for key in run_cells}
           if any(key in run_cells and not _ran_on_its_target(run_cells[key]) for run_cells in cells)}
    cells = [{key: cell for key, cell in run_cells.items() if _ran_on_its_target(cell)} for run_cells in cells]
    keys = {key for run_cells in cells for key in run_cells}
    clients = _ordered({client for _, client in keys}, CLIENT_ORDER)
    scenarios = _ordered({scenario for scenario, _ in keys}, SCENARIO_ORDER)
    footnotes: dict[str, int] = {}

    def marks(cell: Cell) -> str:
        return "".join(f"[^{footnotes.setdefault(note, len(footnotes) + 1)}]" for note in cell.notes)

    def cell_text(key: tuple[str, str]) -> str:
        found = [run_cells.get(key) for run_cells in cells]
        if not any(found):
            return ""
        if key in own:
            ran = [cell for cell in found if cell]
            if _agree(ran):
                return SYMBOL[ran[0].status] + marks(ran[0]) + marks(Cell(SKIP, [OWN_KBROKER_NOTE]))
        if _agree(found):
            return SYMBOL[found[0].status] + marks(found[0])
        return " · ".join(SYMBOL[cell.status] + marks(cell) if cell else "-" for cell in found)

    order = " · ".join(run.label for run in runs)
    lines = [
        f"- **Date:** {(today or datetime.datetime.now(datetime.UTC).date()).isoformat()}",
        "- **Brokers** (one pytest run each, in this order in a cell where they differ):",
        *(f"  - **{run.label}**: {run.broker}; tests {run.counts()}" for run in runs),
        "- **Clients:**",
        *(f"  - {name} {version}" for name, version in versions.items()),
        "",
        "✅ passes · ❌ fails · ❌ known: an expected failure (xfail) · ⏭ skipped · empty: no test yet. "
        f"One symbol: every broker agrees; otherwise {order}, with - where a run has no test.",
        "",
        "| Scenario | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
        *(f"| {_escape(scenario)} | " + " | ".join(cell_text((scenario, client)) for client in clients) + " |"
          for scenario in scenarios),
    ]
    if footnotes:
        lines += ["", *(f"[^{number}]: {_escape(note)}" for note, number in footnotes.items())]
    lines += ["", "### Differences from Kafka", "", *differences(runs, cells, scenarios, clients, own)]
    return "\n".join(lines) + "\n"


def _agree(found: list[Cell | None]) -> bool:
    return all(cell is not None and cell.status == found[0].status for cell in found)


def differences(runs: list[Run], cells: list[dict[tuple[str, str], Cell]], scenarios: list[str],
                clients: list[str], own: set[tuple[str, str]] = frozenset()) -> list[str]:
    """A bullet per (scenario, client) whose outcome is not the same on every broker, with each broker's
    outcome and the reasons (xfail reason, skip reason, failing test)."""
    bullets = []
    for scenario in scenarios:
        for client in clients:
            found = [run_cells.get((scenario, client)) for run_cells in cells]
            compared_inside = (scenario, client) in own
            if not _is_difference(found, compared_inside):
                continue
            outcomes = ", ".join(f"{run.label} {SYMBOL[cell.status] if cell else 'no test'}"
                                 for run, cell in zip(runs, found, strict=True) if cell or not compared_inside)
            if compared_inside:
                outcomes += " (the test compares kbroker with Kafka itself)"
            reasons = "; ".join(f"{run.label}: {note}" for run, cell in zip(runs, found, strict=True) if cell
                                for note in cell.notes)
            bullets.append(f"- **{_escape(scenario)}** ({client}): {outcomes}" + (f". {_escape(reasons)}"
                                                                                 if reasons else ""))
    return bullets or ["None: every scenario has the same outcome on every broker."]


def _is_difference(found: list[Cell | None], compared_inside: bool) -> bool:
    """Brokers disagree; or, for a test that compares kbroker with Kafka itself, it fails or is an expected
    failure (its Kafka runs hold no cell to disagree with)."""
    ran = [cell for cell in found if cell]
    if not ran:
        return False
    if compared_inside:
        return not _agree(ran) or ran[0].status in (FAIL, KNOWN_FAIL)
    return not _agree(found)


# ---- client versions ------------------------------------------------------------------------

def client_versions(compat_dir: Path) -> dict[str, str]:
    """Versions of every client the suite can drive, "not installed" for those missing."""
    return {
        "confluent-kafka": _confluent_kafka(),
        "kafka-python": _distribution("kafka-python"),
        "aiokafka": _distribution("aiokafka"),
        "kcat": _kcat(),
        "Java kafka-clients": _java_kafka_clients(compat_dir / "java" / "pom.xml"),
        "kafkajs": _kafkajs(compat_dir / "node"),
        "pyspark": _distribution("pyspark"),
        "Kafka's tools": _kafka_tools(compat_dir / "java" / "pom.xml"),
    }


def _distribution(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _confluent_kafka() -> str:
    try:
        import confluent_kafka
    except ImportError:
        return "not installed"
    return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


def _kcat() -> str:
    if shutil.which("kcat") is None:
        return "not installed"
    try:
        done = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    found = re.search(r"Version (\S+).*?librdkafka (\S+)", done.stdout + done.stderr, re.DOTALL)
    return f"{found[1]} (librdkafka {found[2]})" if found else "unknown"


def _pom_versions(pom: Path, names: tuple[str, ...]) -> str:
    """Versions pinned as properties of compat-tests/java/pom.xml: read from the pom, so writing the matrix
    never waits for Maven."""
    import xml.etree.ElementTree as ElementTree

    if not pom.is_file():
        return "unknown (no compat-tests/java/pom.xml)"
    properties = ElementTree.parse(pom).getroot().find("{http://maven.apache.org/POM/4.0.0}properties")
    found = [properties.findtext(f"{{http://maven.apache.org/POM/4.0.0}}{name}") for name in names]
    return ", ".join(version for version in found if version) or "unknown"


def _java_kafka_clients(pom: Path) -> str:
    """The kafka-clients versions test_java_client.py runs: 3.9.x and 4.x."""
    return _pom_versions(pom, ("kafka39.version", "kafka4.version"))


def _kafka_tools(pom: Path) -> str:
    """Kafka's command-line tools (test_kafka_tools.py, test_dump_log_segments.py) come from the 4.x jars."""
    return _pom_versions(pom, ("kafka4.version",))


def _kafkajs(node_dir: Path) -> str:
    installed = node_dir / "node_modules" / "kafkajs" / "package.json"
    if installed.is_file():
        return json.loads(installed.read_text())["version"]
    declared = node_dir / "package.json"
    if declared.is_file():
        wanted = json.loads(declared.read_text()).get("dependencies", {}).get("kafkajs")
        if wanted:
            return f"{wanted} (declared in compat-tests/node/package.json, not installed)"
    return "not installed"
