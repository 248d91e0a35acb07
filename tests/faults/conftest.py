"""The fault tests talk to a real in-process broker over real sockets (fault_wire.WireClient)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fault_wire import TOPIC, WireClient


@pytest.fixture
def broker(kafka_broker):
    """The `kafka_broker` fixture with a two-partition topic."""
    kafka_broker.broker.create_topic(TOPIC, 2)
    return kafka_broker


@pytest.fixture
def client(broker) -> Iterator[WireClient]:
    connection = WireClient(broker.bootstrap_servers)
    yield connection
    connection.close()
