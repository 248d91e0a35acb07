"""The Java kafka-clients harnesses (compat-tests/java/*.java), compiled against a client generation from Maven.

    harness = compile_harness(workdir, "4")          # kafka-clients 4.x (jar set clients-4 of java/pom.xml)
    harness.run("produce", bootstrap, topic, 0, 10)  # one short JVM printing JSON lines

GENERATIONS maps the generation names tests parametrize over (with the `generations` fixture decorator) to the
jar sets of compat-tests/java/pom.xml.
Without a JDK or the jars the calling test skips locally and fails under CI (CI set in the environment),
so the suite cannot pass vacuously.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

import maven_jars

JAVA_DIR = Path(__file__).parent / "java"
HARNESS_SOURCES = (JAVA_DIR / "KafkaHarness.java", JAVA_DIR / "ConsumerGroupHarness.java")
# harnesses that need kafka-clients 4.x (compile_harness's `extra`): SubscriptionPattern appeared in 4.0
SUBSCRIPTION_HARNESS = JAVA_DIR / "SubscriptionHarness.java"
TRANSACTION_HARNESS = JAVA_DIR / "TransactionHarness.java"  # transactional producers, read_committed consumers
GENERATIONS = {"3.9": "clients-3.9", "4": "clients-4"}  # the last ZooKeeper-era line, and the newest
NEWEST = "4"
T = TypeVar("T")
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")  # startup over peak speed


def generations(scope: str = "session") -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A fixture decorator parametrized over GENERATIONS (ids "java-3.9", "java-4"): request.param is one."""
    return pytest.fixture(scope=scope, params=sorted(GENERATIONS), ids=[f"java-{g}" for g in sorted(GENERATIONS)])


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(message: str) -> NoReturn:
    """Missing prerequisites fail the run in CI (so the suite cannot pass vacuously), else skip."""
    if in_ci():
        pytest.fail(f"{message} (CI is set, so this is a failure rather than a skip)", pytrace=False)
    pytest.skip(message)


class HarnessError(AssertionError):
    """A harness call exited non-zero; `error` is its {"type": "error"} line, if it printed one."""

    def __init__(self, message: str, error: dict | None) -> None:
        super().__init__(message)
        self.error = error or {}


@dataclass
class JavaHarness:
    java: str
    classpath: str
    kafka_version: str

    def command(self, main: str, *args: object) -> list[str]:
        return [self.java, *JVM_OPTIONS, "-cp", self.classpath, main, *map(str, args)]

    def run(self, *args: object, timeout: float = 60, main: str = "KafkaHarness") -> list[dict]:
        """One JVM of the `main` harness; its JSON lines, or HarnessError when it exits non-zero."""
        done = subprocess.run(self.command(main, *args), capture_output=True, text=True,
                              timeout=timeout, check=False)
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0:
            errors = [line for line in lines if line.get("type") == "error"]
            stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("SLF4J"))
            raise HarnessError(
                f"kafka-clients {self.kafka_version} `{' '.join(map(str, args))}` exited {done.returncode}: "
                f"{errors[-1] if errors else done.stdout[-2000:]}\n{stderr[-2000:]}",
                errors[-1] if errors else None)
        return lines


def compile_harness(workdir: Path, generation: str = NEWEST, extra: tuple[Path, ...] = ()) -> JavaHarness:
    """javac both harnesses, and the `extra` sources, against kafka-clients of `generation` ("3.9" or "4")
    into `workdir`."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        unavailable("no JDK on PATH (javac/java): install openjdk-17-jdk-headless (scripts/test.sh does)")
    try:
        jars = maven_jars.jars(GENERATIONS[generation])
    except maven_jars.JarsUnavailable as error:
        unavailable(f"kafka-clients {generation} jars: {error}")
    classpath = maven_jars.classpath(GENERATIONS[generation])
    sources = [str(source) for source in HARNESS_SOURCES + extra]
    compiled = subprocess.run([javac, "-nowarn", "-d", str(workdir), "-cp", classpath, *sources],
                              capture_output=True, text=True, timeout=120, check=False)
    if compiled.returncode != 0:
        pytest.fail(f"javac failed on the harnesses:\n{compiled.stdout}{compiled.stderr}", pytrace=False)
    [client_jar] = [jar for jar in jars if jar.name.startswith("kafka-clients-")]
    return JavaHarness(java, maven_jars.classpath(GENERATIONS[generation], workdir),
                       maven_jars.kafka_version_in(client_jar))
