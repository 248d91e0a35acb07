"""The fault tests talk to a real in-process broker over real sockets (tests/broker/raw_client.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "broker"))  # raw_client

from fault_wire import TOPIC

from raw_client import RawClient


@pytest.fixture
def broker(kafka_broker):
    """The `kafka_broker` fixture with a two-partition topic."""
    kafka_broker.broker.create_topic(TOPIC, 2)
    return kafka_broker


@pytest.fixture
def client(broker) -> Iterator[RawClient]:
    connection = RawClient(broker.bootstrap_servers, client_id="fault-test")
    yield connection
    connection.close()
