"""Benchmark suites run by `python -m bench`; each module has `run(ctx) -> list[Result]`."""
