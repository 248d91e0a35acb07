"""The group -> __consumer_offsets partition formula matches Kafka's."""

from __future__ import annotations

import pytest

from kbroker.coordinator.hashing import java_string_hash, partition_for


@pytest.mark.parametrize(("group", "partition"), [("test-group", 12), ("group-1", 49), ("my-group", 12)])
def test_partition_for_matches_kafka_examples(group: str, partition: int) -> None:
    assert partition_for(group, 50) == partition


def test_java_string_hash_matches_known_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # the one string hashing to MIN_VALUE


def test_java_string_hash_counts_utf16_code_units() -> None:
    # U+1F600 is a surrogate pair in Java: 0xD83D, 0xDE00
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00


def test_min_value_hash_maps_to_partition_zero() -> None:
    assert partition_for("polygenelubricants", 50) == 0
