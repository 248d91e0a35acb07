"""Group commit: deferred offset commits reach __consumer_offsets as one batch per partition when
flush_pending runs, in order with other appends, and a failed flush undoes what it acknowledged."""

from __future__ import annotations

import pytest

from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator import offsets
from kbroker.coordinator.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore
from wire.records import iter_batches

NOW = 1_700_000_000_000


def _broker(tmp_path) -> Broker:
    return Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))


@pytest.fixture
def broker(tmp_path):
    b = _broker(tmp_path)
    yield b
    b.close()


def _deferring(broker: Broker) -> OffsetStore:
    store = OffsetStore(broker)
    store.commit("warm-up", {("t", 0): CommittedOffset(0, -1, "", NOW)}, NOW)  # creates the topic
    store.deferring = True
    return store


def _batches(broker: Broker, store: OffsetStore, group: str) -> list[int]:
    """Record counts of the batches in the group's partition."""
    plog = broker.partition_log(OFFSETS_TOPIC, store.partition_for(group))
    raw = plog.read(0, 1 << 20).read_bytes() if plog.log_end_offset else b""
    return [header.record_count for _, header in iter_batches(raw)]


def _commit(store: OffsetStore, group: str, partition: int, offset: int) -> None:
    store.commit(group, {("t", partition): CommittedOffset(offset, -1, "", NOW)}, NOW)


def test_deferred_commits_are_answered_from_the_cache_before_they_are_written(broker: Broker) -> None:
    store = _deferring(broker)
    _commit(store, "g", 0, 5)
    assert store.fetch("g", "t", 0).offset == 5
    assert _batches(broker, store, "g") == []


def test_a_bursts_commits_become_one_batch_per_partition(broker: Broker) -> None:
    store = _deferring(broker)
    for offset in range(1, 33):
        _commit(store, "g", offset % 3, offset)
    assert store.flush_pending() is True
    assert _batches(broker, store, "g") == [32]


def test_flushed_commits_are_replayed_after_a_restart(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = _deferring(broker)
    for offset in range(1, 11):
        _commit(store, "g", 0, offset)
    _commit(store, "h", 1, 77)
    store.flush_pending()
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert (replayed.fetch("g", "t", 0).offset, replayed.fetch("h", "t", 1).offset) == (10, 77)
    reopened.close()


def test_a_delete_after_a_deferred_commit_is_written_after_it(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = _deferring(broker)
    _commit(store, "g", 0, 5)
    store.delete("g", [("t", 0)], NOW)
    assert store.flush_pending() is True
    broker.close()
    reopened = _broker(tmp_path)
    assert OffsetStore(reopened).fetch("g", "t", 0) is None
    reopened.close()


def test_a_large_burst_is_split_into_batches_under_the_size_limit(broker: Broker, monkeypatch) -> None:
    monkeypatch.setattr(offsets, "_DEFERRED_BATCH_BYTES", 200)
    store = _deferring(broker)
    for partition in range(10):
        _commit(store, "g", partition, partition + 1)
    store.flush_pending()
    batches = _batches(broker, store, "g")
    assert len(batches) > 1 and sum(batches) == 10


def test_a_failed_flush_undoes_the_commits_it_could_not_write(broker: Broker) -> None:
    store = _deferring(broker)
    _commit(store, "g", 0, 5)
    store.flush_pending()
    _commit(store, "g", 0, 6)
    _commit(store, "g", 1, 1)
    broker.partition_log(OFFSETS_TOPIC, store.partition_for("g")).close()  # appends to it now fail
    assert store.flush_pending() is False
    assert (store.fetch("g", "t", 0).offset, store.fetch("g", "t", 1)) == (5, None)
    assert store.flush_pending() is True  # nothing more was lost


def test_a_failure_while_flushing_for_another_append_is_reported_at_the_next_flush(broker: Broker) -> None:
    store = _deferring(broker)
    _commit(store, "g", 0, 5)
    broker.partition_log(OFFSETS_TOPIC, store.partition_for("g")).close()
    with pytest.raises(ValueError, match="closed"):  # the delete cannot be written either
        store.delete("g", [("t", 0)], NOW)
    assert store.fetch("g", "t", 0) is None
    assert store.flush_pending() is False
