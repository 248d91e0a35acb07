"""Recovery: how long `kbroker serve` takes to come back with a lot of log, after a crash and after
a clean shutdown.

    python -m bench.suites.recovery [--quick] [--rounds N]

A fresh broker gets 10 GiB (quick: 50 MiB) in 4 partitions (quick: 2), written with
confluent-kafka in ~1 MB batches of 32 KiB random values (acks=1, no compression), the
fastest way through kbroker's produce path. When the disk has less than three times that
free, the size is scaled down and the run says so. Then:

1. kill -9, and the restart is timed from process start to the first Metadata answer. After a
   crash the loader re-validates (CRC and structure, batch by batch) every segment from the
   recovery point on: the segment holding it and everything later, the active segment always.
   Recovery points are flushed offsets: a segment is flushed when the next one is rolled
   (segment.bytes, 1 GiB by default), and kbroker writes `recovery-point-offset-checkpoint`
   every 60 s (Kafka's log.flush.offset.checkpoint.interval.ms) and at clean shutdown. So a
   write that took under a minute leaves no checkpoint at all and everything is rescanned; a
   longer one leaves the rolled segments flushed. The broker logs no rescan figure, so the
   suite computes it from the checkpoint and the segment files by the loader's rule. The
   crash is repeated each round: the restarted broker writes no checkpoint before it is killed
   again, so every round rescans the same bytes. (The rescanned files are still in the page
   cache: this is the CPU cost of recovery, not a cold disk's.)
2. SIGTERM (timed until the process exits), and the restart timed the same way; after a clean
   shutdown nothing is rescanned.

After every restart the high watermarks must equal what was acknowledged. The same start
with an empty data dir is given for comparison. No peer: the mock keeps nothing on disk.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import Context, Result, median
from bench.suites._common import (
    CLIENT_LOGGING,
    Deadline,
    create_topics,
    kbroker_process,
    run_alone,
    stop_cleanly,
    timed_start,
)
from kbroker.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offsets_checkpoint
from kbroker.log.manager import parse_partition_dir
from kbroker.testing import BrokerProcess

SUITE = "recovery"
TIME_BUDGET = (80, 1800)
GIB, MIB = 1 << 30, 1 << 20
VALUE_BYTES = 32 * 1024
DISK_FACTOR = 3              # free space wanted per byte written
WRITE_SHARE = 0.6            # of the suite's budget, at most, for writing the log


def _shape(quick: bool) -> dict:
    if quick:
        return {"bytes": 50 * MIB, "partitions": 2, "budget_s": TIME_BUDGET[0]}
    return {"bytes": 10 * GIB, "partitions": 4, "budget_s": TIME_BUDGET[1]}


def _size_label(size: int) -> str:
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / MIB:.0f} MiB"


def _fit_to_disk(ctx: Context, wanted: int) -> int:
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(ctx.work_dir).free
    if free >= DISK_FACTOR * wanted:
        return wanted
    scaled = free // DISK_FACTOR // MIB * MIB
    ctx.notes.append(f"recovery: {_size_label(free)} free, so {_size_label(scaled)} of log instead of "
                     f"{_size_label(wanted)}")
    return scaled


# --- writing the log ---------------------------------------------------------------------------


def write_log(bootstrap: str, topic: str, partitions: int, size: int,
              time_limit: float) -> tuple[dict[int, int], float]:
    """Produce about `size` bytes of values; (acknowledged records per partition, seconds).
    Stops early, keeping what was acknowledged, when `time_limit` runs out."""
    pool = os.urandom(MIB + VALUE_BYTES)
    acked: dict[int, int] = dict.fromkeys(range(partitions), 0)
    errors: list[str] = []

    def delivered(error, message) -> None:
        if error is None:
            acked[message.partition()] += 1
        elif len(errors) < 3:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "queue.buffering.max.kbytes": 256 * 1024,
                         "on_delivery": delivered, **CLIENT_LOGGING})
    deadline = Deadline(time_limit)
    started = time.monotonic()
    for sent in range(size // VALUE_BYTES):
        start = (sent * 4099) % MIB
        value = pool[start:start + VALUE_BYTES]
        while True:
            try:
                producer.produce(topic, value, partition=sent % partitions)
                break
            except BufferError:
                producer.poll(0.005)
                if deadline.expired():
                    break
        if deadline.expired():
            break
        if not sent % 256:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("records still unacknowledged a minute after the last one was sent")
    if errors:
        raise RuntimeError(f"delivery failed: {errors}")
    return acked, time.monotonic() - started


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"recovery-{uuid.uuid4().hex[:6]}",
                         **CLIENT_LOGGING})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


# --- what a crash leaves to rescan ---------------------------------------------------------------


def bytes_to_rescan(log_dir: Path) -> tuple[int, int, bool]:
    """(bytes the loader re-validates after a crash, bytes of log in all, whether a checkpoint
    exists), by kbroker.log.loader's rule: a segment is recovered when it is the last one, or
    when the next segment starts past the recovery point (0 when the checkpoint lacks it)."""
    checkpoint = log_dir / RECOVERY_POINT_CHECKPOINT
    recovery_points = read_offsets_checkpoint(checkpoint)
    rescan = total = 0
    for child in log_dir.iterdir():
        tp = parse_partition_dir(child.name) if child.is_dir() else None
        if tp is None:
            continue
        segments = sorted((int(f.stem), f.stat().st_size) for f in child.glob("*.log"))
        point = recovery_points.get(tp, 0)
        for i, (_, size) in enumerate(segments):
            total += size
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            if following is None or following > point:
                rescan += size
    return rescan, total, checkpoint.exists()


# --- the suite ------------------------------------------------------------------------------------


def _empty_start(ctx: Context) -> float:
    empty = kbroker_process(ctx, "recovery-empty")
    try:
        return timed_start(empty)
    finally:
        empty.stop()
        shutil.rmtree(empty.data_dir, ignore_errors=True)


def _restart(broker: BrokerProcess, sig: int, deadline: Deadline) -> tuple[float, float]:
    """Stop with `sig`; (seconds until the process exited, seconds from the new start to Metadata)."""
    if sig == signal.SIGTERM:
        stopped_s = stop_cleanly(broker, timeout=max(60.0, deadline.left()))
    else:
        stopping = time.monotonic()
        broker.stop(sig)
        stopped_s = time.monotonic() - stopping
    return stopped_s, timed_start(broker, timeout=max(60.0, deadline.left()))


def _check(broker: BrokerProcess, topic: str, acked: dict[int, int], when: str) -> None:
    watermarks = _high_watermarks(broker.bootstrap, topic, len(acked))
    if watermarks != acked:
        raise RuntimeError(f"after {when} the high watermarks are {watermarks}, {acked} were acknowledged")


def run(ctx: Context) -> list[Result]:
    shape = _shape(ctx.quick)
    deadline = Deadline.for_suite(ctx, shape["budget_s"])
    size = _fit_to_disk(ctx, shape["bytes"])
    if size < 10 * MIB:
        return [Result(SUITE, "restart after kill -9", "s", None, note="not run: too little free disk")]
    partitions = shape["partitions"]
    topic = f"recovery-{uuid.uuid4().hex[:6]}"
    broker = kbroker_process(ctx, "recovery")
    crashes: list[float] = []
    cleans: list[tuple[float, float]] = []
    baselines: list[float] = []
    try:
        timed_start(broker)
        create_topics(broker.bootstrap, {topic: partitions})
        ctx.log(f"writing {_size_label(size)}")
        acked, write_s = write_log(broker.bootstrap, topic, partitions, size, deadline.left() * WRITE_SHARE)
        written = sum(acked.values()) * VALUE_BYTES
        rescan, on_disk, checkpointed = bytes_to_rescan(broker.data_dir)
        for round_index in range(ctx.rounds):
            deadline.check("restarts after kill -9")
            ctx.log(f"kill -9, round {round_index + 1}")
            baselines.append(_empty_start(ctx))
            crashes.append(_restart(broker, signal.SIGKILL, deadline)[1])
            _check(broker, topic, acked, "kill -9")
        for round_index in range(ctx.rounds):
            deadline.check("restarts after SIGTERM")
            ctx.log(f"SIGTERM, round {round_index + 1}")
            cleans.append(_restart(broker, signal.SIGTERM, deadline))
            _check(broker, topic, acked, "a clean shutdown")
    finally:
        broker.stop()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    label = f"{_size_label(written)} in {partitions} partitions"
    params = {"log_bytes": on_disk, "partitions": partitions, "value_bytes": VALUE_BYTES, "rounds": ctx.rounds,
              "segment.bytes": "1 GiB (default)"}
    checkpoint_note = ("a recovery-point checkpoint was written during the write" if checkpointed
                       else "no recovery-point checkpoint yet (the write took under a minute): everything is rescanned")
    crash_s, baseline = median(crashes), median(baselines)
    scan_rate = rescan / MIB / (crash_s - baseline) if crash_s and baseline and crash_s > baseline else None
    return [
        Result(SUITE, f"restart after kill -9, {label}", "s", crash_s, higher_is_better=False, params=params,
               note=f"{rescan / MIB:,.0f} MiB rescanned ({checkpoint_note})"
                    + (f"; an empty broker starts in {baseline:.2f} s, so ~{scan_rate:,.0f} MiB/s rescanned"
                       if scan_rate else "")),
        Result(SUITE, f"log rescanned after kill -9, {label}", "MiB", rescan / MIB, higher_is_better=False,
               params=params, note="computed from the checkpoint and segment files by the loader's rule"),
        Result(SUITE, f"restart after a clean shutdown, {label}", "s", median([c[1] for c in cleans]),
               higher_is_better=False, params=params,
               note=f"nothing rescanned; an empty broker starts in {baseline:.2f} s"),
        Result(SUITE, f"clean shutdown (SIGTERM to exit), {label}", "s", median([c[0] for c in cleans]),
               higher_is_better=False, params=params, note="flush, checkpoints, clean-shutdown marker"),
        Result(SUITE, f"writing the log, {partitions} partitions, 32 KiB values", "MB/s", written / 1e6 / write_s,
               params=params, note=f"{write_s:.1f} s for {_size_label(written)}"),
    ]


if __name__ == "__main__":
    run_alone(run, __doc__.splitlines()[0], TIME_BUDGET)
