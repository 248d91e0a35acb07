"""Wire codecs: kbroker's generated codecs against kafka-python and kio (see bench/wire_codecs.py).

The codecs are the peers here: each case is timed for all three in one process, interleaved
round by round (40 rounds of about 120 ms; quick 5 of 20 ms), after checking that they produce
identical bytes and agree on decoded values. Figures are median CPU µs per operation.
`python -m bench.wire_codecs` runs the same measurement on its own and prints its own table.
"""

from __future__ import annotations

import random

from bench import wire_codecs
from bench.harness import Context, Result

SUITE = "wire"
TIME_BUDGET = (20, 300)


def run(ctx: Context) -> list[Result]:
    rounds, sample_seconds = (5, 0.02) if ctx.quick else (40, 0.12)
    rng = random.Random(wire_codecs.SEED)
    cases = [make(rng) for make in wire_codecs.CASES]  # builds the inputs and checks the codecs agree
    ctx.log(f"{len(cases)} cases x {rounds} rounds")
    wire_codecs.run(cases, rounds, sample_seconds)
    results: list[Result] = []
    for summary in map(wire_codecs.summarise, cases):
        figures = summary["results"]
        ours = figures[wire_codecs.OURS]["median_us"]
        name = f"{summary['key']}. {summary['title']}"
        for other in (wire_codecs.KAFKA_PYTHON, wire_codecs.KIO):
            results.append(Result(SUITE, name, "µs/op", ours, figures[other]["median_us"], other,
                                  higher_is_better=False, note=summary["note"],
                                  params={"rounds": rounds, "ours": figures[wire_codecs.OURS],
                                          "peer": figures[other]}))
        if wire_codecs.ZERO_COPY in figures:
            results.append(Result(SUITE, f"{summary['key']}. {wire_codecs.ZERO_COPY} (records deferred)", "µs/op",
                                  figures[wire_codecs.ZERO_COPY]["median_us"], higher_is_better=False,
                                  params={"rounds": rounds}))
    return results
