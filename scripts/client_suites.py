"""The client projects' own integration suites as a second oracle, run against kbroker and Apache Kafka.

    python3 scripts/client_suites.py                            # kbroker, Kafka 4.x and Kafka 3.9, one after another
    python3 scripts/client_suites.py --targets kbroker          # kbroker alone (what CI runs)
    python3 scripts/client_suites.py --doc docs/compatibility.md    # also write the counts into the page

kafka-python's integration tests come from its PyPI sdist at the version pyproject.toml pins (the suite's own
kafka/ package beside them, so the tests exercise that release), cached under ~/.cache/kbroker/client-suites/.
Each target is a fresh broker started here (kbroker as `kbroker serve`, Kafka as a JVM from Maven's jars,
compat-tests/kafka_process.py) with the broker settings the suite's own launcher uses; the suite is pointed at
it by its external-broker variables (KAFKA_URI, KAFKA_VERSION) and scripts/client_suite_plugins/. Nothing of
theirs is edited. confluent-kafka's sdist is checked too: it ships no tests, so that suite is reported blocked.

Exit status: non-zero when on kbroker a test fails outside KNOWN_GAPS, a known gap passes (take it off the
list), a suite runs past its time limit or collects nothing, or a test fails on Kafka outside
KAFKA_SETUP_DIFFERENCES (a broken setup here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "scripts" / "client_suite_plugins"
sys.path.insert(0, str(ROOT / "compat-tests"))

from kbroker.testing import BrokerProcess, free_port  # noqa: E402

import kafka_process  # noqa: E402  (compat-tests/, put on the path just above)
import maven_jars  # noqa: E402

TARGETS = {"kbroker": None, "kafka-4": "4", "kafka-3.9": "3.9"}  # name -> compat-tests' --kafka-version
SUITE_TIMEOUT_S = 900   # the whole suite, per target (kbroker takes ~3.5 min)
TEST_TIMEOUT_S = 120    # one test (pytest-timeout); their own default of 300 s would let one hang eat the run
BEGIN, END = "<!-- client-suites:begin -->", "<!-- client-suites:end -->"

# The broker settings of kafka-python's own launcher (its server.properties template and KafkaFixture):
# given to every target alike. kbroker ignores, with a warning, the keys it does not know (the authorizer).
SUITE_BROKER_SETTINGS = {
    "num.partitions": "4",
    "default.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "offsets.commit.timeout.ms": "500",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}

# Tests of kafka-python's suite that pass on Kafka and fail on kbroker for a feature kbroker does not have yet (or a
# bug left to an item of its own): node id -> the issue that brings it. Any other kbroker failure is a bug
# (and fails this script).
ADMIN, CONSUMER, PRODUCER = (f"test/integration/test_{name}_integration.py::" for name in
                             ("admin", "consumer", "producer"))
KNOWN_GAPS = {
    ADMIN + "test_create_describe_delete_acls":
        "ACLs (DescribeAcls/CreateAcls/DeleteAcls): security, no issue filed yet",
    ADMIN + "test_describe_metadata_quorum":
        "DescribeQuorum (KRaft quorum): KRaft only; kbroker's cluster runs in ZooKeeper mode",
}

# Tests that fail on Kafka itself here, because this harness is not the suite's own launcher: target -> {node id:
# why}. Any other failure on Kafka is a broken setup here (and fails this script).
KAFKA_SETUP_DIFFERENCES = {
    "kafka-3.9": {
        ADMIN + "test_describe_configs_broker_resource_returns_configs":
            "for Kafka < 4 the suite expects advertised.listeners unset (its 3.x launcher runs ZooKeeper mode "
            "without it); compat-tests/kafka_process.py sets it, so Kafka reports STATIC_BROKER_CONFIG",
    },
}


@dataclass
class SuiteRun:
    """One suite against one target: each test's outcome (see client_suite_plugins/suite_outcomes.py)."""

    suite: str
    target: str
    broker_version: str
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    seconds: float = 0.0
    timed_out: bool = False
    exit_code: int | None = None

    def ids(self, outcome: str) -> list[str]:
        return sorted(node for node, result in self.outcomes.items() if result["outcome"] == outcome)

    def count(self, outcome: str) -> int:
        return len(self.ids(outcome))


def cache_dir() -> Path:
    return Path(os.environ.get("KBROKER_CLIENT_SUITE_CACHE", Path.home() / ".cache" / "kbroker" / "client-suites"))


def pinned_version(distribution: str) -> str:
    """The version pyproject.toml pins (name==X) or, for a lower bound only, the installed one."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        if name.strip() == distribution and version:
            return version.split(";")[0].strip()
    return metadata.version(distribution)


def sdist(distribution: str, version: str) -> Path:
    """The source distribution from PyPI, downloaded once into the cache."""
    directory = cache_dir() / "sdists"
    stem = f"{distribution.replace('-', '_')}-{version}"
    archive = directory / f"{stem}.tar.gz"
    if not archive.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-binary", ":all:", "--no-deps", f"{distribution}=={version}", "-d", str(directory)],
                       check=True)
    return archive


def unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / archive.name.removesuffix(".tar.gz")


def has_tests(archive: Path) -> bool:
    with tarfile.open(archive) as tar:
        return any(part in ("test", "tests") for name in tar.getnames() for part in Path(name).parts[1:2])


@contextlib.contextmanager
def started_broker(target: str, workdir: Path) -> Iterator[tuple[str, str]]:
    """(bootstrap, Kafka version the target stands for): a fresh broker of the target, stopped on exit."""
    kafka_version = TARGETS[target]
    overrides = [f"{key}={value}" for key, value in SUITE_BROKER_SETTINGS.items()]
    if kafka_version is None:
        port = free_port()  # advertised.listeners set as for Kafka (kafka_process.py), whose value the suite reads
        broker = BrokerProcess(workdir / "kbroker", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", *overrides,
                               port=port).start()
        try:  # kbroker answers as the newest Kafka it is compared with
            yield broker.bootstrap, maven_jars.version_of(kafka_process.VERSIONS["4"], "kafka_2.13")
        finally:
            broker.stop()
        return
    # node id 0, as their launcher numbers its first broker (test_create_partitions assigns replicas to broker 0)
    kafka = kafka_process.KafkaProcess(workdir, kafka_version, None, dict(SUITE_BROKER_SETTINGS), node_id=0)
    with kafka.started():
        yield kafka.bootstrap, kafka.full_version


def run_kafka_python(target: str, source: Path, workdir: Path, log: Path) -> SuiteRun:
    """kafka-python's test/integration against a fresh broker of `target`, bounded by SUITE_TIMEOUT_S."""
    outcomes_file = workdir / "outcomes.json"
    with started_broker(target, workdir) as (bootstrap, kafka_version):
        run = SuiteRun("kafka-python", target, kafka_version)
        env = {**os.environ, "KAFKA_URI": f"PLAINTEXT://{bootstrap}", "KAFKA_VERSION": kafka_version,
               "KAFKA_ROOT": str(source),  # their fixture wants a Kafka distribution directory to exist
               "PYTHONPATH": str(PLUGINS), "KBROKER_SUITE_OUTCOMES": str(outcomes_file)}
        command = [sys.executable, "-m", "pytest", "test/integration", "-p", "no:cacheprovider",
                   "-p", "no:kbroker",  # kbroker's own pytest fixture plugin: not for their suite
                   "-p", "kafka_python_external", "-p", "suite_outcomes", "-q", "-rfEs", "--tb=short",
                   f"--timeout={TEST_TIMEOUT_S}", "--timeout-method=signal"]
        started = time.monotonic()
        with log.open("w") as output:
            process = subprocess.Popen(command, cwd=source, env=env, stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                process.wait(SUITE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                run.timed_out = True
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            run.exit_code = process.returncode
        run.seconds = time.monotonic() - started
    if outcomes_file.is_file():
        run.outcomes = json.loads(outcomes_file.read_text())
    return run


def problems(runs: list[SuiteRun]) -> list[str]:
    """What makes this script fail: see the module's docstring."""
    found = []
    for run in runs:
        where = f"{run.suite} on {run.target}"
        if run.timed_out:
            found.append(f"{where}: stopped after {SUITE_TIMEOUT_S} s")
        if not run.outcomes or run.exit_code not in (0, 1):  # 1: some test failed; 2-5: pytest itself did
            found.append(f"{where}: pytest exited with {run.exit_code} after {len(run.outcomes)} tests (see its log)")
        for node in run.ids("failed") + run.ids("error"):
            if run.target != "kbroker":
                if node not in KAFKA_SETUP_DIFFERENCES.get(run.target, {}):
                    found.append(f"{where}: {node} fails on Kafka: {run.outcomes[node]['message']}")
            elif node not in KNOWN_GAPS:
                found.append(f"{where}: {node} fails on kbroker: {run.outcomes[node]['message']}")
        if run.target == "kbroker":
            found += [f"{where}: {node} passes now; take it off KNOWN_GAPS" for node in run.ids("passed")
                      if node in KNOWN_GAPS]
    return found


def _broker_name(run: SuiteRun) -> str:
    return "kbroker" if run.target == "kbroker" else f"Kafka {run.broker_version}"


def _kbroker_failures(runs: list[SuiteRun]) -> list[str]:
    """One line per test failing on kbroker: why, and what each Kafka run made of it."""
    lines = []
    kafka_runs = [run for run in runs if run.target != "kbroker"]
    for run in runs:
        if run.target != "kbroker":
            continue
        for node in run.ids("failed") + run.ids("error"):
            reason = KNOWN_GAPS.get(node, f"not a known gap: {run.outcomes[node]['message']}")
            on_kafka = ", ".join(f"{_broker_name(k)} {k.outcomes.get(node, {}).get('outcome', 'not run')}"
                                 for k in kafka_runs)
            lines.append(f"- `{node.split('::')[-1]}`: {reason}" + (f" ({on_kafka})" if on_kafka else ""))
    return lines


def markdown(runs: list[SuiteRun], blocked: dict[str, str]) -> str:
    lines = ["| suite | broker | passed | failed | errors | skipped | time |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        timed_out = " (stopped at the time limit)" if run.timed_out else ""
        lines.append(f"| {run.suite} {pinned_version(run.suite)} | {_broker_name(run)} | {run.count('passed')} | "
                     f"{run.count('failed')} | {run.count('error')} | {run.count('skipped')} | "
                     f"{run.seconds:.0f} s{timed_out} |")
    for suite, reason in blocked.items():
        lines.append(f"| {suite} | every broker | - | - | - | - | blocked: {reason} |")
    failures = _kbroker_failures(runs)
    if failures:
        lines += ["", "Failing on kbroker, each with the issue that brings what it needs:", "", *failures]
    differences = [f"- `{node.split('::')[-1]}` on {target}: {why}"
                   for target, nodes in KAFKA_SETUP_DIFFERENCES.items() for node, why in nodes.items()
                   if any(run.target == target and run.outcomes.get(node, {}).get("outcome") in ("failed", "error")
                          for run in runs)]
    if differences:
        lines += ["", "Failing on Kafka because this harness is not the suite's own launcher:", "", *differences]
    return "\n".join(lines)


def splice(document: str, text: str) -> str:
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{BEGIN} ... {END} not found (in that order)")
    return document[: start + len(BEGIN)] + "\n" + text + "\n" + document[end:]


def blocked_suites() -> dict[str, str]:
    """Suites whose source PyPI does not carry (PyPI, Debian, npm and Maven Central are all CI reaches)."""
    version = pinned_version("confluent-kafka")
    if has_tests(sdist("confluent-kafka", version)):
        return {}  # a later release ships them: time to add a runner for them
    return {f"confluent-kafka {version}": "its PyPI sdist ships no tests (tests/ is in the git repository only), "
                                         "and Debian's package is 1.7.0; source not reachable from CI"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--logs", type=Path, help="keep each run's pytest output and outcomes here")
    parser.add_argument("--doc", type=Path, help=f"replace the text between {BEGIN} and {END} of this page")
    options = parser.parse_args()
    targets = options.targets.split(",")
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}: one of {', '.join(TARGETS)}")
    archive = sdist("kafka-python", pinned_version("kafka-python"))
    runs = []
    with tempfile.TemporaryDirectory(prefix="client-suites-") as scratch:
        logs = options.logs or Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        for target in targets:
            workdir = Path(tempfile.mkdtemp(prefix=f"{target}-", dir=scratch))
            source = unpack(archive, workdir / "suite")
            print(f"== kafka-python {pinned_version('kafka-python')} integration suite on {target} ==", flush=True)
            run = run_kafka_python(target, source, workdir, logs / f"kafka-python-{target}.log")
            (logs / f"kafka-python-{target}.json").write_text(json.dumps(run.outcomes, indent=1, sort_keys=True))
            runs.append(run)
    table = markdown(runs, blocked_suites())
    print(table)
    if options.doc:
        options.doc.write_text(splice(options.doc.read_text(), table))
    found = problems(runs)
    for problem in found:
        print("PROBLEM:", problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
