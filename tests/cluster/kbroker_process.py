"""A kbroker broker in cluster mode as a subprocess (`python -m kbroker serve`), so a test can stop, pause and
kill it as a real broker is; its log is kept beside its data. `running_cluster` starts several on one chroot."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from waiting import wait_until

from kbroker.testing import free_port

ROOT = Path(__file__).resolve().parents[2]


class KbrokerProcess:
    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, overrides: dict[str, str] | None = None,
                 host: str = "127.0.0.1", wrap: Callable[[list[str]], list[str]] = list) -> None:
        """`host` to listen on, `wrap` the command line (netns.Network.run puts it in another network namespace)."""
        self.workdir = workdir
        self.data = workdir / "data"
        self.host, self.wrap = host, wrap
        self.port = free_port()
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.overrides = dict(overrides or {})
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> KbrokerProcess:
        overrides = {"listeners": f"PLAINTEXT://{self.host}:{self.port}", "log.dirs": str(self.data),
                     "zookeeper.connect": self.zookeeper, "broker.id": str(self.broker_id), **self.overrides}
        args = [sys.executable, "-m", "kbroker.cli", "--log-level", "INFO", "serve"]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "kbroker.log", "ab") as out:
            self.process = subprocess.Popen(self.wrap(args), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return self

    def send(self, sig: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            if sig != signal.SIGKILL:
                os.kill(process.pid, signal.SIGCONT)  # a paused broker cannot stop itself
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def log_tail(self, lines: int = 40) -> str:
        path = self.workdir / "kbroker.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


class KbrokerCluster:
    """Brokers of one ZooKeeper chroot (kbroker's, or Kafka's behind the same interface), and what their Metadata
    answers say about partitions."""

    def __init__(self, brokers: dict[int, KbrokerProcess | KafkaZkBroker]) -> None:
        self.brokers = brokers

    def live(self) -> list[KbrokerProcess | KafkaZkBroker]:
        return [b for b in self.brokers.values() if b.process is not None]

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live())

    def knows_everyone(self, via: KbrokerProcess | KafkaZkBroker) -> bool:
        metadata = AdminClient({"bootstrap.servers": via.bootstrap, "log_level": 0}).list_topics(timeout=5)
        return metadata.controller_id in self.brokers and sorted(metadata.brokers) == sorted(self.brokers)

    def partition(self, via: KbrokerProcess | KafkaZkBroker, index: int,
                  name: str) -> tuple[int, tuple[int, ...]] | None:
        """(leader, sorted ISR) of topic `name`, partition `index`, as the broker `via` tells it in Metadata."""
        topic = AdminClient({"bootstrap.servers": via.bootstrap, "log_level": 0}).list_topics(name, timeout=5) \
            .topics.get(name)
        if topic is None or index not in topic.partitions:
            return None
        found = topic.partitions[index]
        return found.leader, tuple(sorted(found.isrs))

    def agreed(self, index: int, name: str) -> tuple[int, tuple[int, ...]] | None:
        """The partition's (leader, ISR) once every live broker tells the same, with a leader."""
        seen = {self.partition(b, index, name) for b in self.live()}
        if len(seen) != 1:
            return None
        (found,) = seen
        return found if found is not None and found[0] >= 0 else None

    def in_sync(self, index: int, name: str, replicas: tuple[int, ...]) -> bool:
        return (self.agreed(index, name) or (None, ()))[1] == replicas

    def coordinator(self, group: str) -> int:
        """The broker FindCoordinator (v3, asked of a live broker) names for `group`; -1 while none is available."""
        from kafka_wire_peer import WireClient

        from wire import messages

        host, port = self.live()[0].bootstrap.rsplit(":", 1)
        client = WireClient(host, int(port))
        try:
            answer = client.call(10, 3, messages.FindCoordinatorRequest(key=group, key_type=0)).body
        finally:
            client.close()
        return answer.node_id if answer.error_code == 0 else -1


class KafkaZkBroker:
    """Apache Kafka 3.9 in ZooKeeper mode behind KbrokerProcess's interface, so a cluster test runs on either:
    the reference every kbroker cluster behaviour is checked against."""

    def __init__(self, workdir: Path, zookeeper: str, broker_id: int, overrides: dict[str, str] | None = None) -> None:
        import kafka_process

        self.kafka = kafka_process.KafkaProcess(workdir, version="3.9", zookeeper=zookeeper, node_id=broker_id,
                                                overrides=dict(overrides or {}))
        self.zookeeper, self.broker_id, self.port = zookeeper, broker_id, self.kafka.port
        self.data = self.kafka.log_dir

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

    def send(self, sig: int) -> None:
        assert self.kafka.process is not None
        os.kill(self.kafka.process.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        if self.kafka.process is not None and sig != signal.SIGKILL:
            os.kill(self.kafka.process.pid, signal.SIGCONT)
        return self.kafka.stop(sig)

    def log_tail(self, lines: int = 40) -> str:
        path = self.kafka.workdir / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


KINDS = {"kbroker": KbrokerProcess, "kafka-3.9": KafkaZkBroker}


@contextlib.contextmanager
def running_cluster(zookeeper: str, workdir: Path, broker_ids: tuple[int, ...], overrides: dict[str, str],
                    kind: str = "kbroker", **options: Callable[[int], Any]) -> Iterator[KbrokerCluster]:
    """Brokers `broker_ids` of `kind` (KINDS) on the `zookeeper` chroot, yielded once each is registered and every
    one's Metadata names the controller and all of them; killed (their log tails printed) afterwards. `options`
    are more constructor arguments, as functions of the broker id (e.g. host=..., wrap=...)."""
    brokers = {i: KINDS[kind](workdir / f"broker-{i}", zookeeper, i, overrides,
                              **{name: option(i) for name, option in options.items()}) for i in broker_ids}
    zk = KazooClient(hosts=zookeeper)
    try:
        starting = [threading.Thread(target=broker.start) for broker in brokers.values()]
        for thread in starting:  # Kafka's start returns when it serves: the JVMs start side by side
            thread.start()
        for thread in starting:
            thread.join()
        zk.start(timeout=30)
        wait_until(lambda: sorted(map(int, zk.get_children("/brokers/ids"))) == sorted(broker_ids),
                   "every broker registered")
        cluster = KbrokerCluster(brokers)
        wait_until(lambda: all(cluster.knows_everyone(b) for b in brokers.values()),
                   "every broker's Metadata names the controller and all the brokers")
        yield cluster
    finally:
        for broker in brokers.values():
            print(f"broker {broker.broker_id} log:\n{broker.log_tail(60)}")
            broker.stop(signal.SIGKILL)
        zk.stop()
        zk.close()
