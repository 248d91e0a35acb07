"""Physical limits of this machine, printed beside the broker figures so they can be read against them.

1. Loopback TCP through one connection on 127.0.0.1: a sender thread writing 256 KiB
   chunks with send(), and once more with sendfile(2) from a file in the page cache (the
   path kbroker's fetch takes with the asyncio loop); the receiver reads into a buffer.
2. Sequential writes to a file in the work directory (the filesystem broker data lives
   on), 1 MiB at a time: buffered (no fsync: what a broker that leaves flushing to the
   kernel, as Kafka does by default, sees), fsync after every 1 MiB, and fsync after every
   4 KiB append (the ceiling on one-at-a-time durable acknowledgements).
3. The client's own ceiling: confluent-kafka produce() calls per second into a client that
   has no broker to talk to, per value size.
4. How steady the CPU is: one busy loop of fixed chunks of pure computation, counted per
   10 ms window, nothing else started. A window in which fewer than a third of the median
   count ran is slow; two or more slow windows in a row are a stall. On a virtual machine
   whose host takes its CPU away now and then, this shows stalls that no guest counter
   (steal time included) reports, and every latency tail measured on it carries them.

Each figure is the median of a few short repeats; every loop is bounded by time and bytes.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import Context, Result, median
from bench.load import client_produce_ceiling, value_pool

SUITE = "limits"
TIME_BUDGET = (40, 180)
CHUNK = 256 * 1024
MIB = 1024 * 1024


def run(ctx: Context) -> list[Result]:
    seconds, repeats = (0.25, 1) if ctx.quick else (1.0, 3)
    disk_cap = (64 if ctx.quick else 1024) * MIB
    sizes = (100,) if ctx.quick else (100, 1024, 10 * 1024)
    stall_seconds = 2.0 if ctx.quick else 20.0
    scratch = Path(ctx.work_dir) / "limits"
    scratch.mkdir(parents=True, exist_ok=True)

    def repeat(measure: Callable[[], float]) -> tuple[float, list[float]]:
        runs = [measure() for _ in range(repeats)]
        return median(runs), runs

    results: list[Result] = []

    def add(name: str, metric: str, measure: Callable[[], float], note: str = "", **params) -> None:
        ctx.log(f"{name} ...")
        value, runs = repeat(measure)
        results.append(Result(SUITE, name, metric, kbroker=None, reference=value, note=note,
                              params={"runs": runs, **params}))

    add("loopback TCP, one connection, send()", "MB/s", lambda: loopback_send(seconds) / 1e6)
    add("loopback TCP, one connection, sendfile() from the page cache", "MB/s",
        lambda: loopback_sendfile(seconds, scratch) / 1e6)
    add("disk sequential write, buffered (no fsync)", "MB/s",
        lambda: disk_write(scratch, seconds, disk_cap, MIB, fsync=False) / 1e6,
        note="page-cache speed: the kernel writes back later")
    add("disk sequential write, fsync every 1 MiB", "MB/s",
        lambda: disk_write(scratch, seconds, disk_cap, MIB, fsync=True) / 1e6)
    add("disk appends of 4 KiB, fsync after each", "fsyncs/s",
        lambda: disk_write(scratch, seconds, disk_cap, 4096, fsync=True) / 4096)
    ctx.log("CPU steadiness ...")
    results += [Result(SUITE, name, metric, kbroker=None, reference=value, params={"seconds": stall_seconds})
                for name, metric, value in cpu_stalls(stall_seconds)]
    for size in sizes:
        values = value_pool(size)
        add(f"client alone: confluent-kafka produce() calls, {size:,} B values, no broker", "msgs/s",
            lambda values=values: client_produce_ceiling(values, seconds), value_size=size)
    return results


def _connected_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    return sender, receiver


def _receive_all(receiver: socket.socket, send: Callable[[], None]) -> float:
    """Bytes per second the receiver drains while `send` runs in a thread (it closes its side when done)."""
    buffer = bytearray(MIB)
    received = 0
    with receiver:
        thread = threading.Thread(target=send, daemon=True)
        started = time.perf_counter()
        thread.start()
        while True:
            n = receiver.recv_into(buffer)
            if not n:
                break
            received += n
        elapsed = time.perf_counter() - started
        thread.join(5)
    return received / elapsed


def loopback_send(seconds: float) -> float:
    chunk = bytes(CHUNK)
    sender, receiver = _connected_pair()

    def send() -> None:
        deadline = time.perf_counter() + seconds
        with sender:
            while time.perf_counter() < deadline:
                sender.sendall(chunk)
            sender.shutdown(socket.SHUT_WR)

    return _receive_all(receiver, send)


def loopback_sendfile(seconds: float, scratch: Path) -> float:
    source = scratch / "sendfile-source"
    size = 32 * MIB
    if not source.exists() or source.stat().st_size != size:
        source.write_bytes(os.urandom(MIB) * 32)
    sender, receiver = _connected_pair()

    def send() -> None:
        deadline = time.perf_counter() + seconds
        with sender, open(source, "rb") as file:
            descriptor = file.fileno()
            while time.perf_counter() < deadline:
                offset = 0
                while offset < size and time.perf_counter() < deadline:
                    offset += os.sendfile(sender.fileno(), descriptor, offset, min(4 * MIB, size - offset))
            sender.shutdown(socket.SHUT_WR)

    return _receive_all(receiver, send)


def disk_write(scratch: Path, seconds: float, cap: int, block: int, fsync: bool) -> float:
    """Bytes per second appended to a new file in `block`-sized writes, within `seconds` and `cap` bytes."""
    path = scratch / "disk-write"
    data = os.urandom(block)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        started = time.perf_counter()
        deadline = started + seconds
        while written < cap and time.perf_counter() < deadline:
            written += os.write(descriptor, data)
            if fsync:
                os.fsync(descriptor)
        elapsed = time.perf_counter() - started
    finally:
        os.close(descriptor)
        path.unlink(missing_ok=True)
    return written / elapsed


WINDOW_S = 0.01
SLOW_SHARE = 3  # a window is slow below 1/3 of the median count


def _busy_chunk() -> None:
    total = 0
    for i in range(1000):
        total += i * i


def cpu_stalls(seconds: float) -> list[tuple[str, str, float]]:
    """(name, metric, value) of one busy loop's slow 10 ms windows and stalls over `seconds`."""
    windows = [0] * (int(seconds / WINDOW_S) + 2)
    started = time.perf_counter()
    deadline = started + seconds
    while (now := time.perf_counter()) < deadline:
        _busy_chunk()
        windows[int((now - started) / WINDOW_S)] += 1
    windows = windows[:int(seconds / WINDOW_S)]
    typical = median(windows)
    slow = [count * SLOW_SHARE < typical for count in windows]
    stalls, run = [], 0
    for is_slow in [*slow, False]:
        if is_slow:
            run += 1
            continue
        if run >= 2:
            stalls.append(run * WINDOW_S * 1000)
        run = 0
    return [("CPU steadiness: share of 10 ms windows below a third of the median speed", "%",
             100 * sum(slow) / len(slow)),
            ("CPU steadiness: stalls (20 ms or more below a third of the median speed) per minute", "stalls/min",
             len(stalls) * 60 / seconds),
            ("CPU steadiness: longest stall", "ms", max(stalls, default=0.0))]
