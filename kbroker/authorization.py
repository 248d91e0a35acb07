"""Which operations a client may perform on a resource: the "authorized operations" answers (KIP-430).

Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe can list, as a bit field of
AclOperation codes, what the caller may do with a topic, the cluster or a group. Kafka computes it
as the operations the resource type supports, filtered by the authorizer; with no authorizer (the
default, and kbroker's only mode so far) that is every supported operation. This module is the one
place that knows both halves: the operations per resource type, and the hook where an authorizer
filters them once security exists.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Protocol

# The int32 a response carries when the request did not ask for authorized operations.
OPERATIONS_NOT_REQUESTED = -(2**31)


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (the bit each one sets in an authorized-operations field)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes for the concrete resource types."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


Op = AclOperation
# Kafka 4's AclEntry.supportedOperations. Groups gained DESCRIBE_CONFIGS and ALTER_CONFIGS with group
# configs in Kafka 4.0 (Kafka 3.9 answers READ, DELETE, DESCRIBE); kbroker answers at Kafka 4's level.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as in Kafka's ACLs


class Authorizer(Protocol):
    """What an authorizer will provide: the subset of `operations` the current caller may perform."""

    def allowed(self, resource_type: ResourceType, resource_name: str,
                operations: Iterable[AclOperation]) -> set[AclOperation]: ...


def bit_field(operations: Iterable[AclOperation]) -> int:
    """Operations as Kafka's 32-bit field: bit n set for the operation with code n."""
    field = 0
    for operation in operations:
        field |= 1 << operation
    return field


_EVERY_SUPPORTED = {resource_type: bit_field(ops) for resource_type, ops in SUPPORTED_OPERATIONS.items()}


def authorized_operations(resource_type: ResourceType, resource_name: str,
                          authorizer: Authorizer | None = None) -> int:
    """The field a response carries for one resource: every supported operation without an authorizer,
    else the ones the authorizer allows."""
    if authorizer is None:
        return _EVERY_SUPPORTED[resource_type]
    supported = SUPPORTED_OPERATIONS[resource_type]
    return bit_field(supported & authorizer.allowed(resource_type, resource_name, supported))
