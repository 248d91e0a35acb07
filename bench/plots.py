"""PNG plots of a run with matplotlib (the `bench` extra): throughput against value size, latency
percentiles against load, memory against partitions. A plot is drawn only when this run has
data for it, so a partial run leaves the other plots as they were.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
KBROKER = "kbroker"
LIMIT_LABELS = {  # the physical limits (suite "limits") drawn as lines on the throughput plot
    "loopback TCP, one connection, send()": "loopback TCP, send()",
    "loopback TCP, one connection, sendfile() from the page cache": "loopback TCP, sendfile()",
    "disk sequential write, buffered (no fsync)": "disk write, buffered",
    "disk sequential write, fsync every 1 MiB": "disk write, fsync every 1 MiB",
}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_all(run: dict[str, Any], img_dir: Path) -> list[Path]:
    """Draw every plot this run has data for into img_dir; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    img_dir.mkdir(parents=True, exist_ok=True)
    suites = run["suites"]

    def results(name: str) -> list[dict[str, Any]]:
        return suites.get(name, {}).get("results", [])

    written = []
    if results("produce") or results("consume"):
        written.append(throughput(results("produce"), results("consume"), results("limits"),
                                  img_dir / "bench-throughput.png"))
    if results("latency"):
        written.append(latency(results("latency"), img_dir / "bench-latency.png"))
    memory_results = [r for r in results("scale") if "MiB" in r["metric"] and "partitions" in r.get("params", {})
                      and r.get("kbroker") is not None]
    if memory_results:
        written.append(memory(memory_results, img_dir / "bench-memory.png"))
    return written


def _colour(brokers: list[str], name: str) -> str:
    if name not in brokers:
        brokers.append(name)
    return COLOURS[brokers.index(name) % len(COLOURS)]


def _series_by_broker(results: list[dict[str, Any]], x_key: str, series_key) -> dict[tuple, list[tuple]]:
    """{(broker, series): [(x, y), ...]} with kbroker once (not once per peer)."""
    series: dict[tuple, set[tuple]] = defaultdict(set)
    for r in results:
        params = r.get("params", {})
        x = params.get(x_key)
        key = series_key(r)
        if x is None or key is None:
            continue
        if r.get("kbroker") is not None:
            series[(KBROKER, key)].add((x, r["kbroker"]))
        if r.get("peer") is not None:
            series[(r["peer_name"], key)].add((x, r["peer"]))
    return {k: sorted(v) for k, v in series.items()}


def throughput(produce: list[dict[str, Any]], consume: list[dict[str, Any]], limits: list[dict[str, Any]],
               path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    brokers: list[str] = []
    produce_acks = "1" if any(r["params"].get("acks") == "1" for r in produce) else None
    for axis, title, results in ((axes[0], "produce", produce), (axes[1], "consume", consume)):
        chosen = [r for r in results if r["metric"] == "msgs/s"
                  and (produce_acks is None or r["params"].get("acks", produce_acks) == produce_acks)]
        mb = [{**r, "kbroker": r["kbroker"] * r["params"]["value_size"] / 1e6,
               "peer": None if r.get("peer") is None else r["peer"] * r["params"]["value_size"] / 1e6}
              for r in chosen if r.get("kbroker") is not None]
        series = _series_by_broker(mb, "value_size", lambda r: (r["params"]["compression"], r["params"]["partitions"]))
        for (broker, (compression, partitions)), points in sorted(series.items()):
            xs, ys = zip(*points, strict=True)
            axis.plot(xs, ys, color=_colour(brokers, broker), linestyle="-" if partitions == 1 else "--",
                      marker="o" if compression == "none" else "^",
                      label=f"{broker}, {compression}, {partitions} part.")
        for limit in limits:
            label = LIMIT_LABELS.get(limit["name"])
            if label and limit.get("reference"):
                axis.axhline(limit["reference"], color="grey", linewidth=0.8, linestyle=":")
                axis.annotate(label, (100, limit["reference"]), fontsize=7, color="grey",
                              xytext=(2, 2), textcoords="offset points")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xticks([100, 1024, 10240], ["100 B", "1 KiB", "10 KiB"])
        axis.set_xlabel("value size")
        axis.set_title(title + (f" (acks={produce_acks})" if title == "produce" and produce_acks else ""))
        axis.grid(True, which="both", alpha=0.3)
        if series:
            axis.legend(fontsize=7)
    axes[0].set_ylabel("MB/s of values")
    figure.suptitle("confluent-kafka throughput: kbroker and peers (dotted: physical limits)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def latency(results: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    brokers: list[str] = []
    styles = {"p50": ":", "p99": "-", "p99.9": "--"}
    for axis, kind, title in ((axes[0], "ack", "produce-ack"), (axes[1], "e2e", "end-to-end")):
        chosen = [r for r in results if r["params"].get("kind") == kind]
        series = _series_by_broker(chosen, "rate",
                                   lambda r: (r["params"]["percentile"], r["params"].get("linger_ms", 0)))
        for (broker, (percentile, linger)), points in sorted(series.items()):
            xs, ys = zip(*points, strict=True)
            axis.plot(xs, ys, color=_colour(brokers, broker), linestyle=styles.get(percentile, "-"),
                      marker="o" if linger else "x", label=f"{broker} {percentile} linger.ms={linger}")
        if kind == "e2e":
            axis.axhline(5.0, color="red", linewidth=0.8, linestyle=":")
            axis.annotate("target p99 at 10k/s", (chosen[0]["params"]["rate"] if chosen else 1000, 5.0),
                          fontsize=7, color="red", xytext=(2, 2), textcoords="offset points")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("offered load, msgs/s (fixed schedule)")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        if series:
            axis.legend(fontsize=7)
    axes[0].set_ylabel("latency from scheduled send, ms")
    figure.suptitle("latency percentiles against load (acks=1, 100 B; o: linger.ms=1, x: linger.ms=0)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def memory(results: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.8))
    by_series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in results:
        label = re.sub(r"\d[\d,]*", "N", r["name"])
        by_series[label].append((r["params"]["partitions"], r["kbroker"]))
    for index, (label, points) in enumerate(sorted(by_series.items())):
        xs, ys = zip(*sorted(points), strict=True)
        axis.plot(xs, ys, marker="o", color=COLOURS[index % len(COLOURS)], label=f"kbroker: {label}")
    axis.set_xscale("log")
    axis.set_ylim(bottom=0)
    axis.set_xlabel("partitions")
    axis.set_ylabel("RSS, MiB")
    axis.set_title("kbroker resident memory against partitions")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
