"""Offset-commit records use Kafka's byte layout, and the store replays them."""

from __future__ import annotations

import struct

from kbroker.broker import Broker
from kbroker.config import build
from kbroker.coordinator.offsets import (
    OFFSETS_TOPIC,
    CommittedOffset,
    OffsetStore,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def test_key_is_version_1_then_group_topic_partition() -> None:
    assert encode_key("g", "t", 3) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"


def test_value_is_version_3_offset_epoch_metadata_timestamp() -> None:
    value = encode_value(CommittedOffset(5, 2, "m", 7))
    assert value == struct.pack(">hqih1sq", 3, 5, 2, 1, b"m", 7)


def test_value_version_1_with_expire_timestamp_decodes() -> None:
    raw = struct.pack(">hqh2sqq", 1, 9, 2, b"ab", 11, 12345)
    assert decode_value(raw) == CommittedOffset(9, -1, "ab", 11)


def test_group_metadata_keys_are_not_offset_keys() -> None:
    assert decode_key(struct.pack(">hh1s", 2, 1, b"g")) is None


def _broker(tmp_path) -> Broker:
    return Broker(build({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}))


def test_first_commit_creates_compacted_internal_topic(tmp_path) -> None:
    broker = _broker(tmp_path)
    OffsetStore(broker).commit("g", {("t", 0): CommittedOffset(1, -1, "", 10)}, 10)
    topic = broker.topics[OFFSETS_TOPIC]
    assert topic.partitions == 50 and topic.configs == {"cleanup.policy": "compact"} and topic.is_internal
    broker.close()


def test_commit_lands_in_the_groups_partition(tmp_path) -> None:
    broker = _broker(tmp_path)
    OffsetStore(broker).commit("test-group", {("t", 0): CommittedOffset(1, -1, "", 10)}, 10)
    assert broker.partition_log(OFFSETS_TOPIC, 12).log_end_offset == 1
    broker.close()


def test_replay_rebuilds_the_latest_commit_per_partition(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit("g", {("t", 0): CommittedOffset(1, -1, "", 10), ("t", 1): CommittedOffset(4, 0, "x", 10)}, 10)
    store.commit("g", {("t", 0): CommittedOffset(8, 3, "y", 20)}, 20)
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert replayed.fetch("g", "t", 0) == CommittedOffset(8, 3, "y", 20)
    assert replayed.fetch("g", "t", 1) == CommittedOffset(4, 0, "x", 10)
    reopened.close()


def test_deleted_offsets_stay_deleted_after_replay(tmp_path) -> None:
    broker = _broker(tmp_path)
    store = OffsetStore(broker)
    store.commit("g", {("t", 0): CommittedOffset(1, -1, "", 10), ("t", 1): CommittedOffset(2, -1, "", 10)}, 10)
    store.delete("g", [("t", 0)], 20)
    broker.close()
    reopened = _broker(tmp_path)
    replayed = OffsetStore(reopened)
    assert replayed.fetch("g", "t", 0) is None
    assert replayed.fetch("g", "t", 1) == CommittedOffset(2, -1, "", 10)
    reopened.close()
