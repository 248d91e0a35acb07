"""The group coordinator: committed offsets in `__consumer_offsets` and classic group membership.

A single node coordinates every group, so FindCoordinator always answers with this broker;
the partition a group's records go to still follows Kafka's formula, so the topic's layout
matches what Kafka's own tools expect.
"""

from kbroker.coordinator.coordinator import Coordinator
from kbroker.coordinator.hashing import java_string_hash, partition_for
from kbroker.coordinator.offsets import OffsetStore

__all__ = ["Coordinator", "OffsetStore", "java_string_hash", "partition_for"]
