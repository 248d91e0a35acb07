"""LogManager: every partition across several log dirs, checkpoints, clean shutdown, meta.properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log import InconsistentMetadataError, LogConfig, LogDirLockedError, LogManager
from kbroker.log.checkpoints import MetaProperties, read_meta_properties, read_offsets_checkpoint

from log_helpers import batch


def _dirs(tmp_path: Path, n: int = 3) -> list[Path]:
    return [tmp_path / f"data{i}" for i in range(n)]


def test_partitions_are_reopened_from_several_log_dirs(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path)
    with LogManager(dirs) as manager:
        for p in range(6):
            manager.create("orders", p).append(batch(p + 1), 0)
    with LogManager(dirs) as manager:
        assert sorted(manager) == [("orders", p) for p in range(6)]
        assert [manager.get("orders", p).log_end_offset for p in range(6)] == [1, 2, 3, 4, 5, 6]
        assert {manager.log_dir_of("orders", p) for p in range(6)} == set(dirs)


def test_new_partition_goes_to_the_dir_with_fewest_partitions(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 2)
    (dirs[0] / "old-0").mkdir(parents=True)
    (dirs[0] / "old-1").mkdir()
    with LogManager(dirs) as manager:
        manager.create("new", 0)
        manager.create("new", 1)
        manager.create("new", 2)
        assert [manager.log_dir_of("new", p) for p in range(3)] == [dirs[1], dirs[1], dirs[0]]


def test_partition_dirs_are_named_topic_dash_partition(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        manager.create("my-topic.v2", 11)
    assert (tmp_path / "my-topic.v2-11" / "00000000000000000000.log").exists()


def test_create_returns_the_existing_log(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        assert manager.create("t", 0) is manager.create("t", 0)


def test_close_writes_checkpoints_and_the_clean_shutdown_marker(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        log = manager.create("t", 0)
        for _ in range(4):
            log.append(batch(1), 0)
        log.update_high_watermark(4)
        log.delete_records_before(2)
        manager.create("t", 1)
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert read_offsets_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("t", 0): 4,
        ("t", 1): 0,
    }
    assert read_offsets_checkpoint(tmp_path / "replication-offset-checkpoint") == {("t", 0): 4, ("t", 1): 0}
    assert read_offsets_checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 2}


def test_each_partition_dir_keeps_a_leader_epoch_checkpoint(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        manager.create("t", 0).append(batch(3), 0, leader_epoch=0)
        manager.create("t", 1)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
    assert (tmp_path / "t-1" / "leader-epoch-checkpoint").read_bytes() == b""  # no epoch yet: empty, as Kafka


def test_open_restores_offsets_from_checkpoints_and_removes_the_marker(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        log = manager.create("t", 0)
        log.append(batch(5), 0)
        log.update_high_watermark(3)
        log.delete_records_before(2)
    manager = LogManager([tmp_path])
    try:
        assert not (tmp_path / ".kafka_cleanshutdown").exists()
        log = manager.get("t", 0)
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (2, 3, 5)
        assert log.recovery_point == 5
    finally:
        manager.close()


def test_delete_removes_the_partition_directory(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        manager.create("t", 0).append(batch(1), 0)
        assert manager.delete("t", 0)
        assert not manager.delete("t", 0)
        assert manager.get("t", 0) is None
        assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    assert read_offsets_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {}


def test_leftover_delete_dirs_are_removed_on_open(tmp_path: Path) -> None:
    leftover = tmp_path / "t-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"")
    with LogManager([tmp_path]) as manager:
        assert len(manager) == 0
    assert not leftover.exists()


def test_a_log_dir_cannot_be_opened_twice(tmp_path: Path) -> None:
    with LogManager([tmp_path]), pytest.raises(LogDirLockedError):
        LogManager([tmp_path])


def test_topic_config_applies_to_its_partitions(tmp_path: Path) -> None:
    small = LogConfig(segment_bytes=2 * len(batch(1)))
    with LogManager([tmp_path], topic_configs={"small": small}) as manager:
        log = manager.create("small", 0)
        for _ in range(4):
            log.append(batch(1), 0)
        assert len(log.segments) == 2
        assert manager.create("big", 0).config == LogConfig()


def test_meta_properties_are_written_to_every_log_dir(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 2)
    with LogManager(dirs) as manager:
        cluster_id = manager.ensure_meta_properties(broker_id=4, cluster_id="abcdefghijklmnopqrstuv")
    assert cluster_id == "abcdefghijklmnopqrstuv"
    assert [read_meta_properties(d / "meta.properties") for d in dirs] == [
        MetaProperties(0, 4, cluster_id)
    ] * 2


def test_meta_properties_keep_the_cluster_id_found_on_disk(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        first = manager.ensure_meta_properties(broker_id=1)
    with LogManager([tmp_path]) as manager:
        assert manager.ensure_meta_properties(broker_id=1) == first


def test_meta_properties_for_another_broker_are_refused(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        manager.ensure_meta_properties(broker_id=1, cluster_id="c1")
        with pytest.raises(InconsistentMetadataError):
            manager.ensure_meta_properties(broker_id=2, cluster_id="c1")
        with pytest.raises(InconsistentMetadataError):
            manager.ensure_meta_properties(broker_id=1, cluster_id="c2")
