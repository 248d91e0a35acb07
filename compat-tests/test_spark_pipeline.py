"""examples/spark_pipeline, the user-facing PySpark example, run with its own code against the broker under test:
JSON events in, counts per user and event-time window (watermarked, append mode) out through the Kafka sink."""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import spark_session

pytestmark = [pytest.mark.client("pyspark"), pytest.mark.xdist_group("spark")]  # one Spark JVM per run

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "spark_pipeline" / "pipeline.py"
MINUTE_MS = 60_000
WATERMARK_DELAY_MS = 30_000
QUERY_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def spark() -> Iterator:
    with spark_session.local_session("kbroker-pipeline") as session:
        yield session


@pytest.fixture(scope="module")
def pipeline(spark) -> ModuleType:
    """The example's module, imported from its file (it imports pyspark, so only once a session exists)."""
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def closed_window_counts(events: list[dict]) -> list[tuple[str, int, int]]:
    """(user, window start, clicks) of every one-minute window the watermark has passed, counted by hand."""
    watermark = max(event["time"] for event in events) - WATERMARK_DELAY_MS
    counts = Counter((event["user"], event["time"] - event["time"] % MINUTE_MS) for event in events)
    return sorted((user, start, clicks) for (user, start), clicks in counts.items() if start + MINUTE_MS <= watermark)


@pytest.mark.scenario("Spark pipeline: event-time windows with a watermark, kafka to kafka")
def test_the_pipeline_example_writes_each_closed_window_count_once_and_exactly(spark, pipeline, bootstrap, tmp_path):
    events_topic, results_topic = (f"compat-pipeline-{uuid.uuid4().hex[:8]}-{name}" for name in ("events", "counts"))
    this_minute = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
    events = pipeline.sample_events(this_minute - 10 * MINUTE_MS)
    pipeline.produce_events(bootstrap, events_topic, events)
    query = pipeline.start_job(spark, bootstrap, events_topic, results_topic, str(tmp_path / "checkpoint"),
                               {"availableNow": True})
    assert query.awaitTermination(QUERY_TIMEOUT_S), f"the pipeline did not finish within {QUERY_TIMEOUT_S} s"
    assert query.exception() is None, query.exception()
    results = pipeline.read_results(bootstrap, results_topic)
    assert sorted((r["user"], r["window_start"], r["clicks"]) for r in results) == closed_window_counts(events)
    assert len(closed_window_counts(events)) == 6  # minutes 0-2 of the sample; the last click's window stays open
