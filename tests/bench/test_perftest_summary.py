"""How bench/suites/perftest.py reads kafka-producer-perf-test's output.

The text below is what ProducerPerformance (kafka-tools 4.4.0) printed for a 300,000-record run
against kbroker: progress lines every 5 s, then the summary, the only line with percentiles.
"""

from __future__ import annotations

import pytest

from bench.suites.perftest import parse_summary

OUTPUT = (
    "5217 records sent, 1043.4 records/sec (0.10 MB/sec), 326.2 ms avg latency, 3792.0 ms max latency.\n"
    "121058 records sent, 24177.8 records/sec (2.31 MB/sec), 4758.8 ms avg latency, 5407.0 ms max latency.\n"
    "300000 records sent, 16376.439762 records/sec (1.56 MB/sec), 4209.42 ms avg latency, 5757.00 ms max latency, "
    "4791 ms 50th, 5628 ms 95th, 5713 ms 99th, 5745 ms 99.9th.\n"
)


def test_the_summary_line_gives_rate_latencies_and_percentiles() -> None:
    assert parse_summary(OUTPUT) == {
        "records": 300_000, "records_per_s": 16376.439762, "mb_per_s": 1.56, "avg_ms": 4209.42,
        "max_ms": 5757.0, "p50_ms": 4791, "p95_ms": 5628, "p99_ms": 5713, "p999_ms": 5745}


def test_output_without_a_summary_is_an_error_not_a_figure() -> None:
    """A run that died after its progress lines must not be reported with the progress figures."""
    progress_only = OUTPUT.splitlines()[0]
    with pytest.raises(RuntimeError, match="no summary line"):
        parse_summary(progress_only)
