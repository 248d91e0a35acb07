"""`kbroker cluster`: a ZooKeeper-mode cluster of kbroker brokers on this machine, in one command, for development.

ZooKeeper is Java, so kbroker does not carry it: `--zookeeper HOST:PORT[/chroot]` names one already running, or
`--zookeeper-jars DIR` starts one from a directory of jars (a Kafka 3.x distribution's `libs/` holds ZooKeeper and
everything it needs). Each broker is a `kbroker serve` subprocess with broker.id 1..N on consecutive ports, its data
and log under `--data-dir/broker-<id>`. The bootstrap servers are printed once every broker is registered and a
controller is elected; SIGINT or SIGTERM stops the brokers (each asks the controller for a controlled shutdown
first) and then the ZooKeeper it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from kbroker.testing import free_port

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 90  # a controlled shutdown may retry (controlled.shutdown.max.retries x the request timeout)


class ClusterError(Exception):
    """The cluster could not start; the message says which part and where its log is."""


def start_zookeeper(jars: Path, workdir: Path) -> tuple[subprocess.Popen, str]:
    """A standalone ZooKeeper server on a free loopback port; (process, connect string)."""
    if not any(jars.glob("zookeeper-*.jar")):
        raise ClusterError(f"no zookeeper-*.jar in {jars} (give a Kafka distribution's libs/ directory)")
    port = free_port()
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    config = workdir / "zoo.cfg"
    config.write_text(f"dataDir={workdir / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
                      "maxClientCnxns=0\nadmin.enableServer=false\n")
    with open(workdir / "zookeeper.log", "ab") as log:
        process = subprocess.Popen(["java", "-Xmx256M", "-cp", f"{jars}/*",
                                    "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT)
    return process, f"127.0.0.1:{port}"


def internal_topic_defaults(brokers: int, overrides: list[str]) -> list[str]:
    """offsets.topic.replication.factor no higher than the cluster is large (unless given), as Kafka's
    quickstart configs set it, so a one- or two-broker cluster gets its __consumer_offsets."""
    if any(item.partition("=")[0].strip() == "offsets.topic.replication.factor" for item in overrides):
        return []
    return [f"offsets.topic.replication.factor={min(3, brokers)}"]


def start_broker(broker_id: int, port: int, zookeeper: str, workdir: Path, overrides: list[str],
                 log_level: str) -> subprocess.Popen:
    properties = [f"broker.id={broker_id}", f"zookeeper.connect={zookeeper}",
                  f"listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={workdir / 'data'}", *overrides]
    args = [sys.executable, "-m", "kbroker.cli", "--log-level", log_level, "serve"]
    for item in properties:
        args += ["--override", item]
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "kbroker.log", "ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def wait_until_formed(zookeeper: str, ports: list[int], processes: dict[str, subprocess.Popen]) -> None:
    """Every broker registered, a controller elected, and every broker's Metadata saying so (a broker answers
    with no brokers until the controller's first UpdateMetadata reaches it, and librdkafka clients that see
    that answer first wait a long time); or ClusterError naming what died or what is missing."""
    from kazoo.client import KazooClient

    count = len(ports)
    client = KazooClient(hosts=zookeeper)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            for name, process in processes.items():
                if process.poll() is not None:
                    raise ClusterError(f"{name} exited with {process.returncode}")
            with contextlib.suppress(Exception):
                if not client.connected:
                    client.start(timeout=5)
                registered = client.get_children("/brokers/ids") if client.exists("/brokers/ids") else []
                if len(registered) >= count and client.exists("/controller") and \
                        all(asyncio.run(_metadata_view(port)) == (True, count) for port in ports):
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"the cluster did not form within {START_TIMEOUT_S} s")
            time.sleep(0.2)
    finally:
        with contextlib.suppress(Exception):
            client.stop()
            client.close()


async def _metadata_view(port: int) -> tuple[bool, int]:
    """(whether it names a controller, how many brokers it lists) from one broker's Metadata."""
    from kbroker.cluster.broker_connection import BrokerConnection
    from wire import messages

    connection = BrokerConnection("127.0.0.1", port, "kbroker-cluster", timeout_s=5)
    try:
        answer = await connection.request(3, 12, messages.MetadataRequest(
            topics=[], allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
    finally:
        connection.close()
    return answer.controller_id >= 0, len(answer.brokers)


def stop(process: subprocess.Popen, timeout: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def _stop_requested() -> Iterator[threading.Event]:
    requested = threading.Event()
    previous = {s: signal.signal(s, lambda *_: requested.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield requested
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run(brokers: int, data_dir: Path, zookeeper: str | None, zookeeper_jars: Path | None, base_port: int,
        overrides: list[str], log_level: str) -> int:
    started_zookeeper: subprocess.Popen | None = None
    processes: dict[str, subprocess.Popen] = {}
    with _stop_requested() as requested:
        try:
            if zookeeper is None:
                if zookeeper_jars is None:
                    raise ClusterError("give --zookeeper HOST:PORT or --zookeeper-jars DIR")
                started_zookeeper, zookeeper = start_zookeeper(zookeeper_jars, data_dir / "zookeeper")
                processes["zookeeper"] = started_zookeeper
            ports = [base_port + i if base_port else free_port() for i in range(brokers)]
            settings = [*internal_topic_defaults(brokers, overrides), *overrides]
            for broker_id, port in enumerate(ports, start=1):
                processes[f"broker {broker_id}"] = start_broker(broker_id, port, zookeeper,
                                                                data_dir / f"broker-{broker_id}", settings, log_level)
            wait_until_formed(zookeeper, ports, processes)
            print(f"bootstrap.servers={','.join(f'127.0.0.1:{p}' for p in ports)}", flush=True)
            print(f"zookeeper.connect={zookeeper}", flush=True)
            while not requested.wait(0.5):
                for name, process in processes.items():
                    if process.poll() is not None:
                        raise ClusterError(f"{name} exited with {process.returncode}")
            return 0
        except ClusterError as error:
            print(f"kbroker cluster: {error}; logs under {data_dir}", file=sys.stderr)
            return 1
        finally:
            brokers_running = [p for name, p in processes.items() if name.startswith("broker")]
            for process in brokers_running:
                if process.poll() is None:
                    process.terminate()  # all at once: each moves its leadership away in parallel
            for process in brokers_running:
                stop(process, STOP_TIMEOUT_S)
            if started_zookeeper is not None:
                stop(started_zookeeper, 30)
