"""Brokers of a ZooKeeper-mode cluster as subprocesses, behind one interface: `kbroker serve` in cluster mode
(KbrokerProcess) and Apache Kafka 3.9 (KafkaZkBroker, the reference kbroker's cluster behaviour is checked against).

The cluster tests (tests/cluster/kbroker_process.py) and the cluster bench suite (bench/suites/cluster.py) both
start, pause, kill and wait for brokers through this module, so what the tests prove and what the bench measures
run the same processes. Each broker's log is kept beside its data, for the tail a failure shows.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from kbroker.testing import free_port

import kafka_process

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60
START_TIMEOUT = 240  # past a Kafka JVM's own start limit (kafka_process, 120 s) plus a predecessor's registration


class BrokerExited(RuntimeError):
    """A broker's process ended by itself while its cluster was expected to run."""


def wait_until(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT, every: float = 0.2,
               give_up: tuple[type[BaseException], ...] = ()) -> Any:
    """`condition()`'s first truthy value, asked every `every` seconds. An exception counts as not yet (a broker
    that is starting or moving refuses) unless it is one of `give_up`; TimeoutError naming `what` and the last
    exception after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: str | None = None  # its text only: a kept exception's traceback would keep the callers' clients alive
    while True:
        try:
            found = condition()
        except give_up:
            raise
        except Exception as error:
            found, last = None, repr(error)
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s: {what}" + (f" (last error: {last})" if last else ""))
        time.sleep(every)


class ClusterBroker:
    """What both kinds of broker share: their process, signals to it, their log."""

    broker_id: int
    log: Path
    process: subprocess.Popen | None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exited(self) -> int | None:
        """The exit code once the process ended by itself; None while it runs, and before a start or after a stop."""
        return None if self.process is None else self.process.poll()

    def send(self, sig: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        """`sig` (SIGTERM: a controlled shutdown; SIGKILL: a crash) and wait; the exit code, None if not started."""
        if sig != signal.SIGKILL and self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # a paused broker cannot stop itself
        return self._stop(sig, timeout)

    def kill(self) -> None:
        """kill -9: nothing of the broker's shutdown runs, and ZooKeeper keeps its registration until the session
        expires."""
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def _stop(self, sig: int, timeout: float) -> int | None:
        raise NotImplementedError


class KbrokerProcess(ClusterBroker):
    """`kbroker serve` in cluster mode, its log (kbroker.log) and data (data/) in `workdir`."""

    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, overrides: dict[str, str] | None = None,
                 host: str = "127.0.0.1", wrap: Callable[[list[str]], list[str]] = list, log_level: str = "INFO",
                 event_loop: str = "auto") -> None:
        """`host` to listen on, `wrap` the command line (netns.Network.run puts it in another network namespace);
        `log_level` and `event_loop` are kbroker's options (the bench logs warnings only, so logging costs nothing
        it measures, and passes its --event-loop)."""
        self.workdir, self.data, self.log = workdir, workdir / "data", workdir / "kbroker.log"
        self.host, self.wrap = host, wrap
        self.port = free_port()
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.log_level, self.event_loop = log_level, event_loop
        self.process = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        overrides = {"listeners": f"PLAINTEXT://{self.host}:{self.port}", "log.dirs": str(self.data),
                     "zookeeper.connect": self.zookeeper, "broker.id": str(self.broker_id), **self.overrides}
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", self.log_level, "serve",
                "--event-loop", self.event_loop]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        return self.wrap(args)

    def start(self) -> KbrokerProcess:
        """Returns once the process runs: whether the cluster formed is wait_formed's to tell."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.command(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT)
        return self

    def _stop(self, sig: int, timeout: float) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        kafka_process.stop_process(process, sig, timeout)
        return process.returncode


class KafkaZkBroker(ClusterBroker):
    """Apache Kafka 3.9 in ZooKeeper mode (compat-tests' KafkaProcess) behind KbrokerProcess's interface, so a
    cluster test or measurement runs on either."""

    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, overrides: dict[str, str] | None = None,
                 host: str = "127.0.0.1", wrap: Callable[[list[str]], list[str]] = list) -> None:
        """`host` and `wrap` as KbrokerProcess's."""
        self.kafka = kafka_process.KafkaProcess(workdir, version="3.9", zookeeper=zookeeper, node_id=broker_id,
                                                overrides=dict(overrides or {}), host=host, wrap=wrap)
        self.zookeeper, self.broker_id, self.port = zookeeper, broker_id, self.kafka.port
        self.data, self.log = self.kafka.log_dir, self.kafka.workdir / "server.log"

    @property
    def process(self) -> subprocess.Popen | None:
        return self.kafka.process

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def start(self) -> KafkaZkBroker:
        """Returns once Kafka answers Metadata (after waiting out a killed predecessor's registration)."""
        self.kafka.start()
        return self

    def _stop(self, sig: int, timeout: float) -> int | None:
        return self.kafka.stop(sig)


KINDS: dict[str, type[ClusterBroker]] = {"kbroker": KbrokerProcess, "kafka-3.9": KafkaZkBroker}


def start_all(brokers: Collection[ClusterBroker]) -> None:
    """Starts them side by side (Kafka's start returns only once it serves, and a JVM takes seconds); raises the
    first failure once every start has returned."""
    pool = concurrent.futures.ThreadPoolExecutor(max(1, len(brokers)))
    try:
        for future in [pool.submit(broker.start) for broker in brokers]:
            future.result(START_TIMEOUT)
    finally:  # never wait on a stuck start here: the test's timeout must be able to end the test
        pool.shutdown(wait=False, cancel_futures=True)


def names_everyone(via: str, broker_ids: Collection[int]) -> bool:
    """Whether the broker at `via` answers Metadata with a controller among `broker_ids` and exactly those brokers."""
    metadata = AdminClient({"bootstrap.servers": via, "log_level": 0}).list_topics(timeout=5)
    return metadata.controller_id in broker_ids and sorted(metadata.brokers) == sorted(broker_ids)


def check_running(brokers: Collection[ClusterBroker], name: str = "cluster") -> None:
    """BrokerExited, with the end of its log, for a broker whose process has ended by itself."""
    for broker in brokers:
        code = broker.exited()
        if code is not None:
            raise BrokerExited(f"{name}: broker {broker.broker_id} exited with {code}:\n{broker.log_tail(15)}")


def wait_formed(zk: Any, brokers: Collection[ClusterBroker], timeout: float = TIMEOUT, name: str = "cluster") -> None:
    """Until exactly `brokers` are registered in ZooKeeper (`zk`, a started KazooClient on their chroot) and each
    one's Metadata names a controller and all of them; BrokerExited at once when one of them dies meanwhile."""
    ids = sorted(broker.broker_id for broker in brokers)

    def registered() -> bool:
        check_running(brokers, name)
        return sorted(map(int, zk.get_children("/brokers/ids"))) == ids

    def formed() -> bool:
        check_running(brokers, name)
        return all(names_everyone(broker.bootstrap, ids) for broker in brokers)

    wait_until(registered, f"{name}: brokers {ids} registered in ZooKeeper", timeout, give_up=(BrokerExited,))
    wait_until(formed, f"{name}: every broker's Metadata names the controller and all the brokers", timeout,
               give_up=(BrokerExited,))
