"""A real ZooKeeper for the cluster tests: one server per xdist worker (a JVM is costly), and a fresh chroot
per test so tests never see each other's znodes."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.cluster.zk import ZkClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat-tests"))

from waiting import wait_for_zookeeper

import kafka_process


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_process.ZooKeeperProcess]:
    """The ZooKeeper server from the jars Kafka 3.9 depends on, on a free loopback port."""
    server = kafka_process.ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except kafka_process.KafkaUnavailable as error:
        pytest.fail(f"cannot start ZooKeeper: {error}", pytrace=False)
    wait_for_zookeeper(server.connect)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper(zookeeper_server: kafka_process.ZooKeeperProcess) -> str:
    """A `zookeeper.connect` string with a chroot of its own (not created yet: ZkClient creates it)."""
    return f"{zookeeper_server.connect}/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk(zookeeper: str) -> Iterator[ZkClient]:
    """A broker's ZooKeeper session on the test's own chroot, with Kafka's top-level paths created."""
    with ZkClient(zookeeper, session_timeout_ms=6000) as client:
        client.create_top_level_paths()
        yield client


@pytest.fixture
def second_session(zookeeper: str, zk: ZkClient) -> Iterator[ZkClient]:
    """Another broker's session on the same chroot."""
    with ZkClient(zookeeper, session_timeout_ms=6000) as client:
        yield client
