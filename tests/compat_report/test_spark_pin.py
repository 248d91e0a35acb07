"""Spark's Kafka connector is published per Spark release: pyspark and the connector Maven resolves must match."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM_NAMESPACE = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom_spark_version() -> str:
    root = ElementTree.parse(ROOT / "compat-tests" / "java" / "pom.xml").getroot()
    return root.find("m:properties/m:spark.version", POM_NAMESPACE).text


def _pyproject_pyspark_pins() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return [match[1] for requirement in extras["test"] + extras["spark"]
            if (match := re.fullmatch(r"pyspark==(\S+)", requirement))]


def test_every_pyspark_pin_equals_the_connector_version_in_the_pom():
    pins = _pyproject_pyspark_pins()
    assert len(pins) == 2  # the test extra (CI runs Spark) and the spark extra
    assert set(pins) == {_pom_spark_version()}


def test_the_installed_pyspark_is_the_pinned_one():
    assert importlib.metadata.version("pyspark") == _pom_spark_version()
