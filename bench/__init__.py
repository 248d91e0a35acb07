"""Benchmarks: `python -m bench` runs the suites in bench/suites/; bench.wire_codecs and
bench.broker_throughput also run on their own with `python -m bench.<name>`."""
