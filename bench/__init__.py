"""Benchmarks: each module is runnable with `python -m bench.<name>` and prints what it measured."""
