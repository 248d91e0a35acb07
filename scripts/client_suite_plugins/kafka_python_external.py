"""pytest plugin (`-p kafka_python_external`) that runs kafka-python's own integration suite, as its PyPI sdist
ships it, against a broker that is already running (scripts/client_suites.py starts it and sets KAFKA_URI).

The sdist leaves out two files the suite imports: `test/__init__.py` (so `test` would be the standard library's
regression-test package) and `test/service.py` (the process wrapper of their broker launcher). Instead of
adding files to their tree, this plugin registers `test` as a package over the sdist's `test/` directory and a
`test.service` module with the one class an external broker needs. Run pytest from the sdist's root.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

SUITE_ROOT = Path.cwd()

# Tests that start a broker of their own and have no external-broker mode (their SASL tests skip themselves
# when KAFKA_URI is set; the SSL ones do not): skipped, on every target alike.
OWN_BROKER_TESTS = {
    "test/integration/test_ssl_integration.py": "starts its own SSL broker from a Kafka distribution; "
                                                "the suite has no external-broker mode for SSL",
}


class ExternalService:
    """What the suite's KafkaFixture keeps as `child` for a broker it did not start: nothing to stop."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    def stop(self) -> None:
        """The broker belongs to whoever started it."""

    def dump_logs(self) -> None:
        """Its logs are the starter's (scripts/client_suites.py keeps them)."""


class SpawnedService:
    """Their launcher of broker subprocesses: never used here, every broker is external."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("this run points the suite at a running broker (KAFKA_URI); it starts none itself")


def _register_suite_package() -> None:
    package = types.ModuleType("test")
    package.__path__ = [str(SUITE_ROOT / "test")]
    service = types.ModuleType("test.service")
    service.ExternalService = ExternalService
    service.SpawnedService = SpawnedService
    package.service = service
    sys.modules["test"] = package
    sys.modules["test.service"] = service


_register_suite_package()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        reason = OWN_BROKER_TESTS.get(item.path.relative_to(SUITE_ROOT).as_posix())
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
