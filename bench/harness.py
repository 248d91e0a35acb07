"""The contract between `python -m bench` and its suites, and the small helpers they share.

A suite is a module `bench/suites/<name>.py` (names starting with `_` are helpers, not suites)
with a `run(ctx: Context) -> list[Result]`. It may also set `TIME_BUDGET = (quick_s, full_s)`:
the harness stops a suite that overruns it (plus a grace period) and records the error.
Every figure is kbroker's value next to a peer's value measured in the same run (the mock
cluster, Apache Kafka, `--peer host:port`), so drift on a shared machine cancels out in the ratio.
Figures that are neither (a physical limit, a client's own ceiling) go in `Result.reference`.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata as package_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from bench.peers import KafkaPeer

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Context:
    quick: bool                 # --quick: tiny shapes, a smoke test that the harness works (< 2 min in all)
    work_dir: Path              # scratch space for broker data dirs; removed after the run
    peer: str | None = None     # --peer host:port: an external broker to compare with
    kafka: KafkaPeer | None = None          # the run's Apache Kafka (bench.peers.KafkaPeer); None: --no-kafka
    rounds: int = 3             # interleaved A B A B rounds; figures are medians over rounds
    event_loop: str = "auto"                # `kbroker serve --event-loop` for the brokers the suites start
    deadline: float = math.inf              # time.monotonic() by which the suite must be done
    verbose: bool = True                    # progress lines on stdout
    notes: list[str] = field(default_factory=list)  # what a reader of the results must know (skips, caveats)

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"  {message}", flush=True)


@dataclass
class Result:
    suite: str
    name: str                   # the shape measured, e.g. "produce 100 B acks=1 lz4 16 partitions"
    metric: str                 # e.g. "msgs/s", "p99 ms", "RSS MiB", "s"
    kbroker: float | None
    peer: float | None = None
    peer_name: str | None = None            # "librdkafka mock", "Apache Kafka <version>", or the --peer address
    higher_is_better: bool = True
    target: str | None = None               # e.g. ">= 1.0x peer", "<= 5 ms"; None when there is none
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    # Optional, machine-checkable form of `target`; `verdict` judges kbroker's figure by them.
    target_ratio: float | None = None       # kbroker / peer must reach this (or stay under it when lower is better)
    floor_ratio: float | None = None        # the least acceptable ratio, below the target
    target_value: float | None = None       # kbroker's own figure must reach this (or stay under it)
    reference: float | None = None          # a figure that is neither kbroker's nor a peer's (a physical limit)

    @property
    def ratio(self) -> float | None:
        """kbroker / peer, so > 1 means kbroker's number is larger."""
        if self.kbroker is None or not self.peer:
            return None
        return self.kbroker / self.peer

    @property
    def verdict(self) -> str | None:
        """"met", or "missed by ..." saying by how much; None when there is no checkable target."""
        if self.kbroker is None:
            return None if self.target_ratio is None and self.target_value is None else "not measured"
        if self.target_ratio is not None and self.ratio is not None:
            return _judge_ratio(self.ratio, self.target_ratio, self.floor_ratio, self.higher_is_better)
        if self.target_value is not None:
            return _judge_value(self.kbroker, self.target_value, self.higher_is_better, self.metric)
        return None

    def as_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out.update(ratio=self.ratio, verdict=self.verdict)
        return out


def _judge_ratio(ratio: float, target: float, floor: float | None, higher_is_better: bool) -> str:
    good = ratio >= target if higher_is_better else ratio <= target
    if good:
        return f"met ({ratio:.2f}x)"
    short = 100 * abs(ratio / target - 1)
    text = f"missed by {short:.0f}% ({ratio:.2f}x against {target:g}x"
    if floor is not None:
        above = ratio >= floor if higher_is_better else ratio <= floor
        text += f"; {'above' if above else 'BELOW'} the {floor:g}x floor"
    return text + ")"


def _judge_value(value: float, target: float, higher_is_better: bool, metric: str) -> str:
    unit = metric.split()[-1] if metric else ""
    good = value >= target if higher_is_better else value <= target
    if good:
        return f"met ({_plain(value)} {unit})"
    return f"missed by {_plain(abs(value - target))} {unit} ({_plain(value)} against {target:g})"


def _plain(value: float) -> str:
    """Three significant digits without exponents: 0.0123, 4.56, 78.9, 1,234."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


# --- small helpers the suites share -----------------------------------------------------------


def median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty sequence."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def rotated(items: Sequence[T], round_index: int) -> list[T]:
    """Round r starts with item r: A B, B A, ... so no target always runs first."""
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def interleave(targets: Sequence[T], rounds: int, measure: Callable[[T], R], key: Callable[[T], str] = str,
               ctx: Context | None = None) -> dict[str, list[R]]:
    """measure(target) for every target, `rounds` times, rotating the order each round (A B, B A, ...).

    Stops early (keeping what it has, at least one round) when the context's deadline passes."""
    figures: dict[str, list[R]] = {key(t): [] for t in targets}
    for round_index in range(rounds):
        if round_index and ctx is not None and ctx.time_left() <= 0:
            break
        for target in rotated(targets, round_index):
            figures[key(target)].append(measure(target))
    return figures


def rss_mib(pid: int) -> float:
    """VmRSS of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    with open("/proc/loadavg", encoding="ascii") as handle:
        return float(handle.read().split()[0])


def machine_facts() -> dict[str, Any]:
    """What a reader needs to compare a figure with their own machine."""
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_gib = None
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as meminfo:
        memory_gib = round(int(meminfo.readline().split()[1]) / 1024 ** 2)
    facts: dict[str, Any] = {"cpu_model": model, "logical_cpus": os.cpu_count(), "memory_gib": memory_gib,
                             "kernel": platform.release(), "python": platform.python_version()}
    for package in ("confluent-kafka", "uvloop", "matplotlib"):
        try:
            facts[package] = package_metadata.version(package)
        except package_metadata.PackageNotFoundError:
            facts[package] = None
    with contextlib.suppress(ImportError):
        import confluent_kafka

        facts["librdkafka"] = confluent_kafka.libversion()[0]
    return facts


def size_label(value_size: int) -> str:
    """100 B, 1 KiB, 10 KiB: how the suites name a value size."""
    return f"{value_size:,} B" if value_size < 1024 else f"{value_size // 1024} KiB"
