"""Apache Kafka's command-line tools run by their main classes from the jars Maven resolved (no shell scripts).

    output = kafka_tools.run("TopicCommand", "--bootstrap-server", bootstrap, "--list")

Every tool is a short JVM (about a second of start-up, with the client's JIT switched to its fast tier).
The 4.x tools live in org.apache.kafka.tools (kafka-tools jar); 3.9.2 still kept ConfigCommand,
ConsoleProducer and DumpLogSegments in the kafka_2.13 jar (kafka.admin / kafka.tools), so `main_class` names both lines.
"""

from __future__ import annotations

import subprocess

import java_harness
import kafka_process
import maven_jars

TOOLS_SET = "kafka-4"  # the tools' generation the tests run by default
TIMEOUT = 90
JVM = ("-Xmx256M", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")  # short-lived: start fast, little heap
PACKAGE = "org.apache.kafka.tools"
SUBPACKAGES = {"ConsumerGroupCommand": "consumer.group.", "ConsoleConsumer": "consumer.",
               "ReassignPartitionsCommand": "reassign."}
IN_CORE_3_9 = {"ConfigCommand": "kafka.admin", "ConsoleProducer": "kafka.tools", "DumpLogSegments": "kafka.tools"}


class ToolFailed(AssertionError):
    """A tool exited non-zero; carries what it printed."""


def main_class(tool: str, jar_set: str = TOOLS_SET) -> str:
    """The tool's main class in a jar set: org.apache.kafka.tools[.sub].Tool, or kafka.* for 3.9's leftovers."""
    if jar_set == "kafka-3.9" and tool in IN_CORE_3_9:
        return f"{IN_CORE_3_9[tool]}.{tool}"
    return f"{PACKAGE}.{SUBPACKAGES.get(tool, '')}{tool}"


def classpath(jar_set: str = TOOLS_SET) -> str:
    """The set's classpath; skips (fails under CI) without a JDK or the jars."""
    try:
        kafka_process.java()
        return maven_jars.classpath(jar_set)
    except (kafka_process.KafkaUnavailable, maven_jars.JarsUnavailable) as error:
        java_harness.unavailable(f"Kafka's tools need a JDK and the {jar_set} jars: {error}")
        raise


def run(tool: str, *args: object, stdin: str | None = None, jar_set: str = TOOLS_SET,
        check: bool = True) -> str:
    """The tool's standard output; raises ToolFailed (with both streams) when it exits non-zero."""
    command = [kafka_process.java(), *JVM, "-cp", classpath(jar_set), main_class(tool, jar_set), *map(str, args)]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if check and done.returncode != 0:
        raise ToolFailed(f"{tool} {' '.join(map(str, args))} exited {done.returncode}:\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout
