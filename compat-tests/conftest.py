"""Target selection for the compatibility suite: a fresh kbroker by default, or any broker.

    pytest compat-tests                                  # starts kbroker in a subprocess
    pytest compat-tests --bootstrap host:port            # any running Kafka-compatible broker
    KBROKER_COMPAT_BOOTSTRAP=host:port pytest compat-tests
    pytest compat-tests --target kafka                   # Apache Kafka 4.x (KRaft), a JVM from Maven's jars
    pytest compat-tests --target kafka --kafka-version 3.9
    pytest compat-tests --target kafka-zk                # Apache Kafka 3.9 in ZooKeeper mode, with ZooKeeper
    pytest compat-tests --target kafka-container         # Apache Kafka (KRaft) in Docker, via testcontainers
    pytest compat-tests --matrix=compat-report.md        # also write the client-by-scenario matrix

The matrix itself (markers, outcomes, Markdown) lives in matrix.py.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import kbroker
from kbroker.testing import BrokerProcess

import kafka_process
import matrix
import maven_jars

TARGETS = ("kbroker", "kafka", "kafka-zk", "kafka-container")
TARGET_FIXTURES = {"bootstrap", "own_broker", "fresh_broker"}  # a test using one of these tests the target
# Confluent Platform 7.9 is Apache Kafka 3.9; testcontainers' KafkaContainer drives the cp-kafka
# image's start scripts, so the image must be a confluentinc/cp-kafka one (7.0 or later for KRaft).
DEFAULT_KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"
CONTAINER_START_TIMEOUT = 180


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bootstrap", default=os.environ.get("KBROKER_COMPAT_BOOTSTRAP"),
                     help="host:port of a running broker to test instead of a fresh kbroker")
    parser.addoption("--target", choices=TARGETS, default="kbroker",
                     help="broker to start for the session when --bootstrap is not given: a kbroker "
                          "subprocess (default), Apache Kafka as a JVM subprocess (kafka: KRaft; kafka-zk: "
                          "3.9 with a ZooKeeper), or Apache Kafka in Docker (kafka-container)")
    parser.addoption("--kafka-version", choices=sorted(kafka_process.VERSIONS), default="4",
                     help="Kafka line for --target kafka: 4 (the newest 4.x in compat-tests/java/pom.xml, "
                          "default) or 3.9; kafka-zk is always 3.9")
    parser.addoption("--kafka-image", default=DEFAULT_KAFKA_IMAGE,
                     help=f"image for --target kafka-container (default {DEFAULT_KAFKA_IMAGE})")
    matrix.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--bootstrap") and config.getoption("--target") != "kbroker":
        raise pytest.UsageError("--bootstrap and --target both name the broker: give one")
    report = matrix.MatrixReport(config, Path(__file__).parent, _describe_broker(config), matrix.report_path(config),
                                 _broker_label(config))
    config.pluginmanager.register(report, "compat-matrix")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Against a broker the suite did not start, a test that starts a kbroker of its own (instead of using
    `bootstrap` or `own_broker`) says nothing about that broker: it skips rather than fill its cell with
    kbroker's result."""
    if not (config.getoption("--bootstrap") or config.getoption("--target") != "kbroker"):
        return
    compat_dir = Path(__file__).parent.resolve()
    option = "--bootstrap" if config.getoption("--bootstrap") else f"--target {config.getoption('--target')}"
    skip = pytest.mark.skip(reason=f"{matrix.OWN_KBROKER}, not the broker that {option} names")
    for item in items:
        uses_target = TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if item.path.resolve().is_relative_to(compat_dir) and not uses_target:
            item.add_marker(skip)


def _broker_label(config: pytest.Config) -> str:
    """The broker's short name, heading its column in a side-by-side matrix."""
    target = config.getoption("--target")
    if config.getoption("--bootstrap"):
        return config.getoption("--bootstrap")
    if target in ("kafka", "kafka-zk"):
        version = maven_jars.version_of(kafka_process.VERSIONS[_kafka_version(config)], "kafka_2.13")
        return f"Kafka {version}" + (" (ZooKeeper)" if target == "kafka-zk" else "")
    return "Kafka (container)" if target == "kafka-container" else "kbroker"


def _describe_broker(config: pytest.Config) -> str:
    """The matrix header's broker line."""
    given = config.getoption("--bootstrap")
    if given:
        return f"`{given}` given with --bootstrap (test suite of kbroker {kbroker.__version__})"
    target = config.getoption("--target")
    if target in ("kafka", "kafka-zk"):
        version = _kafka_version(config)
        mode = "ZooKeeper mode, with a ZooKeeper" if target == "kafka-zk" else "KRaft combined mode"
        return f"Apache Kafka {maven_jars.version_of(kafka_process.VERSIONS[version], 'kafka_2.13')} ({mode}, one node)"
    if target == "kafka-container":
        return f"kafka-container `{config.getoption('--kafka-image')}` (Apache Kafka, KRaft, via testcontainers)"
    return f"fresh kbroker subprocess (kbroker {kbroker.__version__})"


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broker under test, shared by the whole session."""
    given = request.config.getoption("--bootstrap")
    if given:
        yield given
    elif request.config.getoption("--target") == "kafka-container":
        yield from _kafka_container(request.config.getoption("--kafka-image"))
    elif request.config.getoption("--target") in ("kafka", "kafka-zk"):
        yield from _kafka_jvm(request.config, tmp_path_factory.mktemp("kafka"))
    else:
        broker = BrokerProcess(tmp_path_factory.mktemp("kbroker-data")).start()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()


def _kafka_version(config: pytest.Config) -> str:
    return "3.9" if config.getoption("--target") == "kafka-zk" else config.getoption("--kafka-version")


def _kafka_jvm(config: pytest.Config, workdir: Path) -> Iterator[str]:
    """One Apache Kafka per test process (each xdist worker), reused by every test in it."""
    with contextlib.ExitStack() as stack:
        yield _start_broker(config, workdir, (), stack).bootstrap


def _start_broker(config: pytest.Config, workdir: Path, overrides: tuple[str, ...],
                  stack: contextlib.ExitStack) -> BrokerProcess | kafka_process.KafkaProcess:
    """A started broker of the kind under test, stopped by `stack`: kbroker, or Apache Kafka (with its own
    ZooKeeper for kafka-zk). `overrides` are Kafka property names ("key=value"), which kbroker shares."""
    target = config.getoption("--target")
    if target == "kbroker":
        broker = BrokerProcess(workdir, *overrides)
        stack.callback(broker.stop)
        return broker.start()
    zookeeper = None
    try:
        if target == "kafka-zk":
            zookeeper = kafka_process.ZooKeeperProcess(workdir)
            stack.callback(zookeeper.stop)
            zookeeper.start()
        properties = dict(override.split("=", 1) for override in overrides)
        kafka = kafka_process.KafkaProcess(workdir, _kafka_version(config), zookeeper and zookeeper.connect,
                                           properties)
        stack.callback(kafka.stop)
        return kafka.start()
    except kafka_process.KafkaUnavailable as error:
        pytest.fail(f"cannot start Apache Kafka: {error}", pytrace=False)


def _kafka_container(image: str) -> Iterator[str]:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers before the community split
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError:
            pytest.skip("testcontainers is not installed (pip install testcontainers, a `test` extra)")
    unreachable = _docker_unreachable()
    if unreachable:
        pytest.skip(f"Docker engine not reachable: {unreachable}")
    container = KafkaContainer(image).with_kraft()
    container.start(timeout=CONTAINER_START_TIMEOUT)
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()


def _docker_unreachable() -> str | None:
    """Why the Docker engine (DOCKER_HOST or the default socket) cannot be used, or None if it answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:  # any failure to reach the engine is a reason to skip, not a test failure
        return " ".join(str(error).split()) or type(error).__name__
    return None


@pytest.fixture
def topic_name() -> str:
    return f"compat-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_topic(bootstrap: str, topic_name: str):
    """A fresh 3-partition topic created through the AdminClient, once the broker's metadata shows it."""
    from settle import create_topic

    return create_topic(bootstrap, topic_name, 3)


def _broker_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    stack: contextlib.ExitStack):
    config = request.config
    if config.getoption("--bootstrap") or config.getoption("--target") == "kafka-container":
        option = "--bootstrap" if config.getoption("--bootstrap") else "--target kafka-container"
        pytest.skip(f"starts a broker of its own (with its own settings, or to restart it); {option} names one")

    def start(label: str, *overrides: str) -> BrokerProcess | kafka_process.KafkaProcess:
        return _start_broker(config, tmp_path_factory.mktemp(label), overrides, stack)

    return start


@pytest.fixture(scope="module")
def own_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """`own_broker(label, "key=value", ...)` starts a broker of the module's own, of the kind under test
    (kbroker, or Apache Kafka with --target kafka / kafka-zk), with broker property overrides; stopped with
    the module. It has `.bootstrap`, `.stop(signal)` and `.start()` (same port and data). Skips when the
    broker under test was given (--bootstrap, kafka-container), which the suite cannot start or restart."""
    with contextlib.ExitStack() as stack:
        yield _broker_factory(request, tmp_path_factory, stack)


@pytest.fixture
def fresh_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """As `own_broker`, for one test: its brokers stop when the test ends."""
    with contextlib.ExitStack() as stack:
        yield _broker_factory(request, tmp_path_factory, stack)


@pytest.fixture(scope="module")
def broker_without_auto_create(own_broker) -> str:
    """A broker of the module's own with auto.create.topics.enable=false (a broker setting,
    so it cannot be set on the broker under test)."""
    return own_broker("no-auto-create", "auto.create.topics.enable=false").bootstrap
