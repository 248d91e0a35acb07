"""Target selection for the compatibility suite: a fresh kbroker by default, or any broker.

    pytest compat-tests                                  # starts kbroker in a subprocess
    pytest compat-tests --bootstrap host:port            # any running Kafka-compatible broker
    KBROKER_COMPAT_BOOTSTRAP=host:port pytest compat-tests
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from kbroker.testing import BrokerProcess


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bootstrap", default=os.environ.get("KBROKER_COMPAT_BOOTSTRAP"),
                     help="host:port of a running broker to test instead of a fresh kbroker")


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broker under test, shared by the whole session."""
    given = request.config.getoption("--bootstrap")
    if given:
        yield given
        return
    broker = BrokerProcess(tmp_path_factory.mktemp("kbroker-data")).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def topic_name() -> str:
    return f"compat-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_topic(bootstrap: str, topic_name: str):
    """A fresh 3-partition topic created through the AdminClient."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])[topic_name].result(15)
    return topic_name
