"""docs/testing.md's Java/JUnit example, run as written: JUnit's console launcher compiles nothing of ours, the
test class comes from the page, starts `kbroker serve` with kbroker.faults.port itself, injects faults over HTTP
and sends with kafka-clients 4.x. Only its two fixed ports are swapped for free ones."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.testing import free_port

import maven_jars
from java_harness import GENERATIONS, NEWEST, unavailable

DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"
SECTION = "## A Java/JUnit test against `kbroker serve`"
BROKER_PORT, FAULTS_PORT = "19092", "19192"  # the ports the example names


def example_source() -> str:
    """The first java block after the section heading."""
    after = DOC.read_text(encoding="utf-8").split(SECTION, 1)[1]
    found = re.search(r"```java\n(.*?)```", after, re.DOTALL)
    assert found, f"no java block under {SECTION!r} in {DOC}"
    return found.group(1)


@pytest.mark.client("java")
@pytest.mark.scenario("Faults: idempotent producer retries NOT_LEADER_OR_FOLLOWER")
def test_the_java_junit_example_of_the_testing_guide_passes(tmp_path: Path) -> None:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        unavailable("no JDK on PATH (javac/java): install openjdk-17-jdk-headless (scripts/test.sh does)")
    try:
        (launcher,) = maven_jars.jars("junit")
        clients = maven_jars.classpath(GENERATIONS[NEWEST])
    except maven_jars.JarsUnavailable as error:
        unavailable(f"JUnit or kafka-clients jars: {error}")
    source = example_source()
    assert BROKER_PORT in source and FAULTS_PORT in source, "the example no longer names the ports swapped here"
    source = source.replace(BROKER_PORT, str(free_port())).replace(FAULTS_PORT, str(free_port()))
    (tmp_path / "IdempotentProducerTest.java").write_text(source, encoding="utf-8")
    classpath = os.pathsep.join([clients, str(launcher)])
    compiled = subprocess.run([javac, "-nowarn", "-d", str(tmp_path / "classes"), "-cp", classpath,
                               str(tmp_path / "IdempotentProducerTest.java")],
                              capture_output=True, text=True, timeout=120, check=False)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.Popen([java, "-jar", str(launcher), "execute", "--fail-if-no-tests", "--disable-banner",
                            "--class-path", os.pathsep.join([clients, str(tmp_path / "classes")]),
                            "--select-class", "IdempotentProducerTest"],
                           cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)  # the kbroker it starts shares its process group
    try:
        output, _ = run.communicate(timeout=150)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # whatever it started and did not stop
    assert run.returncode == 0, output[-4000:]
    assert re.search(r"\[\s*1 tests successful\s*\]", output), output[-4000:]
