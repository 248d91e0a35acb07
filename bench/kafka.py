"""Apache Kafka for the benchmarks: the JVM processes compat-tests already knows how to start.

compat-tests/kafka_process.py starts Apache Kafka (KRaft, one node, kafka-server-start.sh's 1 GiB
heap) from the jars compat-tests/maven_jars.py has Maven resolve from compat-tests/java/pom.xml;
compat-tests/cluster_processes.py runs the brokers of a ZooKeeper-mode cluster (kbroker's or Kafka
3.9's) as the cluster tests do. They are plain modules of a directory that is not a package
(maven_jars is imported by its bare name there), so this module is the ONE place bench/ puts
compat-tests/ on sys.path; the rest of bench/ imports them only from here. It is appended, not
prepended, so nothing in compat-tests/ can shadow an installed package.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

COMPAT_TESTS = Path(__file__).resolve().parent.parent / "compat-tests"
if str(COMPAT_TESTS) not in sys.path:
    sys.path.append(str(COMPAT_TESTS))

import cluster_processes  # noqa: E402  (needs the sys.path entry above)
import transaction_history  # noqa: E402

import kafka_process  # noqa: E402
import maven_jars  # noqa: E402
from kafka_process import VERSIONS, KafkaProcess, KafkaUnavailable  # noqa: E402

DEFAULT_VERSION = "4"
TOOLS_VERSION = "4"  # Kafka's command-line tools (kafka-tools, with the Java client of that jar set)
TOOLS_JAR_SET = VERSIONS[TOOLS_VERSION]
CLIENT_HEAP = "-Xmx512M"   # kafka-producer-perf-test.sh's KAFKA_HEAP_OPTS

__all__ = [
    "DEFAULT_VERSION",
    "VERSIONS",
    "KafkaProcess",
    "KafkaUnavailable",
    "cluster_processes",
    "java_command",
    "transaction_history",
    "unavailable",
]


def unavailable(version: str = DEFAULT_VERSION) -> str | None:
    """Why Apache Kafka `version` cannot run here (no JDK, jars not resolvable), or None when it can.

    Resolves the jar set with Maven when this machine has not yet (once per machine)."""
    try:
        kafka_process.java()
        maven_jars.jars(VERSIONS[version])
    except (KafkaUnavailable, maven_jars.JarsUnavailable) as error:
        return str(error)
    return None


def java_command(main: str, *args: str, jar_set: str = TOOLS_JAR_SET, heap: str = CLIENT_HEAP) -> list[str]:
    """`java ... main args` with a jar set's classpath, for Kafka's own command-line tools."""
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailable("no java on PATH")
    return [found, heap, "-cp", maven_jars.classpath(jar_set), main, *args]
