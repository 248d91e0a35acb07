"""Java jar sets resolved by Maven from compat-tests/java/pom.xml, cached once per machine.

    python3 compat-tests/maven_jars.py            # fill every set (scripts/test.sh does this)
    python3 compat-tests/maven_jars.py kafka-4    # print one set's classpath

A set is a profile of pom.xml; its runtime classpath is copied by `mvn dependency:copy-dependencies`
into $KBROKER_JAR_CACHE (default ~/.cache/kbroker/jars)/<set>-<hash of pom.xml>, so a version bump in
the pom resolves afresh and an unchanged pom costs nothing. Maven's own repository (~/.m2) is the
download cache underneath. Parallel test workers wait on one lock file instead of resolving twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

POM = Path(__file__).resolve().parent / "java" / "pom.xml"
JAR_SETS = ("clients-3.9", "clients-4", "kafka-3.9", "kafka-4", "spark", "junit")
RESOLVE_TIMEOUT = 900


class JarsUnavailable(RuntimeError):
    """Maven is missing or could not resolve a set (no network to Maven Central, say)."""


def cache_root() -> Path:
    return Path(os.environ.get("KBROKER_JAR_CACHE", Path.home() / ".cache" / "kbroker" / "jars"))


def _set_dir(name: str) -> Path:
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return cache_root() / f"{name}-{digest}"


def jars(name: str) -> list[Path]:
    """The jars of set `name`, resolving them first if this machine has not yet."""
    if name not in JAR_SETS:
        raise ValueError(f"unknown jar set {name!r}: one of {JAR_SETS}")
    target = _set_dir(name)
    done = target / ".complete"
    if not done.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.is_file():
                _resolve(name, target)
                done.touch()
    return sorted(target.glob("*.jar"))


def classpath(name: str, *extra: Path | str) -> str:
    return os.pathsep.join([*map(str, extra), *map(str, jars(name))])


def _resolve(name: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsUnavailable("mvn is not on PATH (Debian: apt-get install maven; scripts/test.sh does)")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [mvn, "-q", "-B", "-f", str(POM), "-P", name, "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={partial}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as error:
        raise JarsUnavailable(f"mvn did not resolve {name} within {RESOLVE_TIMEOUT} s") from error
    if done.returncode != 0 or not any(partial.glob("*.jar")):
        raise JarsUnavailable(f"mvn could not resolve jar set {name}:\n{(done.stdout + done.stderr)[-3000:]}")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def version_of(jar_set: str, artifact: str) -> str:
    """The version in the file name of `artifact`-<version>.jar within a set (e.g. kafka-clients)."""
    for jar in jars(jar_set):
        stem = jar.name.removesuffix(".jar")
        if stem.startswith(artifact + "-") and stem[len(artifact) + 1:][:1].isdigit():
            return stem[len(artifact) + 1:]
    raise JarsUnavailable(f"no {artifact} jar in set {jar_set}")


def kafka_version_in(jar: Path) -> str:
    """The version a kafka-clients jar reports about itself."""
    with zipfile.ZipFile(jar) as archive:
        text = archive.read("kafka/kafka-version.properties").decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line).get("version", "?")


def main(names: list[str]) -> int:
    if names:
        for name in names:
            print(classpath(name))
        return 0
    for name in JAR_SETS:
        found = jars(name)
        print(f"{name}: {len(found)} jars in {found[0].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
