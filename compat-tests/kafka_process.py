"""Apache Kafka (and ZooKeeper) as JVM subprocesses from the jars Maven resolved: the oracle.

    with KafkaProcess(workdir, version="4").started() as kafka:      # KRaft, combined mode
        kafka.bootstrap                                               # "127.0.0.1:<free port>"
    with ZooKeeperProcess(workdir).started() as zk, \\
            KafkaProcess(workdir, version="3.9", zookeeper=zk.connect).started() as kafka:
        ...                                                           # ZooKeeper mode (3.9 only)

One node, loopback only, free ports, everything under `workdir` (server.properties, the log dirs,
the log4j output in server.log). The broker settings are Kafka's defaults except for what a single
node needs (replication factors of 1) and KIP-848 switched on for 3.9 KRaft, where it is a preview.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from kbroker.testing import free_port

import maven_jars

VERSIONS = {"3.9": "kafka-3.9", "4": "kafka-4"}  # --kafka-version -> jar set of compat-tests/java/pom.xml
HEAP = "-Xmx1G"  # kafka-server-start.sh's default heap
JVM_OPTIONS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
               "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")  # kafka-run-class.sh's
LOG4J1 = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""
LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


class KafkaUnavailable(RuntimeError):
    """No JDK, or the jars could not be resolved."""


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailable("no java on PATH: install openjdk-17-jdk-headless (scripts/test.sh does)")
    return found


def _jvm(jar_set: str, main: str, *args: str, log_config: list[str], log: Path,
         heap: str = HEAP, wrap: Callable[[list[str]], list[str]] = list) -> subprocess.Popen:
    try:
        classpath = maven_jars.classpath(jar_set)
    except maven_jars.JarsUnavailable as error:
        raise KafkaUnavailable(str(error)) from error
    command = [java(), heap, *JVM_OPTIONS, *log_config, "-cp", classpath, main, *args]
    with open(log.with_suffix(".out"), "ab") as output:
        return subprocess.Popen(wrap(command), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _log_config(jar_set: str, workdir: Path, log: Path) -> list[str]:
    if jar_set == "kafka-3.9":
        path = workdir / "log4j.properties"
        path.write_text(LOG4J1.format(log=log))
        return [f"-Dlog4j.configuration=file:{path}"]
    path = workdir / "log4j2.properties"
    path.write_text(LOG4J2.format(log=log))
    return [f"-Dlog4j2.configurationFile={path}"]


def _wait_for_port(process: subprocess.Popen, port: int, timeout: float, what: str, log: Path,
                   host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening; see {log}:\n"
                               f"{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s; see {log}:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    texts = [path.read_text(errors="replace") for path in (log, log.with_suffix(".out")) if path.is_file()]
    return "\n".join("\n".join(text.splitlines()[-lines:]) for text in texts)


def stop_process(process: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Send `sig` (SIGTERM: the broker's controlled shutdown; SIGKILL: a crash) and wait; kill -9 after `timeout`."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_sessions(connect: str, timeout: float = 90) -> None:
    """Until ZooKeeper at `connect` grants a session: its port opens before it serves them, and on a loaded machine
    the gap is seconds. The probe logs only errors (not a warning per connection dropped meanwhile)."""
    from kazoo.client import KazooClient

    quiet = logging.getLogger(f"{__name__}.zookeeper-probe")
    quiet.setLevel(logging.ERROR)
    deadline = time.monotonic() + timeout
    while True:
        client = KazooClient(hosts=connect, timeout=10, logger=quiet)
        try:
            client.start(timeout=10)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
        finally:
            client.stop()
            client.close()


class ZooKeeperProcess:
    """A standalone ZooKeeper server from the zookeeper jar Kafka 3.9 depends on."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.workdir = workdir / "zookeeper"
        self.host = host
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 90) -> ZooKeeperProcess:
        """Returns once ZooKeeper grants sessions (`timeout` for its port, then as long for that); on a failure,
        or an interruption, the JVM is stopped again."""
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        # ZooKeeper expires sessions on tick boundaries: a short tick keeps expiry within ~0.5 s of the session
        # timeout, so failover timings measure the brokers, not the tick (3 s by default)
        config.write_text(f"dataDir={self.workdir / 'data'}\nclientPort={self.port}\n"
                          f"clientPortAddress={self.host}\nmaxClientCnxns=0\nadmin.enableServer=false\n"
                          "4lw.commands.whitelist=*\ntickTime=500\nmaxSessionTimeout=60000\n")
        log = self.workdir / "zookeeper.log"
        self.process = _jvm("kafka-3.9", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config),
                            log_config=_log_config("kafka-3.9", self.workdir, log), log=log, heap="-Xmx512M")
        try:
            _wait_for_port(self.process, self.port, timeout, "ZooKeeper", log, self.host)
            wait_for_sessions(self.connect, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None

    @contextlib.contextmanager
    def started(self) -> Iterator[ZooKeeperProcess]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


class KafkaProcess:
    """One Apache Kafka broker: KRaft combined mode, or ZooKeeper mode when `zookeeper` is given (3.9)."""

    def __init__(self, workdir: Path, version: str = "4", zookeeper: str | None = None,
                 overrides: dict[str, str] | None = None, node_id: int = 1, host: str = "127.0.0.1",
                 wrap: Callable[[list[str]], list[str]] = list) -> None:
        """`host` to listen on, `wrap` the command line (a network namespace's `ip netns exec`, say)."""
        if version not in VERSIONS:
            raise ValueError(f"Kafka version {version!r}: one of {sorted(VERSIONS)}")
        if zookeeper and version != "3.9":
            raise ValueError("ZooKeeper mode exists only up to Kafka 3.9")
        self.jar_set = VERSIONS[version]
        self.version = version
        self.zookeeper = zookeeper
        self.node_id = node_id
        self.host, self.wrap = host, wrap
        self.workdir = workdir / f"kafka-{version}-{'zk' if zookeeper else 'kraft'}-{node_id}"
        self.log_dir = self.workdir / "data"
        self.port = free_port()
        self.controller_port = None if zookeeper else free_port()
        self.overrides = overrides or {}
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def full_version(self) -> str:
        return maven_jars.version_of(self.jar_set, "kafka_2.13")

    def properties(self) -> dict[str, str]:
        single_node = {
            "log.dirs": str(self.log_dir),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        if self.zookeeper:
            mode = {"broker.id": str(self.node_id), "zookeeper.connect": self.zookeeper,
                    "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                    # the shortest session ZooKeeper grants (2 ticks): a killed broker's registration goes soon
                    "zookeeper.session.timeout.ms": "6000"}
        else:
            mode = {
                "process.roles": "broker,controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
                "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        preview = self.version == "3.9" and not self.zookeeper  # ZooKeeper mode has no KIP-848 at all
        kip848 = {"group.coordinator.rebalance.protocols": "classic,consumer"} if preview else {}
        return {**mode, "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}", **single_node,
                **kip848, **self.overrides}

    def start(self, timeout: float = 120) -> KafkaProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self.properties().items()))
        log = self.workdir / "server.log"
        log_config = _log_config(self.jar_set, self.workdir, log)
        if not self.zookeeper and not (self.log_dir / "meta.properties").is_file():
            self._format(config, log_config, log)
        if self.zookeeper:
            self._wait_for_old_registration_to_expire(timeout)
        self.process = _jvm(self.jar_set, "kafka.Kafka", str(config), log_config=log_config, log=log, wrap=self.wrap)
        _wait_for_port(self.process, self.port, timeout, f"Kafka {self.version}", log, self.host)
        self._wait_ready(timeout)
        return self

    def _format(self, config: Path, log_config: list[str], log: Path) -> None:
        """kafka-storage.sh format: a KRaft log dir needs a cluster id before the first start."""
        cluster_id = _kafka_uuid()
        process = _jvm(self.jar_set, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
                       log_config=log_config, log=log.with_name("format.log"), heap="-Xmx256M")
        if process.wait(120) != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{_tail(log.with_name('format.log'))}")

    def _wait_for_old_registration_to_expire(self, timeout: float) -> None:
        """After a SIGKILL, /brokers/ids/<id> stays until ZooKeeper expires the dead session, and a broker
        started before that exits with NodeExists: wait as an operator would."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zookeeper, timeout=10)
        client.start(timeout=30)
        try:
            deadline = time.monotonic() + timeout
            while client.exists(f"/brokers/ids/{self.node_id}") and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            client.stop()
            client.close()

    def _wait_ready(self, timeout: float) -> None:
        """Until the broker answers Metadata with itself as a live broker (the port opens earlier)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while True:
            try:
                if admin.list_topics(timeout=5).brokers:
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            if self.process.poll() is not None:
                log = self.workdir / "server.log"
                raise RuntimeError(f"Kafka exited with {self.process.returncode}:\n{_tail(log)}")
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """SIGTERM: Kafka's controlled shutdown; SIGKILL: a crash. As BrokerProcess.stop, so tests take either."""
        process, self.process = self.process, None
        if process is None:
            return None
        stop_process(process, sig)
        return process.returncode

    @contextlib.contextmanager
    def started(self) -> Iterator[KafkaProcess]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


def _kafka_uuid() -> str:
    """A random cluster id in Kafka's Uuid text form (url-safe base64 of 16 bytes, no padding); like Kafka's
    Uuid.randomUuid, never one that starts with "-", which a command line would take for an option."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


if __name__ == "__main__":  # start one for a manual look: python3 compat-tests/kafka_process.py [3.9|4] [zk]
    import sys
    import tempfile

    version = sys.argv[1] if len(sys.argv) > 1 else "4"
    with tempfile.TemporaryDirectory(prefix="kafka-") as scratch, contextlib.ExitStack() as stack:
        zk = stack.enter_context(ZooKeeperProcess(Path(scratch)).started()) if "zk" in sys.argv[2:] else None
        kafka = stack.enter_context(KafkaProcess(Path(scratch), version, zk.connect if zk else None).started())
        print(f"Kafka {kafka.full_version} on {kafka.bootstrap} (pid {kafka.process.pid}); Ctrl-C stops", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while kafka.process.poll() is None:
                time.sleep(1)
    os._exit(0)
