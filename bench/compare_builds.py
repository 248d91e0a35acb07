"""Broker CPU per produced record: this checkout against another revision, same client, interleaved.

    python -m bench.compare_builds --baseline 518669c [--rounds 7] [--seconds 2]

The baseline revision is checked out into a temporary git worktree; a `kbroker serve` runs from
each tree (same Python, same settings, data in a scratch directory). Round by round (A B, then
B A), confluent-kafka produces 100 B records for a fixed time to a fresh topic on each, and the
broker process's CPU seconds (user + system, /proc/<pid>/stat) over the window are divided by
the records acknowledged. CPU time, not throughput, so a busy machine moves the figures less;
the interleaving spreads what noise is left over both builds. Prints µs per record for each
shape, each build, and the median paired difference.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.load import produce_for, value_pool
from bench.peers import Broker, KbrokerBroker
from kbroker.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[1]
SHAPES = (("1", "none", 1), ("1", "none", 16), ("all", "none", 1), ("1", "lz4", 16))  # acks, compression, partitions
VALUE_SIZE = 100


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` checked out on its own, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="kbroker-baseline-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def measure(builds: dict[str, Broker], rounds: int, seconds: float) -> dict[tuple, dict[str, list[float]]]:
    """µs of broker CPU per record, per shape and build, one figure per round."""
    values = value_pool(VALUE_SIZE)
    figures: dict[tuple, dict[str, list[float]]] = {}
    for shape, round_index in itertools.product(SHAPES, range(rounds)):
        acks, compression, partitions = shape
        order = list(builds) if round_index % 2 == 0 else list(reversed(builds))
        for name in order:
            broker = builds[name]
            with broker.scratch_topic("cpu", partitions) as topic:
                run = produce_for(broker, topic, partitions, values, seconds, 256 << 20, acks, compression)
            figures.setdefault(shape, {}).setdefault(name, []).append(run.broker_cpu_per_million)
            print(f"  {name:>8} acks={acks} {compression} {partitions:>2}p round {round_index}: "
                  f"{run.broker_cpu_per_million:.3f} µs/record ({run.records} records)", flush=True)
    return figures


def report(figures: dict[tuple, dict[str, list[float]]], baseline: str) -> str:
    lines = ["| 100 B records | baseline µs/record | this tree µs/record | median paired difference |",
             "|---|---:|---:|---:|"]
    for (acks, compression, partitions), by_build in figures.items():
        before, after = by_build["baseline"], by_build["current"]
        paired = statistics.median(a - b for a, b in zip(after, before, strict=True))
        lines.append(f"| acks={acks}, {compression}, {partitions} partition(s) | {statistics.median(before):.3f} | "
                     f"{statistics.median(after):.3f} | {paired:+.3f} |")
    return f"Baseline {baseline}, {len(next(iter(figures.values()))['current'])} rounds:\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0, help="produce time per round and build")
    args = parser.parse_args(argv)
    with worktree(args.baseline) as tree, tempfile.TemporaryDirectory(prefix="kbroker-compare-") as scratch:
        processes = {"baseline": BrokerProcess(Path(scratch) / "baseline", source_dir=tree),
                     "current": BrokerProcess(Path(scratch) / "current", source_dir=REPO)}
        with contextlib.ExitStack() as stack:
            builds = {}
            for name, process in processes.items():
                stack.callback(process.stop)
                builds[name] = KbrokerBroker(process.start(), name)
            print(report(measure(builds, args.rounds, args.seconds), args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
