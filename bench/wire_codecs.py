"""Wire codec micro-benchmarks: kbroker's generated codecs against kafka-python and kio.

    python -m bench.wire_codecs [--quick] [--output results.json]

Why this shape: the three codecs run in one process, interleaved round by round
(ours, kafka-python, kio, ours, ...), and each figure is the median over rounds, so slow
drift on a shared machine (frequency scaling, a neighbour's build) hits all three alike
instead of whichever happened to run last. Before anything is timed, every case checks
that the three codecs do the same work: encoders must produce byte-identical output and
decoders must agree on every decoded value. A mismatch aborts the run. Times are process
CPU time, so the moments another job holds the CPU are not charged to whichever codec was
running.

The garbage collector stays on, as in a real broker: allocation-heavy decoders pay for
the collections they cause.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import io
import json
import os
import platform
import random
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata as package_metadata
from typing import Any

from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
from kafka.protocol.metadata.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest
from kio.schema.fetch.v12.response import FetchResponse as KioFetchResponse
from kio.schema.metadata.v12.request import MetadataRequest as KioMetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse as KioMetadataResponse
from kio.schema.produce.v9.request import ProduceRequest as KioProduceRequest
from kio.serial import entity_reader, entity_writer

from wire import messages
from wire.codegen import Message

OURS = "ours"
KAFKA_PYTHON = "kafka-python"
KIO = "kio"
ZERO_COPY = "ours, zero-copy prefix"
CODECS = (OURS, KAFKA_PYTHON, KIO)

SEED = 20240601
ZERO_UUID = uuid.UUID(int=0)


class BenchmarkMismatch(AssertionError):
    """The codecs disagree, so timing them would compare different work."""


@dataclass
class Case:
    """One operation, timed for every contender on identical input."""

    key: str
    title: str
    contenders: dict[str, Callable[[], object]]
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)   # label -> µs/op per round
    iterations: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Bridging object models: ours -> kafka-python (kio objects are made by decoding bytes)
# ---------------------------------------------------------------------------------------

def _operations_bitfield(value: int) -> set[int] | None:
    """kafka-python holds authorized-operation bitfields as sets of bit numbers, and INT32_MIN
    ("not requested") as None."""
    if value == -(2**31):
        return None
    return {bit for bit in range(32) if value >> bit & 1}


def _same(value: Any) -> Any:
    return value


# kafka-python names and represents a few fields differently: (our class, its name) ->
# (our name, conversion).
_KP_FIELDS: dict[tuple[str, str], tuple[str, Callable[[Any], Any]]] = {
    ("MetadataResponse", "authorized_operations"): ("cluster_authorized_operations", _operations_bitfield),
    ("MetadataResponseTopic", "authorized_operations"): ("topic_authorized_operations", _operations_bitfield),
}


def to_kafka_python(obj: Any, kp_class: type) -> Any:
    """Build the kafka-python object with the same field values as our `obj`.

    Constructed through its constructor, not by decoding: kafka-python objects that come
    out of `decode` cannot be encoded again (they lack the `_header` slot).
    """
    kwargs: dict[str, Any] = {}
    for name, spec in kp_class._struct.fields.items():
        ours, convert = _KP_FIELDS.get((type(obj).__name__, name), (name, _same))
        value = convert(getattr(obj, ours))
        if spec.tag is not None and isinstance(value, Message) and value == type(value)():
            # kafka-python writes a tagged struct whenever one is given, even if it holds only
            # defaults; Kafka (and we) leave those out. Its users leave such fields unset.
            continue
        nested = getattr(spec, "data_class", None)
        if nested is not None and value is not None:
            if isinstance(value, list):
                value = [to_kafka_python(item, nested) for item in value]
            else:
                value = to_kafka_python(value, nested)
        kwargs[name] = value
    return kp_class(**kwargs)


def kio_decode(entity: type, buf: bytes) -> Any:
    value, size = entity_reader(entity)(buf, 0)
    if size != len(buf):
        raise BenchmarkMismatch(f"kio read {size} of {len(buf)} bytes of {entity.__name__}")
    return value


def expect_equal(what: str, values: dict[str, object]) -> None:
    """Fail loudly unless every contender produced the same value."""
    reference_label, reference = next(iter(values.items()))
    for label, value in values.items():
        if value != reference:
            raise BenchmarkMismatch(f"{what}: {label} disagrees with {reference_label}")


# ---------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------

def case_produce_decode(rng: random.Random) -> Case:
    """a. The broker's hottest decode: one ProduceRequest carrying one 16 KiB batch."""
    P = messages.ProduceRequest
    request = P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        P.TopicProduceData(name="orders", partition_data=[
            P.PartitionProduceData(index=0, records=rng.randbytes(16 * 1024))])])
    buf = bytes(messages.encode(request, 9))

    kio_reader = entity_reader(KioProduceRequest)
    contenders: dict[str, Callable[[], object]] = {
        OURS: lambda: messages.decode("ProduceRequest", 9, buf),
        KAFKA_PYTHON: lambda: KpProduceRequest.decode(buf, version=9),
        KIO: lambda: kio_reader(buf, 0),
    }

    def summary(o: Any, timeout_ms: int) -> tuple:
        return (o.transactional_id, o.acks, timeout_ms,
                [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in o.topic_data])

    ours, end = messages.decode("ProduceRequest", 9, buf)
    kp = KpProduceRequest.decode(buf, version=9)
    kio = kio_decode(KioProduceRequest, buf)
    if end != len(buf):
        raise BenchmarkMismatch("ours did not consume the whole ProduceRequest")
    expect_equal("decoded ProduceRequest v9", {
        "input": summary(request, request.timeout_ms),
        OURS: summary(ours, ours.timeout_ms),
        KAFKA_PYTHON: summary(kp, kp.timeout_ms),
        KIO: summary(kio, int(kio.timeout / datetime.timedelta(milliseconds=1))),
    })
    return Case("a", "decode ProduceRequest v9, one 16 KiB batch", contenders,
                note="the records field comes back as a view (ours) or a bytes copy (kafka-python, kio)")


class _FileRange:
    """Stands in for a log-segment slice the network layer would sendfile(): sized, not bytes."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def _fetch_response(records: list[Any]) -> Any:
    F = messages.FetchResponse
    partitions = [
        F.PartitionData(partition_index=i, error_code=0, high_watermark=1_250_000 + 97 * i,
                        last_stable_offset=1_250_000 + 97 * i, log_start_offset=1_000 * i,
                        aborted_transactions=None, preferred_read_replica=-1, records=records[i])
        for i in range(len(records))
    ]
    return F(throttle_time_ms=0, error_code=0, session_id=1_073_741_823,
             responses=[F.FetchableTopicResponse(topic="orders", partitions=partitions)])


def _splice(prefix: bytes, regions: list[tuple[int, Any]], payloads: dict[int, bytes]) -> bytes:
    """Rebuild the full message from a zero-copy prefix and the payloads its regions stand for."""
    out = bytearray()
    start = 0
    for offset, value in regions:
        out += prefix[start:offset]
        out += payloads[id(value)]
        start = offset
    out += prefix[start:]
    return bytes(out)


def case_fetch_encode(rng: random.Random) -> Case:
    """b. The broker's hottest encode: a FetchResponse for 10 partitions, 1 KiB of records each."""
    payloads = [rng.randbytes(1024) for _ in range(10)]
    response = _fetch_response(payloads)
    ranges = [_FileRange(len(p)) for p in payloads]
    deferred = _fetch_response(ranges)
    kp = to_kafka_python(response, KpFetchResponse)
    expected = bytes(messages.encode(response, 12))
    kio = kio_decode(KioFetchResponse, expected)
    kio_writer = entity_writer(KioFetchResponse)

    def encode_kio() -> bytes:
        out = io.BytesIO()
        kio_writer(out, kio)
        return out.getvalue()

    def encode_zero_copy() -> bytearray:
        return messages.encode(deferred, 12, regions=[])

    contenders: dict[str, Callable[[], object]] = {
        OURS: lambda: messages.encode(response, 12),
        KAFKA_PYTHON: lambda: kp.encode(version=12),
        KIO: encode_kio,
        ZERO_COPY: encode_zero_copy,
    }

    regions: list[tuple[int, Any]] = []
    prefix = bytes(messages.encode(deferred, 12, regions=regions))
    if [value for _, value in regions] != ranges:
        raise BenchmarkMismatch("zero-copy encode did not defer exactly the 10 records fields")
    expect_equal("encoded FetchResponse v12", {
        OURS: expected,
        KAFKA_PYTHON: bytes(kp.encode(version=12)),
        KIO: encode_kio(),
        ZERO_COPY + " + spliced records": _splice(
            prefix, regions, {id(r): p for r, p in zip(ranges, payloads, strict=True)}),
    })
    decoded, _ = messages.decode("FetchResponse", 12, expected)
    expect_equal("FetchResponse v12 round trip", {
        "input": [bytes(p.records) for p in response.responses[0].partitions],
        OURS: [bytes(p.records) for p in decoded.responses[0].partitions],
    })
    return Case("b", "encode FetchResponse v12, 10 partitions x 1 KiB records", contenders,
                note=("records are passed as bytes to all three codecs and copied into the output; "
                      "the zero-copy line defers them through `regions` and writes only the "
                      f"{len(prefix)}-byte prefix"))


def _metadata_request() -> Any:
    M = messages.MetadataRequest
    return M(topics=[M.MetadataRequestTopic(topic_id=ZERO_UUID, name=f"topic-{i:03d}") for i in range(100)],
             allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def case_metadata_request_decode(rng: random.Random) -> Case:
    """c1. Clients send this on every refresh; many small strings and UUIDs."""
    request = _metadata_request()
    buf = bytes(messages.encode(request, 12))
    kio_reader = entity_reader(KioMetadataRequest)
    contenders: dict[str, Callable[[], object]] = {
        OURS: lambda: messages.decode("MetadataRequest", 12, buf),
        KAFKA_PYTHON: lambda: KpMetadataRequest.decode(buf, version=12),
        KIO: lambda: kio_reader(buf, 0),
    }

    def summary(o: Any) -> tuple:
        # kio reads the all-zero topic id as None; the others as the zero UUID.
        return (o.allow_auto_topic_creation, o.include_topic_authorized_operations,
                [(t.topic_id or ZERO_UUID, t.name) for t in o.topics])

    expect_equal("decoded MetadataRequest v12", {
        "input": summary(request),
        OURS: summary(messages.decode("MetadataRequest", 12, buf)[0]),
        KAFKA_PYTHON: summary(KpMetadataRequest.decode(buf, version=12)),
        KIO: summary(kio_decode(KioMetadataRequest, buf)),
    })
    return Case("c1", "decode MetadataRequest v12, 100 topics", contenders)


def case_metadata_response_encode(rng: random.Random) -> Case:
    """c2. The answer to c1: 100 topics with one partition each, one broker."""
    M = messages.MetadataResponse
    topics = [
        M.MetadataResponseTopic(
            error_code=0, name=f"topic-{i:03d}", topic_id=uuid.UUID(int=rng.getrandbits(128), version=4),
            is_internal=False, topic_authorized_operations=-2147483648,
            partitions=[M.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=1,
                                                    leader_epoch=0, replica_nodes=[1], isr_nodes=[1],
                                                    offline_replicas=[])])
        for i in range(100)
    ]
    response = M(throttle_time_ms=0,
                 brokers=[M.MetadataResponseBroker(node_id=1, host="broker-1.example.com", port=9092,
                                                   rack=None)],
                 cluster_id="kbroker-bench-cluster", controller_id=1, topics=topics)
    kp = to_kafka_python(response, KpMetadataResponse)
    expected = bytes(messages.encode(response, 12))
    kio = kio_decode(KioMetadataResponse, expected)
    kio_writer = entity_writer(KioMetadataResponse)

    def encode_kio() -> bytes:
        out = io.BytesIO()
        kio_writer(out, kio)
        return out.getvalue()

    contenders: dict[str, Callable[[], object]] = {
        OURS: lambda: messages.encode(response, 12),
        KAFKA_PYTHON: lambda: kp.encode(version=12),
        KIO: encode_kio,
    }
    expect_equal("encoded MetadataResponse v12", {
        OURS: expected,
        KAFKA_PYTHON: bytes(kp.encode(version=12)),
        KIO: encode_kio(),
    })
    decoded, _ = messages.decode("MetadataResponse", 12, expected)
    expect_equal("MetadataResponse v12 round trip", {
        "input": [(t.name, t.topic_id) for t in response.topics],
        OURS: [(t.name, t.topic_id) for t in decoded.topics],
    })
    return Case("c2", "encode MetadataResponse v12, 100 topics x 1 partition", contenders)


CASES = (case_produce_decode, case_fetch_encode, case_metadata_request_decode, case_metadata_response_encode)


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------

def _time(fn: Callable[[], object], iterations: int) -> float:
    """CPU seconds for `iterations` calls; the loop overhead (~20 ns) is negligible here.

    Process CPU time rather than wall time: on a shared machine the scheduler takes the CPU
    away for whole milliseconds at a time, and that wait is not the codec's cost.
    """
    start = time.process_time()
    for _ in range(iterations):
        fn()
    return time.process_time() - start


def calibrate(fn: Callable[[], object], sample_seconds: float) -> int:
    """Iterations that fill about `sample_seconds`, after warming the codec up."""
    iterations = 1
    while True:
        elapsed = _time(fn, iterations)
        if elapsed >= sample_seconds / 10:
            return max(1, round(iterations * sample_seconds / elapsed))
        iterations *= 4


def run(cases: list[Case], rounds: int, sample_seconds: float) -> None:
    """Interleave every contender of a case round by round; keep µs/op per round."""
    for case in cases:
        case.iterations = {label: calibrate(fn, sample_seconds) for label, fn in case.contenders.items()}
        case.samples = {label: [] for label in case.contenders}
        for _ in range(rounds):
            for label, fn in case.contenders.items():
                n = case.iterations[label]
                case.samples[label].append(_time(fn, n) / n * 1e6)


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------

def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarise(case: Case) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, samples in case.samples.items():
        q1, median, q3 = _quartiles(samples)
        results[label] = {
            "median_us": median, "min_us": min(samples), "max_us": max(samples),
            "p25_us": q1, "p75_us": q3, "rounds": len(samples),
            "iterations_per_round": case.iterations[label],
        }
    ours = results[OURS]["median_us"]
    ratios = {f"{label}/{OURS}": results[label]["median_us"] / ours for label in (KAFKA_PYTHON, KIO)}
    if ZERO_COPY in results:
        ratios[f"{OURS}/{ZERO_COPY}"] = ours / results[ZERO_COPY]["median_us"]
    return {"key": case.key, "title": case.title, "note": case.note, "results": results, "ratios": ratios}


def _us(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def markdown_table(summaries: list[dict[str, Any]]) -> str:
    lines = [
        "| Case | ours µs/op | kafka-python µs/op | kio µs/op | kafka-python / ours | kio / ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        r = s["results"]
        lines.append(
            f"| {s['key']}. {s['title']} | {_us(r[OURS]['median_us'])} | {_us(r[KAFKA_PYTHON]['median_us'])} "
            f"| {_us(r[KIO]['median_us'])} | {s['ratios'][f'{KAFKA_PYTHON}/{OURS}']:.2f}x "
            f"| {s['ratios'][f'{KIO}/{OURS}']:.2f}x |")
        if ZERO_COPY in r:
            lines.append(f"| {s['key']}. {ZERO_COPY} (records deferred via `regions`) "
                         f"| {_us(r[ZERO_COPY]['median_us'])} | — | — | — | — |")
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def kio_decodes_natively() -> bool:
    """kio's readers come from a compiled extension; its writers are Python. That changes what
    a decode comparison with kio means, so the report says so."""
    return getattr(sys.modules.get(entity_reader.__module__), "__file__", "").endswith((".so", ".pyd"))


def environment(argv: list[str], mode: str, rounds: int, sample_seconds: float) -> dict[str, Any]:
    return {
        "command": shlex.join(["python", "-m", "bench.wire_codecs", *argv]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "kafka_python": package_metadata.version("kafka-python"),
        "kio": package_metadata.version("kio"),
        "mode": mode, "rounds": rounds, "sample_seconds": sample_seconds,
        "gc_enabled": gc.isenabled(), "seed": SEED, "clock": "time.process_time",
        "kio_native_decoders": kio_decodes_natively(),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.wire_codecs", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="few short rounds (< 30 s): a smoke run, not a result")
    parser.add_argument("--output", metavar="PATH.json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    rounds, sample_seconds = (5, 0.02) if args.quick else (40, 0.12)

    env = environment(argv, "quick" if args.quick else "full", rounds, sample_seconds)
    print(f"command: {env['command']}")
    print(f"date:    {env['date']}")
    print(f"python:  {env['python']}")
    print(f"cpu:     {env['cpu']} ({env['logical_cpus']} logical CPUs)")
    print(f"codecs:  ours (kbroker wire, pure Python), kafka-python {env['kafka_python']} (pure Python), "
          f"kio {env['kio']} (decoders {'compiled' if env['kio_native_decoders'] else 'Python'}, "
          "encoders Python)")
    print(f"method:  {rounds} interleaved rounds of ~{sample_seconds * 1000:.0f} ms per codec; "
          "median CPU µs/op (process time); GC on")

    rng = random.Random(SEED)
    cases = [make(rng) for make in CASES]          # builds inputs and verifies equivalence
    print("checked: all three codecs produce byte-identical encodings and agree on decoded values")
    run(cases, rounds, sample_seconds)
    summaries = [summarise(case) for case in cases]

    print()
    print(markdown_table(summaries))
    print()
    for s in summaries:
        if s["note"]:
            print(f"{s['key']}: {s['note']}")
    spread = max((r["p75_us"] - r["p25_us"]) / r["median_us"]
                 for s in summaries for r in s["results"].values())
    print(f"largest interquartile spread across rounds: {spread:.1%} of the median")

    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"environment": env, "cases": summaries}, out, indent=2)
            out.write("\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
