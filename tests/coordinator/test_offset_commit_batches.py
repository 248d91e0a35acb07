"""Offset commits are laid out directly, byte for byte as wire's generic batch builder would,
and what a commit writes is read back by Kafka's record reader and by the replay."""

from __future__ import annotations

import struct

import pytest

from kbroker.broker import LEADER_EPOCH, Broker
from kbroker.config import build
from kbroker.coordinator import offsets
from kbroker.coordinator.offsets import (
    OFFSETS_TOPIC,
    CommittedOffset,
    OffsetStore,
    coordinator_batch,
    decode_key,
    decode_value,
    encode_group_key,
    encode_key,
    encode_value,
    length_prefixed,
    value_field,
)
from wire import DecodeError, messages
from wire.records import Record, build_batch, iter_batches, iter_records, patch_partition_leader_epoch, validate_batch

NOW = 1_700_000_000_123


def _generic(records: list[tuple[bytes, bytes | None]], timestamp: int = NOW) -> bytes:
    return build_batch([Record(i, timestamp, key, value, ()) for i, (key, value) in enumerate(records)])


def _direct(records: list[tuple[bytes, bytes | None]], timestamp: int = NOW) -> bytes:
    return coordinator_batch([(length_prefixed(key), length_prefixed(value)) for key, value in records], timestamp)


def test_one_commit_is_the_generic_batch() -> None:
    record = (encode_key("g", "t", 0), encode_value(CommittedOffset(42, -1, "", NOW)))
    assert _direct([record]) == _generic([record])


def test_many_commits_with_two_byte_offset_deltas_are_the_generic_batch() -> None:
    records = [(encode_key("group", "topic", p), encode_value(CommittedOffset(p * 7, 3, "", NOW))) for p in range(300)]
    assert _direct(records) == _generic(records)


def test_long_keys_and_metadata_with_multi_byte_lengths_are_the_generic_batch() -> None:
    record = (encode_key("g" * 200, "t" * 249, 2**31 - 1), encode_value(CommittedOffset(2**63 - 1, 9, "m" * 4000, 0)))
    assert _direct([record]) == _generic([record])


def test_tombstones_are_the_generic_batch() -> None:
    records = [(encode_key("g", "t", 0), None), (encode_group_key("g"), None)]
    assert _direct(records) == _generic(records)


def test_a_direct_batch_passes_the_logs_validation() -> None:
    batch = _direct([(encode_key("g", "t", 1), encode_value(CommittedOffset(1, 0, "x", NOW)))])
    header = validate_batch(bytearray(batch), 0)
    assert (header.record_count, header.base_timestamp, header.max_timestamp, header.producer_id) == (1, NOW, NOW, -1)


@pytest.mark.parametrize("committed", [CommittedOffset(5, -1, "", NOW), CommittedOffset(0, 2, "é" * 40, 1),
                                       CommittedOffset(-1, 2**31 - 1, "meta", 2**62)])
def test_value_field_is_the_length_prefixed_value(committed: CommittedOffset) -> None:
    assert value_field(committed) == length_prefixed(encode_value(committed))


def _broker(tmp_path) -> Broker:
    return Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))


def _written(broker: Broker, store: OffsetStore, group: str) -> list[bytes]:
    """Each batch in the group's partition, with its base offset cleared as the builder leaves it."""
    plog = broker.partition_log(OFFSETS_TOPIC, store.partition_for(group))
    raw = plog.read(0, 1 << 20).read_bytes()
    return [bytes(8) + bytes(raw[at + 8:at + header.size]) for at, header in iter_batches(raw)]


def test_a_commit_writes_the_generic_batch_to_the_groups_partition(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    commits = {("t", 0): CommittedOffset(10, 1, "", NOW), ("t", 1): CommittedOffset(20, -1, "meta", NOW)}
    store.commit("g", commits, NOW)
    expected = _generic([(encode_key("g", t, p), encode_value(c)) for (t, p), c in commits.items()])
    stamped = bytearray(expected)
    patch_partition_leader_epoch(stamped, 0, LEADER_EPOCH)  # the leader stamps coordinator batches too
    assert _written(broker, store, "g") == [bytes(stamped)]
    broker.close()


def test_committed_records_decode_with_kafkas_key_and_value_schemas(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit("g", {("t", 3): CommittedOffset(99, 4, "m", NOW)}, NOW)
    store.commit("g", {("t", 3): CommittedOffset(100, 4, "", NOW + 1)}, NOW + 1)
    plog = broker.partition_log(OFFSETS_TOPIC, store.partition_for("g"))
    raw = plog.read(0, 1 << 20).read_bytes()
    decoded = [(decode_key(r.key), decode_value(r.value)) for at, _ in iter_batches(raw) for r in iter_records(raw, at)]
    assert decoded == [(("g", "t", 3), CommittedOffset(99, 4, "m", NOW)),
                       (("g", "t", 3), CommittedOffset(100, 4, "", NOW + 1))]
    broker.close()


def test_keys_stay_right_when_the_key_cache_overflows(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(offsets, "_KEY_CACHE_LIMIT", 2)
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    for partition in range(5):
        store.commit("g", {("t", partition): CommittedOffset(partition + 1, -1, "", NOW)}, NOW)
    store.commit("g", {("t", 0): CommittedOffset(50, -1, "", NOW)}, NOW)
    assert len(store._key_fields) <= 2
    broker.close()
    replayed = OffsetStore(_broker(tmp_path))
    assert {p: replayed.fetch("g", "t", p).offset for p in range(5)} == {0: 50, 1: 2, 2: 3, 3: 4, 4: 5}


def _generic_value(committed: CommittedOffset, version: int) -> bytes:
    value = messages.OffsetCommitValue(offset=committed.offset, leader_epoch=committed.leader_epoch,
                                       metadata=committed.metadata, commit_timestamp=committed.commit_timestamp)
    return struct.pack(">h", version) + bytes(messages.encode(value, version))


@pytest.mark.parametrize("committed", [CommittedOffset(5, -1, "", NOW), CommittedOffset(1, 7, "é" * 40, 2**40)])
def test_values_written_read_back_as_the_generic_decoder_reads_them(committed: CommittedOffset) -> None:
    assert encode_value(committed) == _generic_value(committed, 3)
    assert decode_value(encode_value(committed)) == committed


@pytest.mark.parametrize("version", [0, 2])
def test_values_of_older_versions_still_decode(version: int) -> None:
    assert decode_value(_generic_value(CommittedOffset(9, -1, "m", 3), version)) == CommittedOffset(9, -1, "m", 3)


def test_a_truncated_value_is_an_error_not_a_wrong_offset() -> None:
    with pytest.raises(DecodeError):
        decode_value(encode_value(CommittedOffset(9, 1, "metadata", 3))[:-9])
