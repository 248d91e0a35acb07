"""Kafka's DumpLogSegments (kafka-dump-log.sh, from Kafka 4.4.0's tools) over the files kbroker wrote: the
byte-for-byte proof that kbroker keeps Kafka's storage format.

A kbroker of this module's own (it needs the data directory) takes records from confluent-kafka in every codec,
with keys and headers, an idempotent producer (so a .snapshot holds its state), a compacted topic its cleaner
has rewritten, and committed offsets; it is stopped cleanly, and Kafka's tool reads every .log, .index,
.timeindex and .snapshot file: each batch valid and at the right offsets, every index entry pointing at the
right batch, the producer state, the offset commits and the transaction coordinator's state decoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import kafka_tools
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.testing import BrokerProcess

import settle

pytestmark = [pytest.mark.client("kafka-tools"),
              pytest.mark.scenario("Storage format: DumpLogSegments over kbroker's files")]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # partition i of TOPIC is written with CODECS[i]
TOPIC = "codecs"
COMPACTED = "compacted"
GROUP = "dump-group"
TRANSACTIONAL_ID, TRANSACTIONAL_TOPIC = "dump-txn", "transactional"
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


def commit_transaction(bootstrap: str) -> None:
    """One committed transaction: __transaction_state holds TRANSACTIONAL_ID's state."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(TRANSACTIONAL_TOPIC, b"in-a-transaction", partition=0)
    producer.commit_transaction(TIMEOUT)


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
        commit_transaction(broker.bootstrap)
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
