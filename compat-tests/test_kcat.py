"""kcat (librdkafka's command-line client) against the broker under test."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = [pytest.mark.client("kcat"),
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt install kcat)")]


def _kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", "-b", bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout


@pytest.mark.scenario("Metadata and broker discovery")
def test_list_metadata_shows_the_topic(bootstrap, new_topic):
    assert f'topic "{new_topic}" with 3 partitions' in _kcat(bootstrap, "-L")


@pytest.mark.scenario("Consume from earliest")
def test_produce_then_consume_from_beginning(bootstrap, new_topic):
    _kcat(bootstrap, "-P", "-t", new_topic, "-p", "0", "-K", ":", stdin="a:1\nb:2\nc:3\n")
    out = _kcat(bootstrap, "-C", "-t", new_topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert out.splitlines() == ["a=1", "b=2", "c=3"]


@pytest.mark.scenario("Consume from explicit offset")  # -o -5: five before the log end offset
def test_consume_last_five(bootstrap, new_topic):
    # idempotent, so a retried batch cannot land after a later one (seen on a loaded Kafka 4.4: 10, 11, 0, 1, 2, ...)
    _kcat(bootstrap, "-P", "-X", "enable.idempotence=true", "-t", new_topic, "-p", "1",
          stdin="".join(f"{i}\n" for i in range(12)))
    out = _kcat(bootstrap, "-C", "-t", new_topic, "-p", "1", "-o", "-5", "-e")
    assert out.splitlines() == ["7", "8", "9", "10", "11"]
