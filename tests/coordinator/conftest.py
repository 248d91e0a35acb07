"""A broker without listeners for coordinator tests that call the handlers directly."""

from __future__ import annotations

import pytest

from kbroker.broker import Broker
from kbroker.config import build


@pytest.fixture
def broker(tmp_path):
    """A broker with a two-partition topic "t"; files tests override it where they need others."""
    b = Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))
    b.create_topic("t", 2)
    yield b
    b.close()
