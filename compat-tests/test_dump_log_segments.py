"""Kafka's DumpLogSegments (kafka-dump-log.sh, from Kafka 4.4.0's tools) over the files kbroker wrote: the
byte-for-byte proof that kbroker keeps Kafka's storage format.

A kbroker of this module's own (it needs the data directory) takes records from confluent-kafka in every codec,
with keys and headers, an idempotent producer (so a .snapshot holds its state), a compacted topic its cleaner
has rewritten, and committed offsets; it is stopped cleanly, and Kafka's tool reads every .log, .index,
.timeindex and .snapshot file: each batch valid and at the right offsets, every index entry pointing at the
right batch, the producer state, the offset commits and the transaction coordinator's state decoded.

The same files (and hand-built ones holding what a healthy broker rarely writes) are then dumped by
`kbroker dump-log` with the same options: its output must be Kafka's tool's, byte for byte.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kafka_tools
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.log.offset_index import OffsetIndex
from kbroker.log.time_index import TimeIndex
from kbroker.log.transaction_index import AbortedTxn, TransactionIndex
from kbroker.testing import BrokerProcess
from wire import messages
from wire.records import LOG_APPEND_TIME, Record, build_batch, build_end_txn_batch

import kafka_process
import settle

pytestmark = [pytest.mark.client("kafka-tools"),
              pytest.mark.scenario("Storage format: DumpLogSegments over kbroker's files")]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # partition i of TOPIC is written with CODECS[i]
TOPIC = "codecs"
COMPACTED = "compacted"
GROUP = "dump-group"
TRANSACTIONAL_ID, TRANSACTIONAL_TOPIC = "dump-txn", "transactional"
ABORTED_ID = "dump-aborted"
RECORDS = 400  # per codec, in several batches
KEYS, ROUNDS = 10, 30  # the compacted topic: every key written ROUNDS times
TIMEOUT = 30
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*compresscodec: (\w+) .*isvalid: (\w+)",
                   re.MULTILINE)
RECORD = re.compile(r"^\| offset: (\d+) .*headerKeys: \[(.*?)\] key: (\S*) payload: (.*)$", re.MULTILINE)
PROBLEMS = ("mismatch", "Mismatch", "out of order", "Non-consecutive", "corrupt", "Exception", "isvalid: false")


def value(codec: str, index: int) -> str:
    return f"{codec}-value-{index}-" + "x" * 40


def produce_codecs(bootstrap: str) -> None:
    for partition, codec in enumerate(CODECS):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                             "enable.idempotence": True, "batch.num.messages": 50})
        for index in range(RECORDS):
            producer.produce(TOPIC, key=f"key-{index}", value=value(codec, index), partition=partition,
                             headers=[("codec", codec.encode()), ("index", str(index).encode())])
        assert producer.flush(TIMEOUT) == 0


def produce_compacted(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for round_ in range(ROUNDS):
        for key in range(KEYS):
            producer.produce(COMPACTED, key=f"c{key}", value=f"round-{round_}-" + "y" * 100)
        producer.flush(TIMEOUT)


def commit_offsets(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, partition, 100 + partition) for partition in range(5)],
                        asynchronous=False)
    finally:
        consumer.close()


def transaction(bootstrap: str, transactional_id: str, value: bytes, commit: bool) -> None:
    """One transaction of `transactional_id`, committed (__transaction_state holds its state) or aborted (the
    transactional partition's .txnindex holds it)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(TRANSACTIONAL_TOPIC, value, partition=0)
    if commit:
        producer.commit_transaction(TIMEOUT)
    else:
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)


def compacted_count(bootstrap: str) -> int:
    """Records a consumer reads from the compacted topic (fewer than written once the cleaner has run)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "counter", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(COMPACTED, 0, 0)])
    count = 0
    try:
        while (message := consumer.poll(TIMEOUT)) is not None and not message.error():
            count += 1
    finally:
        consumer.close()
    return count


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """kbroker's data directory after the workload above and a clean shutdown."""
    data = tmp_path_factory.mktemp("dump-log")
    broker = BrokerProcess(data, "log.cleaner.backoff.ms=100").start()
    try:
        settle.create_topic(broker.bootstrap, TOPIC, len(CODECS))
        settle.create_topic(broker.bootstrap, COMPACTED, 1, **{"cleanup.policy": "compact", "segment.bytes": "2048",
                                                               "min.cleanable.dirty.ratio": "0.01"})
        produce_codecs(broker.bootstrap)
        produce_compacted(broker.bootstrap)
        commit_offsets(broker.bootstrap)
        settle.create_topic(broker.bootstrap, TRANSACTIONAL_TOPIC, 1)
        transaction(broker.bootstrap, TRANSACTIONAL_ID, b"in-a-transaction", commit=True)
        transaction(broker.bootstrap, ABORTED_ID, b"aborted", commit=False)  # its own id
        cleaned = settle.eventually(lambda: compacted_count(broker.bootstrap), lambda count: count < KEYS * ROUNDS)
        assert cleaned < KEYS * ROUNDS, "the log cleaner never compacted the topic"
    finally:
        assert broker.stop() == 0
    yield data


def dump(*files: Path, options: tuple[str, ...] = ()) -> str:
    """DumpLogSegments over `files` (one JVM); fails on any problem the tool reports."""
    output = kafka_tools.run("DumpLogSegments", "--files", ",".join(map(str, files)), *options)
    assert not [problem for problem in PROBLEMS if problem in output], output[-3000:]
    return output


def segment_files(data_dir: Path, partition: str, suffix: str) -> list[Path]:
    found = sorted((data_dir / partition).glob(f"*{suffix}"))
    assert found, f"no {suffix} file in {partition}"
    return found


def test_every_batch_of_every_codec_reads_back_with_its_offsets(data_dir: Path) -> None:
    """--deep-iteration --print-data-log: every batch valid, in its codec, offsets 0..N-1 without a gap, and
    each record's key, headers and value as produced."""
    for partition, codec in enumerate(CODECS):
        output = dump(*segment_files(data_dir, f"{TOPIC}-{partition}", ".log"),
                      options=("--deep-iteration", "--print-data-log"))
        batches = BATCH.findall(output)
        assert len(batches) > 1, f"{codec}: one batch only, nothing to check between batches"
        assert {(found_codec, valid) for *_, found_codec, valid in batches} == {(codec, "true")}
        assert batches[0][0] == "0"
        assert sum(int(count) for _, _, count, *_ in batches) == RECORDS
        for (base, last, count, *_), following in zip(batches, [*batches[1:], None], strict=True):
            assert int(last) - int(base) + 1 == int(count)
            assert following is None or int(following[0]) == int(last) + 1
        records = RECORD.findall(output)
        assert records == [(str(index), "codec,index", f"key-{index}", value(codec, index))
                           for index in range(RECORDS)]


def test_offset_and_time_indexes_pass_kafkas_checks(data_dir: Path) -> None:
    """--index-sanity-check and --verify-index-only over every .index and .timeindex kbroker wrote: every
    entry points at the batch it names, timestamps in order."""
    partitions = [f"{TOPIC}-{partition}" for partition in range(len(CODECS))] + [f"{COMPACTED}-0"]
    indexes = [file for partition in partitions for suffix in (".index", ".timeindex")
               for file in segment_files(data_dir, partition, suffix)]
    sane = dump(*indexes, options=("--index-sanity-check",))
    assert sane.count("passed sanity check") + sane.count(" is empty.") == len(indexes), sane
    assert sane.count("passed sanity check") >= len(CODECS), sane  # a check ran, not only empty files
    dump(*indexes, options=("--verify-index-only",))
    entries = re.findall(r"^offset: (\d+) position: (\d+)$", dump(*segment_files(data_dir, f"{TOPIC}-0", ".index")),
                         re.MULTILINE)
    assert entries, "the offset index of the uncompressed partition is empty"


def test_producer_state_snapshot_holds_the_idempotent_producer(data_dir: Path) -> None:
    """Each partition's .snapshot (written at shutdown) names one producer whose last sequence and offset are
    those of its last record."""
    for partition in range(len(CODECS)):
        output = dump(*segment_files(data_dir, f"{TOPIC}-{partition}", ".snapshot"))
        states = re.findall(r"producerId: (\d+) producerEpoch: (\d+) .*lastSequence: (\d+) lastOffset: (\d+)", output)
        assert [(sequence, offset) for _, _, sequence, offset in states] == [(str(RECORDS - 1), str(RECORDS - 1))]


def test_compacted_segments_keep_the_latest_value_of_every_key(data_dir: Path) -> None:
    """Over all segments of the compacted topic: offsets strictly increase, fewer records than written, and
    the last record of each key is its latest value."""
    output = dump(*segment_files(data_dir, f"{COMPACTED}-0", ".log"), options=("--deep-iteration", "--print-data-log"))
    records = [(int(offset), key, payload) for offset, _, key, payload in RECORD.findall(output)]
    offsets = [offset for offset, *_ in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == KEYS * ROUNDS - 1
    assert len(records) < KEYS * ROUNDS
    latest = {key: payload for _, key, payload in records}
    assert latest == {f"c{key}": f"round-{ROUNDS - 1}-" + "y" * 100 for key in range(KEYS)}


def test_committed_offsets_decode_with_kafkas_offsets_decoder(data_dir: Path) -> None:
    """--offsets-decoder reads kbroker's __consumer_offsets records as Kafka's own: the group's commits."""
    logs = [log for log in sorted(data_dir.glob("__consumer_offsets-*/*.log")) if log.stat().st_size]
    output = dump(*logs, options=("--offsets-decoder",))
    commits = {}
    for key, payload in re.findall(r" key: (\{.*?\}) payload: (\{.*\})$", output, re.MULTILINE):
        key_data = json.loads(key)["data"]
        if key_data.get("group") == GROUP and "topic" in key_data:
            commits[key_data["partition"]] = json.loads(payload)["data"]["offset"]
    assert commits == {partition: 100 + partition for partition in range(len(CODECS))}


def test_transaction_state_decodes_with_kafkas_transaction_log_decoder(data_dir: Path) -> None:
    """--transaction-log-decoder reads kbroker's __transaction_state records as Kafka's own: the transactional id
    through Empty, Ongoing with its partition, PrepareCommit and CompleteCommit."""
    logs = [log for log in sorted(data_dir.glob("__transaction_state-*/*.log")) if log.stat().st_size]
    output = dump(*logs, options=("--transaction-log-decoder",))
    states = []
    for key, payload in re.findall(r" key: (\{.*?\}) payload: (\{.*\})$", output, re.MULTILINE):
        if json.loads(key)["data"].get("transactionalId") == TRANSACTIONAL_ID:
            data = json.loads(payload)["data"]
            states.append((data["transactionStatus"], data["transactionPartitions"]))
    in_it = [{"topic": TRANSACTIONAL_TOPIC, "partitionIds": [0]}]
    assert states == [("Empty", None), ("Ongoing", in_it), ("PrepareCommit", in_it), ("CompleteCommit", [])]


# --- `kbroker dump-log` against Kafka's tool, byte for byte ----------------------------------------------------

PARTITIONS = (*(f"{TOPIC}-{partition}" for partition in range(len(CODECS))), f"{COMPACTED}-0",
              f"{TRANSACTIONAL_TOPIC}-0")
T0 = 1_700_000_000_000  # timestamps of the hand-built files
VERSION = struct.Struct(">h")


def kbroker_dump(*files: Path, options: tuple[str, ...] = (), check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """`kbroker dump-log` over `files`, both streams as bytes."""
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "dump-log", "--files", ",".join(map(str, files)),
                           *options], capture_output=True, timeout=kafka_tools.TIMEOUT, check=check)


def kafka_dump_streams(*files: Path, options: tuple[str, ...] = (),
                       check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Kafka's DumpLogSegments with its stderr too (dump() keeps only stdout and refuses reported problems, which
    the hand-built files below hold on purpose)."""
    command = [kafka_process.java(), *kafka_tools.JVM, "-cp", kafka_tools.classpath(),
               kafka_tools.main_class("DumpLogSegments"), "--files", ",".join(map(str, files)), *options]
    return subprocess.run(command, capture_output=True, timeout=kafka_tools.TIMEOUT, check=check)


def assert_same_stdout(files: list[Path], options: tuple[str, ...] = ()) -> str:
    expected = dump(*files, options=options)
    assert kbroker_dump(*files, options=options).stdout.decode() == expected
    return expected


def problem_blocks(stderr: bytes) -> list[bytes]:
    """stderr's per-file problem reports (a heading line and its indented lines), sorted: Kafka lists the files
    in its hash map's order, which kbroker reproduces across buckets but not for two files sharing one
    (docs/cli.md), so the files' order is not compared; every line of every report is."""
    blocks: list[bytes] = []
    for line in stderr.splitlines(keepends=True):
        if line.startswith(b" ") and blocks:
            blocks[-1] += line
        else:
            blocks.append(line)
    return sorted(blocks)


def assert_same_streams(files: list[Path], options: tuple[str, ...] = ()) -> bytes:
    """Identical stdout, and stderr with the same reports; returns Kafka's stderr, for the caller to check it
    reports something."""
    kafka, ours = kafka_dump_streams(*files, options=options), kbroker_dump(*files, options=options)
    assert ours.stdout == kafka.stdout
    assert problem_blocks(ours.stderr) == problem_blocks(kafka.stderr)
    return kafka.stderr


def files_of(data_dir: Path, *suffixes: str) -> list[Path]:
    return [file for partition in PARTITIONS for suffix in suffixes
            for file in segment_files(data_dir, partition, suffix)]


def coordinator_logs(data_dir: Path, topic: str) -> list[Path]:
    return [log for log in sorted(data_dir.glob(f"{topic}-*/*.log")) if log.stat().st_size]


def test_dump_log_prints_batches_as_kafka(data_dir: Path) -> None:
    """Shallow iteration over every codec's, the compacted and the transactional partition's segments."""
    assert "baseOffset: 0 " in assert_same_stdout(files_of(data_dir, ".log"))


def test_dump_log_prints_every_record_of_every_codec_as_kafka(data_dir: Path) -> None:
    """--deep-iteration --print-data-log: records, keys, headers and values, control markers included; the
    non-consecutive offsets the cleaner left are reported on stderr as Kafka reports them."""
    stderr = assert_same_streams(files_of(data_dir, ".log"), ("--deep-iteration", "--print-data-log"))
    assert b"Non-consecutive offsets in" in stderr


def test_dump_log_deep_iteration_without_data_matches_kafka(data_dir: Path) -> None:
    assert "| offset: " in assert_same_stdout(files_of(data_dir, ".log"), ("--deep-iteration",))


def test_dump_log_skip_record_metadata_matches_kafka(data_dir: Path) -> None:
    output = assert_same_stdout(files_of(data_dir, ".log"), ("--print-data-log", "--skip-record-metadata"))
    assert "| key: key-0 payload: " in output


def test_dump_log_max_bytes_stops_where_kafka_stops(data_dir: Path) -> None:
    assert_same_stdout(files_of(data_dir, ".log"), ("--max-bytes", "3000"))


def test_dump_log_prints_indexes_as_kafka(data_dir: Path) -> None:
    output = assert_same_stdout(files_of(data_dir, ".index", ".timeindex"))
    assert "offset: " in output and "timestamp: " in output


def test_dump_log_index_sanity_check_matches_kafka(data_dir: Path) -> None:
    assert "passed sanity check" in assert_same_stdout(files_of(data_dir, ".index", ".timeindex"),
                                                       ("--index-sanity-check",))


def test_dump_log_verify_index_only_matches_kafka(data_dir: Path) -> None:
    assert_same_streams(files_of(data_dir, ".index", ".timeindex"), ("--verify-index-only",))


def test_dump_log_prints_producer_snapshots_as_kafka(data_dir: Path) -> None:
    assert "producerId: " in assert_same_stdout(files_of(data_dir, ".snapshot"))


def test_dump_log_prints_the_transaction_index_as_kafka(data_dir: Path) -> None:
    output = assert_same_stdout(segment_files(data_dir, f"{TRANSACTIONAL_TOPIC}-0", ".txnindex"))
    assert "version: 0 producerId: " in output


def test_dump_log_offsets_decoder_matches_kafka(data_dir: Path) -> None:
    output = assert_same_stdout(coordinator_logs(data_dir, "__consumer_offsets"), ("--offsets-decoder",))
    assert f'"group":"{GROUP}"' in output


def test_dump_log_transaction_log_decoder_matches_kafka(data_dir: Path) -> None:
    output = assert_same_stdout(coordinator_logs(data_dir, "__transaction_state"), ("--transaction-log-decoder",))
    assert '"transactionStatus":"CompleteAbort"' in output


def edge_records() -> list[bytes]:
    """Batches kbroker's broker does not write every day: tombstone and null key, invalid UTF-8, LogAppendTime,
    a delete horizon, a sequence wrapping, an abort marker, a gap in the offsets."""
    return [
        build_batch([Record(0, T0, b"k0", b"v0", [("h", b"x")]), Record(1, T0 + 5, None, b"no key", [])]),
        build_batch([Record(2, T0 + 1, b"gone", None, [("a", None), ("b", b"")])], base_offset=2, codec=1),
        build_batch([Record(3, T0 + 2, b"\xff\xfebad", b"caf\xc3\xa9 \xe2\x82", [])], base_offset=3,
                    timestamp_type=LOG_APPEND_TIME, max_timestamp=T0 + 9),
        build_batch([Record(4, T0 + 3, b"dh", b"v", [])], base_offset=4, delete_horizon_ms=T0 + 100),
        build_batch([Record(5, T0 + 4, b"t", b"txn", [])], base_offset=5, producer_id=7, producer_epoch=1,
                    base_sequence=2**31 - 1, is_transactional=True),
        build_end_txn_batch(False, producer_id=7, producer_epoch=1, coordinator_epoch=3, timestamp=T0 + 5,
                            base_offset=6),
        build_batch([Record(9, T0 + 6, b"gap", b"after a gap", [])], base_offset=9, codec=4),
    ]


@pytest.fixture(scope="module")
def edge_segment(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A hand-built segment whose every file holds something for the tool to report: trailing garbage, index
    entries naming the wrong batch, time index entries out of order or on the wrong offset, aborted
    transactions; plus an empty index and a file of no known kind."""
    partition = tmp_path_factory.mktemp("edge") / "edge-0"
    partition.mkdir()
    batches = edge_records()
    positions = [sum(map(len, batches[:index])) for index in range(len(batches))]
    log = partition / "00000000000000000000.log"
    log.write_bytes(b"".join(batches) + b"\x00\x01\x02garbage")
    index = partition / "00000000000000000000.index"
    index.write_bytes(b"".join(struct.pack(">ii", offset, positions[batch])
                               for offset, batch in ((2, 2), (4, 3), (6, 3))))
    time_index = partition / "00000000000000000000.timeindex"
    time_index.write_bytes(b"".join(struct.pack(">qi", T0 + delta, offset)
                                    for delta, offset in ((1, 2), (1, 3), (50, 4), (60, 8))))
    txn_index = TransactionIndex(partition / "00000000000000000000.txnindex", 0)
    txn_index.append(AbortedTxn(7, 5, 6, 5))
    txn_index.append(AbortedTxn(8, 10, 12, 9))
    txn_index.close()
    (partition / "00000000000000000010.log").write_bytes(b"")
    (partition / "00000000000000000010.index").write_bytes(b"")
    (partition / "00000000000000000000.other").write_bytes(b"x")
    return [log, index, time_index, partition / "00000000000000000000.txnindex",
            partition / "00000000000000000010.index", partition / "00000000000000000000.other"]


@pytest.mark.parametrize("options", [(), ("--deep-iteration", "--print-data-log"), ("--verify-index-only",),
                                     ("--print-data-log", "--skip-record-metadata"), ("--index-sanity-check",)],
                         ids=["shallow", "deep", "verify", "skip-metadata", "sanity"])
def test_dump_log_reports_problems_of_hand_built_files_as_kafka(edge_segment: list[Path],
                                                                options: tuple[str, ...]) -> None:
    """Both streams identical, the problems reported on stderr included."""
    assert b"Ignoring unknown file" in assert_same_streams(edge_segment, options)


def versioned(version: int, message: object) -> bytes:
    return VERSION.pack(version) + bytes(messages.encode(message, version))


def group_records() -> list[tuple[bytes, bytes | None]]:
    """__consumer_offsets records of every kind the decoder shapes differently: a commit, tombstones, a
    consumer group's members (subscription and assignment decoded, or kept as bytes when they do not parse),
    a KIP-848 record, a record type it does not know."""
    subscription = versioned(1, messages.ConsumerProtocolSubscription(topics=["t1", "t2"], owned_partitions=[]))
    assigned = messages.classes("ConsumerProtocolAssignment")["TopicPartition"](topic="t1", partitions=[0, 1])
    assignment = versioned(1, messages.ConsumerProtocolAssignment(assigned_partitions=[assigned], user_data=b"\1\2"))
    member = messages.classes("GroupMetadataValue")["MemberMetadata"]

    def group(generation: int, subscription: bytes, assignment: bytes) -> bytes:
        return versioned(3, messages.GroupMetadataValue(
            protocol_type="consumer", generation=generation, protocol="range", leader="m-1",
            current_state_timestamp=T0, members=[member(
                member_id="m-1", group_instance_id=None, client_id='c"1\n', client_host="/127.0.0.1",
                rebalance_timeout=300000, session_timeout=45000, subscription=subscription, assignment=assignment)]))

    return [
        (versioned(1, messages.OffsetCommitKey(group="g", topic="t1", partition=0)),
         versioned(3, messages.OffsetCommitValue(offset=5, leader_epoch=2, metadata="méta", commit_timestamp=T0))),
        (versioned(1, messages.OffsetCommitKey(group="g", topic="t1", partition=1)), None),
        (versioned(2, messages.GroupMetadataKey(group="g")), group(3, subscription, assignment)),
        (versioned(2, messages.GroupMetadataKey(group="g2")), group(4, b"\0", b"")),
        (versioned(2, messages.GroupMetadataKey(group="g")), None),
        (versioned(3, messages.ConsumerGroupMetadataKey(group_id="cg")),
         versioned(0, messages.ConsumerGroupMetadataValue(epoch=7))),
        (VERSION.pack(99) + b"junk", b"x"),
    ]


def transaction_records() -> list[tuple[bytes, bytes | None]]:
    """A transactions-v2 state (version 1, with tagged fields) and a tombstone."""
    partitions = messages.classes("TransactionLogValue")["PartitionsSchema"](topic="a", partition_ids=[0, 2])
    value = messages.TransactionLogValue(
        producer_id=9, producer_epoch=2, transaction_timeout_ms=1000, transaction_status=3,
        transaction_partitions=[partitions], transaction_last_update_timestamp_ms=T0,
        transaction_start_timestamp_ms=T0 - 1)
    value.client_transaction_version, value.previous_producer_id, value.next_producer_id = 2, 8, -1
    key = versioned(0, messages.TransactionLogKey(transactional_id="tx"))
    return [(key, versioned(1, value)), (key, None)]


def write_records(path: Path, records: list[tuple[bytes, bytes | None]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(build_batch([Record(offset, T0 + offset, key, value, [])], base_offset=offset)
                              for offset, (key, value) in enumerate(records)))
    return path


def test_dump_log_offsets_decoder_shapes_every_group_record_as_kafka(tmp_path: Path) -> None:
    log = write_records(tmp_path / "__consumer_offsets-0" / "00000000000000000000.log", group_records())
    assert_same_streams([log], ("--offsets-decoder",))


def test_dump_log_transaction_log_decoder_shapes_tagged_fields_and_tombstones_as_kafka(tmp_path: Path) -> None:
    log = write_records(tmp_path / "__transaction_state-0" / "00000000000000000000.log", transaction_records())
    assert_same_streams([log], ("--transaction-log-decoder",))


@pytest.fixture(scope="module")
def preallocated_indexes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Indexes as an active segment leaves them (kbroker's own index code, flushed, not trimmed): zero slots
    after the entries, which Kafka's tool reads as entries too. One segment has no entry at all."""
    partition = tmp_path_factory.mktemp("preallocated") / "active-0"
    partition.mkdir()
    files = []
    for base, records, indexed in ((0, 3, False), (3, 2, True)):
        name = f"{base:020d}"
        batches = [build_batch([Record(offset, T0 + offset, b"k", b"v", [])], base_offset=offset)
                   for offset in range(base, base + records)]
        (partition / f"{name}.log").write_bytes(b"".join(batches))
        index, time_index = OffsetIndex(partition / f"{name}.index", base, 64), TimeIndex(
            partition / f"{name}.timeindex", base, 48)
        if indexed:
            index.append(base + 1, len(batches[0]))
            time_index.maybe_append(T0 + base + 1, base + 1)
        index.flush()
        time_index.flush()
        files += [index.path, time_index.path]
    return files


@pytest.mark.parametrize("options", [(), ("--verify-index-only",)], ids=["print", "verify"])
def test_dump_log_reads_preallocated_index_slots_as_kafka(preallocated_indexes: list[Path],
                                                          options: tuple[str, ...]) -> None:
    assert_same_streams(preallocated_indexes, options)


def test_dump_log_sanity_check_fails_on_a_preallocated_time_index_as_kafka(preallocated_indexes: list[Path]) -> None:
    """Kafka's check refuses a time index whose last slot is zero: both tools stop there, with the same output
    so far and a failing exit code (Kafka's stack trace is not copied)."""
    kafka = kafka_dump_streams(*preallocated_indexes, options=("--index-sanity-check",), check=False)
    ours = kbroker_dump(*preallocated_indexes, options=("--index-sanity-check",), check=False)
    assert ours.stdout == kafka.stdout
    assert kafka.returncode != 0 and ours.returncode != 0
    assert b"Corrupt time index found" in kafka.stderr and b"Corrupt time index found" in ours.stderr
