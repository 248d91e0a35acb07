"""Turning a run into text: a console table per suite, and the generated part of docs/performance.md.

The generated part sits between `<!-- bench:begin -->` and `<!-- bench:end -->`, one block
per suite (`<!-- bench:suite NAME -->`). A run rewrites the blocks of the suites it ran and
keeps the others, so `python -m bench latency` does not erase the produce tables; every block
names the command, commit, date and machine that produced it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
SUITE_MARK = re.compile(r"^<!-- bench:suite (?P<name>[\w-]+) -->$", re.MULTILINE)
IMAGES = {"throughput": "Throughput against value size", "latency": "Latency percentiles against load",
          "memory": "Memory against partitions"}


def number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _ratio(result: dict[str, Any]) -> str:
    ratio = result.get("ratio")
    if ratio is None:
        return "—"
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.1f}x" if ratio >= 10 else f"{ratio:.2f}x"


# --- console ----------------------------------------------------------------------------------


def text_table(results: list[dict[str, Any]]) -> str:
    rows = [("shape", "metric", "kbroker", "peer", "ratio", "verdict / note")]
    for r in results:
        if r.get("reference") is not None and r.get("kbroker") is None:
            rows.append((r["name"], r["metric"], number(r["reference"]), "(limit)", "", r.get("note") or ""))
            continue
        peer = number(r.get("peer")) + (f" ({r['peer_name']})" if r.get("peer_name") else "")
        tail = "; ".join(x for x in (r.get("verdict"), r.get("note")) if x)
        rows.append((r["name"], r["metric"], number(r.get("kbroker")), peer, _ratio(r), tail))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --- markdown ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def comparison_table(results: list[dict[str, Any]]) -> list[str]:
    """One row per measure; for each peer its figure and kbroker / peer; then target and verdict."""
    peers: list[str] = []
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        rows.setdefault((r["name"], r["metric"]), []).append(r)
        if r.get("peer_name") and r["peer_name"] not in peers:
            peers.append(r["peer_name"])
    with_notes = any(r.get("note") for r in results)
    header = ["Measure", "Unit", "kbroker", *[x for p in peers for x in (p, f"kbroker / {p}")], "Target", "Verdict"]
    if with_notes:
        header.append("Note")
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (1 + 2 * len(peers)) + "---|---|"
             + ("---|" if with_notes else "")]
    for (name, metric), group in rows.items():
        by_peer = {r.get("peer_name"): r for r in group}
        cells = [_cell(name), _cell(metric), number(group[0].get("kbroker"))]
        for peer in peers:
            r = by_peer.get(peer)
            cells += [number(r.get("peer")), _ratio(r)] if r else ["—", "—"]
        targets = sorted({r["target"] for r in group if r.get("target")})
        # a verdict on kbroker's own figure (target_value) comes once per peer row: say it once
        verdicts = list(dict.fromkeys(
            (f"vs {r['peer_name']}: " if len(peers) > 1 and r.get("target_ratio") else "") + r["verdict"]
            for r in group if r.get("verdict")))
        verdict = "; ".join(f"**{v}**" if "missed" in v or "not measured" in v else v for v in verdicts)
        cells += [_cell(", ".join(targets)) or "", _cell(verdict)]
        if with_notes:
            cells.append(_cell("; ".join(sorted({r["note"] for r in group if r.get("note")}))))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def reference_table(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| Limit | Value | Unit | Note |", "|---|---:|---|---|"]
    for r in results:
        lines.append(f"| {_cell(r['name'])} | {number(r['reference'])} | {_cell(r['metric'])} | "
                     f"{_cell(r.get('note') or '')} |")
    return lines


def describe(module_doc: str | None) -> str:
    """The suite's docstring without its title line and usage lines: how the figures were made."""
    if not module_doc:
        return ""
    lines = module_doc.strip().splitlines()[1:]
    kept = [line for line in lines if not line.strip().startswith("python -m")]
    return "\n".join(kept).strip()


def provenance(run: dict[str, Any], suite: dict[str, Any]) -> str:
    machine = run["machine"]
    mode = "a quick run: a smoke test, not a result" if run["quick"] else f"{run['rounds']} rounds"
    peer = f"; external peer {run['peer']}" if run.get("peer") else ""
    peer += f"; {run['kafka']}" if run.get("kafka") else ""
    return (f"Measured {run['started']} at commit {run['commit']} with `{run['command']}` ({mode}{peer}; "
            f"{suite['seconds']:.0f} s). Machine: {machine['cpu_model']}, {machine['logical_cpus']} logical CPUs, "
            f"{machine.get('memory_gib')} GiB, Linux {machine['kernel']}, CPython {machine['python']}, "
            f"confluent-kafka {machine.get('confluent-kafka')} (librdkafka {machine.get('librdkafka')}). "
            f"Load average (1 min): {suite['load_before']:.2f} before, {suite['load_after']:.2f} after.")


def suite_block(name: str, suite: dict[str, Any], run: dict[str, Any], module_doc: str | None) -> str:
    lines = [f"<!-- bench:suite {name} -->", f"### {name}", ""]
    description = describe(module_doc)
    if description:
        lines += [description, ""]
    lines += [provenance(run, suite), ""]
    if suite.get("error"):
        lines += [f"**The suite failed:** `{_cell(suite['error'])}`", ""]
    results = suite["results"]
    compared = [r for r in results if not (r.get("reference") is not None and r.get("kbroker") is None)]
    limits = [r for r in results if r not in compared]
    if compared:
        lines += [*comparison_table(compared), ""]
    if limits:
        lines += [*reference_table(limits), ""]
    missed = [r for r in results if r.get("verdict") and ("missed" in r["verdict"] or "not measured" in r["verdict"])]
    if missed:
        lines.append("Targets missed:")
        lines += list(dict.fromkeys(  # a target on kbroker's own figure is judged once per peer row: list it once
            f"- {r['name']} ({r['metric']}{', vs ' + r['peer_name'] if r.get('target_ratio') else ''}): "
            f"{r['verdict']}" for r in missed))
        lines.append("")
    lines += [f"Note: {note}" for note in suite.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def header(images: list[str]) -> str:
    lines = [BEGIN, "## Results of `python -m bench` (generated)", "",
             "Everything from here to the `bench:end` marker is written by `python -m bench` "
             "(bench/__main__.py); edit the suites, not this text. A run rewrites the blocks of the "
             "suites it ran. Each block gives the command, commit, date, machine and load it came from. "
             "Ratios are kbroker / peer (librdkafka's mock, Apache Kafka) from the same run, brokers "
             "interleaved round by round (A B, B A, ...) so drift on a shared machine hits all alike. For "
             "latencies, seconds, µs/op and CPU per record lower is better, so there a ratio above 1 means "
             "kbroker is slower or costlier.", ""]
    for image in images:
        lines += [f"![{IMAGES.get(image, image)}](img/bench-{image}.png)", ""]
    return "\n".join(lines)


def split_blocks(text: str) -> dict[str, str]:
    """The suite blocks of a generated section, by suite name."""
    marks = list(SUITE_MARK.finditer(text))
    blocks = {}
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        blocks[mark["name"]] = text[mark.start():end].rstrip() + "\n"
    return blocks


def update_docs(path: Path, new_blocks: dict[str, str], order: list[str], images: list[str]) -> None:
    """Replace the blocks of the suites just run; keep the rest, hand-written text included."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        generated, after = rest.split(END, 1)
    else:
        before, generated, after = text.rstrip() + "\n\n", "", "\n"
    blocks = {**split_blocks(generated), **new_blocks}
    ranked = sorted(blocks, key=lambda n: (order.index(n) if n in order else len(order), n))
    body = "\n".join(blocks[name] for name in ranked)
    path.write_text(before + header(images) + "\n" + body + "\n" + END + after, encoding="utf-8")
