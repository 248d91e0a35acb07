"""Run the benchmark suites: `python -m bench [suite ...] [--quick] [--peer host:port] [--rounds N] [--out DIR]`.

Runs the named suites (default: all of bench/suites/*.py) one after another, each within its
time budget, and writes:

- the JSON results: bench/results/<UTC timestamp>.json, or <DIR>/<timestamp>.json with --out;
- the generated part of docs/performance.md (unless --no-docs);
- PNG plots to docs/img/ (with --no-docs: to <DIR>/img/), when matplotlib is installed.

--quick is a smoke test of the whole harness (all suites in a couple of minutes); its figures
are not results. Everything listens on 127.0.0.1. The peers kbroker is compared with are
librdkafka's mock cluster and Apache Kafka (`--kafka-version`, default 4; started by the harness
from Maven's jars when a JDK and the jars are available; `--no-kafka` leaves it out); `--peer`
adds any external broker as one more.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import plots, report
from bench.harness import Context, Result, load_average, machine_facts
from bench.peers import KafkaPeer, add_kafka_arguments
from bench.suites._common import exit_on_sigterm

REPO = Path(__file__).resolve().parent.parent
SUITES_DIR = Path(__file__).resolve().parent / "suites"
DOCS = REPO / "docs" / "performance.md"
ORDER = ["limits", "wire", "produce", "perftest", "consume", "latency", "scale", "recovery", "groups", "transactions",
         "cluster", "cluster_transactions", "metrics_overhead", "faults_overhead", "console_overhead"]
DEFAULT_BUDGET = (90, 1800)  # seconds (quick, full) for a suite that does not say
GRACE_S = 30  # past its budget a suite gets this long to wind down before it is interrupted


class SuiteTimeout(Exception):
    """A suite overran its time budget and was interrupted."""


def discover() -> list[str]:
    """Suite names in running order: the known order first, then any others alphabetically."""
    names = [p.stem for p in SUITES_DIR.glob("*.py") if not p.stem.startswith("_")]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


@contextlib.contextmanager
def watchdog(seconds: float, name: str) -> Iterator[None]:
    def expire(signum, frame):
        raise SuiteTimeout(f"suite {name} overran its budget by {GRACE_S} s and was interrupted")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha or 'unknown'}{' (with uncommitted changes)' if dirty else ''}"


def load_suite(name: str) -> tuple[ModuleType | None, str | None]:
    """(the suite's module, None), or (None, the error) when it does not import: the other suites still run."""
    try:
        return importlib.import_module(f"bench.suites.{name}"), None
    except Exception as failure:
        traceback.print_exc()
        return None, f"cannot import bench.suites.{name}: {type(failure).__name__}: {failure}"


def run_suite(module: ModuleType, name: str, args: argparse.Namespace, rounds: int, scratch: Path,
              kafka_peer: KafkaPeer | None) -> dict[str, Any]:
    budget = getattr(module, "TIME_BUDGET", DEFAULT_BUDGET)[0 if args.quick else 1]
    if kafka_peer is not None and getattr(module, "COMPARES_WITH_KAFKA", False):
        kafka_peer.get()  # started once, outside the suite's budget (a problem is noted by the suite)
    work_dir = scratch / name
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(quick=args.quick, work_dir=work_dir, peer=args.peer, kafka=kafka_peer, rounds=rounds,
                  event_loop=args.event_loop, deadline=time.monotonic() + budget)
    print(f"== {name} (budget {budget} s)", flush=True)
    load_before, started = load_average(), time.monotonic()
    results, error = [], None
    try:
        with watchdog(budget + GRACE_S, name):
            results = module.run(ctx)
    except Exception as failure:
        traceback.print_exc()
        error = f"{type(failure).__name__}: {failure}"
    seconds = time.monotonic() - started
    return {"seconds": round(seconds, 1), "budget_s": budget, "error": error, "notes": ctx.notes,
            "load_before": load_before, "load_after": load_average(), "results": [r.as_json() for r in results]}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", nargs="*", metavar="suite", help=f"suites to run (default: all of {discover()})")
    parser.add_argument("--quick", action="store_true", help="a smoke test: every suite tiny, minutes in all")
    parser.add_argument("--peer", metavar="HOST:PORT", help="one more external broker to compare with")
    add_kafka_arguments(parser)
    parser.add_argument("--rounds", type=int, help="interleaved rounds per figure (default 3; quick 1)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="write the JSON here instead of bench/results/")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/ alone (plots go to <DIR>/img)")
    parser.add_argument("--no-plots", action="store_true", help="draw no plots")
    parser.add_argument("--render", type=Path, metavar="RUN.json",
                        help="measure nothing: redraw the docs section and plots from a saved run")
    parser.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="auto",
                        help="`kbroker serve --event-loop` for the brokers under test")
    args = parser.parse_args(argv)
    unknown = [s for s in args.suites if s not in discover()]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; known: {discover()}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.render:
        return render(args.render, args)
    exit_on_sigterm()  # an interrupted run stops every broker it started (SIGTERM would otherwise end it at once)
    names = args.suites or discover()
    rounds = args.rounds or (1 if args.quick else 3)
    started = datetime.datetime.now(datetime.UTC)
    run: dict[str, Any] = {"command": shlex.join(["python", "-m", "bench", *argv]),
                           "started": started.strftime("%Y-%m-%d %H:%M UTC"),
                           "stamp": started.strftime("%Y%m%dT%H%M%SZ"), "quick": args.quick, "rounds": rounds,
                           "peer": args.peer, "event_loop": args.event_loop, "commit": git_commit(),
                           "machine": machine_facts(), "suites": {}}
    modules: dict[str, ModuleType | None] = {}
    clock = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-") as scratch, contextlib.ExitStack() as stack:
        kafka_peer, run["kafka"] = KafkaPeer.for_run(Path(scratch) / "kafka",
                                                     None if args.no_kafka else args.kafka_version)
        if kafka_peer is not None:
            stack.callback(kafka_peer.close)
        else:
            print(f"note: no Apache Kafka peer: {run['kafka']}", flush=True)
        for name in names:
            module, error = load_suite(name)
            modules[name] = module
            if module is None:
                run["suites"][name] = suite = {"seconds": 0.0, "error": error,
                                               "notes": [], "load_before": load_average(),
                                               "load_after": load_average(), "results": []}
            else:
                run["suites"][name] = suite = run_suite(module, name, args, rounds, Path(scratch), kafka_peer)
            print(report.text_table(suite["results"]))
            for note in suite["notes"]:
                print(f"note: {note}")
            print(f"-- {name}: {suite['seconds']} s{', FAILED: ' + suite['error'] if suite['error'] else ''}\n",
                  flush=True)
        if kafka_peer is not None:
            run["kafka"] = kafka_peer.describe()
    run["seconds"] = round(time.monotonic() - clock, 1)
    write_outputs(run, modules, args)
    failed = [name for name, suite in run["suites"].items() if suite["error"]]
    print(f"all suites: {run['seconds']} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def write_outputs(run: dict[str, Any], modules: dict[str, ModuleType | None], args: argparse.Namespace) -> None:
    out_dir = args.out or REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    img_dir = (out_dir / "img") if args.no_docs else DOCS.parent / "img"
    run["plots"] = [] if args.no_plots else draw_plots(run, img_dir)
    json_path = out_dir / f"{run['stamp']}.json"
    json_path.write_text(json.dumps(run, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {json_path}")
    if not args.no_docs:
        write_docs(run, modules, img_dir)


def draw_plots(run: dict[str, Any], img_dir: Path) -> list[str]:
    if not plots.available():
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots")
        return []
    drawn = [str(p) for p in plots.draw_all(run, img_dir)]
    for plot in drawn:
        print(f"wrote {plot}")
    return drawn


def write_docs(run: dict[str, Any], modules: dict[str, ModuleType | None], img_dir: Path) -> None:
    # a suite that failed without a figure keeps its previous block (which names its own date and commit)
    blocks = {name: report.suite_block(name, suite, run, getattr(modules.get(name), "__doc__", None))
              for name, suite in run["suites"].items() if suite["results"] or not suite["error"]}
    images = [name for name in report.IMAGES if (img_dir / f"bench-{name}.png").exists()]
    report.update_docs(DOCS, blocks, ORDER, images)
    print(f"wrote the generated part of {DOCS}")


def render(path: Path, args: argparse.Namespace) -> int:
    """Docs and plots from a saved run, with today's formatting and verdicts; nothing is measured."""
    run = json.loads(path.read_text(encoding="utf-8"))
    known = {f.name for f in dataclasses.fields(Result)}
    for suite in run["suites"].values():
        suite["results"] = [Result(**{k: v for k, v in r.items() if k in known}).as_json() for r in suite["results"]]
    img_dir = ((args.out or path.parent) / "img") if args.no_docs else DOCS.parent / "img"
    if not args.no_plots:
        draw_plots(run, img_dir)
    if not args.no_docs:
        write_docs(run, {name: load_suite(name)[0] for name in run["suites"]}, img_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
