"""kbroker/log/dump.py and `kbroker dump-log`: what Kafka's DumpLogSegments reports about damaged or odd files
(compat-tests/test_dump_log_segments.py proves the output identical to Kafka's on real and hand-built files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbroker import cli
from kbroker.log.dump import DumpOptions, Problems, dump_file, java_hash_order
from kbroker.log.offset_index import OffsetIndex
from wire import messages
from wire.json_converter import write_json
from wire.records import Record, build_batch

BASE = "00000000000000000000"


def batch_at(offset: int, count: int = 1) -> bytes:
    return build_batch([Record(offset + i, 1_000 + i, b"k%d" % (offset + i), b"v", []) for i in range(count)],
                       base_offset=offset)


def write_log(directory: Path, *batches: bytes, tail: bytes = b"") -> Path:
    log = directory / f"{BASE}.log"
    log.write_bytes(b"".join(batches) + tail)
    return log


def test_trailing_bytes_after_the_last_batch_are_reported_by_file_name(tmp_path: Path) -> None:
    log = write_log(tmp_path, batch_at(0), tail=b"\x00" * 7)
    lines = dump_file(str(log), DumpOptions(), Problems()).lines
    assert lines[-1] == f"Found 7 invalid bytes at the end of {BASE}.log"


def test_max_bytes_prints_only_batches_wholly_inside_the_limit_and_no_trailing_report(tmp_path: Path) -> None:
    first = batch_at(0, 2)
    log = write_log(tmp_path, first, batch_at(2, 2))
    lines = dump_file(str(log), DumpOptions(max_bytes=len(first) + 10), Problems()).lines
    assert [line.split(" lastOffset")[0] for line in lines if line.startswith("baseOffset")] == ["baseOffset: 0"]
    assert not any("invalid bytes" in line for line in lines)


def test_non_consecutive_offsets_are_reported_after_the_dump_in_kafkas_words(tmp_path: Path) -> None:
    log = write_log(tmp_path, batch_at(0, 2), batch_at(5))
    problems = Problems()
    dump_file(str(log), DumpOptions(deep_iteration=True), problems)
    assert problems.lines() == [f"Non-consecutive offsets in {log.absolute()}", "  1 is followed by 5"]


def test_a_segment_whose_first_record_is_not_offset_zero_counts_as_non_consecutive_as_in_kafka_4(
        tmp_path: Path) -> None:
    log = write_log(tmp_path, batch_at(3))
    problems = Problems()
    dump_file(str(log), DumpOptions(deep_iteration=True), problems)
    assert problems.non_consecutive == {str(log.absolute()): [(-1, 3)]}


def test_an_index_entry_pointing_at_the_wrong_batch_is_a_mismatch(tmp_path: Path) -> None:
    first, second = batch_at(0, 2), batch_at(2, 2)
    write_log(tmp_path, first, second)
    index = OffsetIndex(tmp_path / f"{BASE}.index", 0, 1024)
    index.append(1, len(first))  # names offset 1, points at the batch ending at 3
    index.close()
    problems = Problems()
    lines = dump_file(str(index.path), DumpOptions(), problems).lines
    assert lines[1:] == [f"offset: 1 position: {len(first)}"]
    assert problems.lines() == [f"Mismatches in :{index.path.absolute()}", "  Index offset: 1, log offset: 3"]


def test_an_empty_index_says_so(tmp_path: Path) -> None:
    write_log(tmp_path, batch_at(0))
    index = tmp_path / f"{BASE}.index"
    index.write_bytes(b"")
    assert dump_file(str(index), DumpOptions(), Problems()).lines == [f"Dumping {index}", f"{index} is empty."]


def test_a_file_of_unknown_kind_is_ignored_with_a_note(tmp_path: Path) -> None:
    other = tmp_path / f"{BASE}.deleted"
    other.write_bytes(b"x")
    problems = Problems()
    assert dump_file(str(other), DumpOptions(), problems).lines == [f"Dumping {other}"]
    assert problems.errors == [f"Ignoring unknown file {other}"]


def test_problems_of_several_files_come_in_java_hashmap_order() -> None:
    """As Kafka 4.4's tool printed them for two compacted segments (285 before 272)."""
    names = ["/tmp/dumpwork/data/compacted-0/00000000000000000272.log",
             "/tmp/dumpwork/data/compacted-0/00000000000000000285.log"]
    assert java_hash_order(names) == names[::-1]


def test_files_given_as_arguments_dump_as_with_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path, batch_at(0, 3))
    assert cli.main(["dump-log", "--files", str(log), "--deep-iteration"]) == 0
    with_flag = capsys.readouterr().out
    assert cli.main(["dump-log", str(log), "--deep-iteration"]) == 0
    assert capsys.readouterr().out == with_flag
    assert with_flag.count("| offset: ") == 3


def test_json_prints_one_object_per_file_with_its_records(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path, batch_at(0, 2))
    assert cli.main(["dump-log", str(log), "--print-data-log", "--json"]) == 0
    file_dump, problems = map(json.loads, capsys.readouterr().out.splitlines())
    assert file_dump["file"] == str(log)
    assert [(record["offset"], record["key"]) for record in file_dump["items"][0]["records"]] == [(0, "k0"), (1, "k1")]
    assert problems["problems"]["nonConsecutiveOffsets"] == {}


def test_json_converter_leaves_out_fields_of_other_versions_and_unset_tagged_fields() -> None:
    value = messages.OffsetCommitValue(offset=5, leader_epoch=2, metadata="m", commit_timestamp=7, expire_timestamp=9)
    assert write_json(value, 1) == '{"offset":5,"metadata":"m","commitTimestamp":7,"expireTimestamp":9}'
    state = messages.TransactionLogValue(producer_id=1, producer_epoch=0, transaction_timeout_ms=10,
                                         transaction_status=0, transaction_partitions=None,
                                         transaction_last_update_timestamp_ms=3, transaction_start_timestamp_ms=-1)
    assert "previousProducerId" not in write_json(state, 1)


def test_json_converter_writes_bytes_as_base64_and_escapes_as_jackson() -> None:
    assignment = messages.ConsumerProtocolAssignment(assigned_partitions=[], user_data=b"\x01\x02")
    assert write_json(assignment, 1) == '{"assignedPartitions":[],"userData":"AQI="}'
    key = messages.GroupMetadataKey(group='a"b\n\x01é')
    assert write_json(key, 2) == '{"group":"a\\"b\\n\\u0001é"}'


def test_dumping_a_preallocated_index_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """A broker's active index has zero slots after its entries; the dump must not trim them away."""
    write_log(tmp_path, batch_at(0, 2))
    index = OffsetIndex(tmp_path / f"{BASE}.index", 0, 1024)
    index.append(1, 0)
    index.flush()
    dump_file(str(index.path), DumpOptions(), Problems())
    assert index.path.stat().st_size == 1024


def test_a_preallocated_index_dumps_up_to_its_first_zero_slot(tmp_path: Path) -> None:
    write_log(tmp_path, batch_at(0, 2))
    index = OffsetIndex(tmp_path / f"{BASE}.index", 0, 1024)
    index.append(1, 0)
    index.flush()
    assert dump_file(str(index.path), DumpOptions(), Problems()).lines[1:] == ["offset: 1 position: 0"]
