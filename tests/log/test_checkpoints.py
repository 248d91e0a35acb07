"""Checkpoint, meta.properties, partition.metadata and clean-shutdown files in Kafka's formats."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbroker.log.checkpoints import (
    CheckpointError,
    MetaProperties,
    format_properties,
    new_cluster_id,
    parse_properties,
    read_meta_properties,
    read_offsets_checkpoint,
    read_partition_metadata,
    write_clean_shutdown_file,
    write_meta_properties,
    write_offsets_checkpoint,
    write_partition_metadata,
)


def test_offsets_checkpoint_is_version_count_then_topic_partition_offset_lines(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets_checkpoint(path, {("orders", 1): 99, ("orders", 0): 1234, ("__consumer_offsets", 7): 0})
    assert path.read_bytes() == b"0\n3\n__consumer_offsets 7 0\norders 0 1234\norders 1 99\n"


def test_empty_offsets_checkpoint_has_a_zero_count(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    write_offsets_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"


def test_offsets_checkpoint_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {("a-b.c", 0): 5, ("a-b.c", 12): 2**40}
    write_offsets_checkpoint(path, offsets)
    assert read_offsets_checkpoint(path) == offsets


def test_offsets_checkpoint_written_by_kafka_is_read(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n2\nfoo 0 10\nbar 3 7\n")
    assert read_offsets_checkpoint(path) == {("foo", 0): 10, ("bar", 3): 7}


def test_checkpoint_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets_checkpoint(path, {("t", 0): 1})
    write_offsets_checkpoint(path, {("t", 0): 2})
    assert read_offsets_checkpoint(path) == {("t", 0): 2}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    assert read_offsets_checkpoint(tmp_path / "nope") == {}


@pytest.mark.parametrize(
    "text", ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt zero 1\n", "0\n1\nt 0\n", "0\n1\nt 0 1 2\n", "x\n"]
)
def test_malformed_checkpoint_raises(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        read_offsets_checkpoint(path)


def test_meta_properties_is_written_like_java_properties_store(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    when = datetime(2024, 3, 5, 7, 8, 9, tzinfo=UTC)
    write_meta_properties(path, MetaProperties(0, 3, "Y2x1c3Rlci1pZC0xMjM0NQ"), now=when)
    assert path.read_text() == (
        "#\n#Tue Mar 05 07:08:09 UTC 2024\nversion=0\ncluster.id=Y2x1c3Rlci1pZC0xMjM0NQ\nbroker.id=3\n"
    )


def test_meta_properties_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    meta = MetaProperties(1, 9, new_cluster_id(), directory_id="abc")
    write_meta_properties(path, meta)
    assert read_meta_properties(path) == meta


def test_meta_properties_from_kafka_are_read(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text("#\n#Mon Jan 01 00:00:00 UTC 2024\nbroker.id=0\nversion=0\ncluster.id=abc\n")
    assert read_meta_properties(path) == MetaProperties(0, 0, "abc")


def test_properties_escape_and_unescape_special_characters() -> None:
    props = {"a key": "x=y:z #!", "uni": "caf\u00e9 \U0001f600", "lead": " space\tand\nnewline\\"}
    text = format_properties(props)
    assert "a\\ key=x\\=y\\:z \\#\\!" in text and "caf\\u00E9" in text
    assert parse_properties(text) == props


def test_properties_parser_accepts_colon_space_and_continuations() -> None:
    assert parse_properties("! comment\n a : 1\nb 2\nc=3\\\n   4\n\n") == {"a": "1", "b": "2", "c": "34"}


def test_new_cluster_id_looks_like_a_kafka_uuid() -> None:
    cluster_id = new_cluster_id()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_partition_metadata_matches_kafkas_format(tmp_path: Path) -> None:
    write_partition_metadata(tmp_path, "AAAAAAAAAAAAAAAAAAAAAQ")
    assert (tmp_path / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert read_partition_metadata(tmp_path) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_clean_shutdown_file_holds_kafkas_json(tmp_path: Path) -> None:
    write_clean_shutdown_file(tmp_path, broker_epoch=42)
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == {
        "version": "0",
        "broker_epoch": "42",
    }
