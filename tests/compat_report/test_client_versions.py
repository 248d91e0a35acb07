"""The client versions in the matrix header, read from what is installed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "compat_matrix", Path(__file__).resolve().parents[2] / "compat-tests" / "matrix.py")
matrix = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(matrix)


def _package_json(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def test_kafkajs_reports_the_installed_version(tmp_path):
    _package_json(tmp_path / "package.json", {"dependencies": {"kafkajs": "^2.0.0"}})
    _package_json(tmp_path / "node_modules" / "kafkajs" / "package.json", {"version": "2.2.4"})
    assert matrix._kafkajs(tmp_path) == "2.2.4"


def test_kafkajs_declared_but_not_installed_says_so(tmp_path):
    _package_json(tmp_path / "package.json", {"dependencies": {"kafkajs": "2.2.4"}})
    assert matrix._kafkajs(tmp_path) == "2.2.4 (declared in compat-tests/node/package.json, not installed)"


def test_kafkajs_without_a_node_project_is_not_installed(tmp_path):
    assert matrix._kafkajs(tmp_path) == "not installed"


def test_python_clients_report_their_distribution_versions():
    import aiokafka

    assert matrix.client_versions(Path(__file__).parent)["aiokafka"] == aiokafka.__version__


def test_kafka_tools_report_the_4x_kafka_version_pinned_in_the_pom(tmp_path):
    pom = tmp_path / "pom.xml"
    pom.write_text('<project xmlns="http://maven.apache.org/POM/4.0.0"><properties>'
                   "<kafka39.version>3.9.2</kafka39.version><kafka4.version>4.4.0</kafka4.version>"
                   "</properties></project>")
    assert matrix._kafka_tools(pom) == "4.4.0"
    assert matrix._java_kafka_clients(pom) == "3.9.2, 4.4.0"
