"""kbroker.authorization: the operations per resource type, and where an authorizer narrows them."""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.authorization import AclOperation, ResourceType, authorized_operations


def test_without_an_authorizer_every_supported_operation_is_authorized() -> None:
    # the fields Kafka 4.4 answers with no authorizer (compat-tests/test_authorized_operations.py checks clients)
    assert authorized_operations(ResourceType.TOPIC, "orders") == 3576
    assert authorized_operations(ResourceType.CLUSTER, "kafka-cluster") == 8096
    assert authorized_operations(ResourceType.GROUP, "g") == 3400


class ReadOnly:
    """Allows READ and DESCRIBE on anything, and asks for nothing else."""

    def allowed(self, resource_type: ResourceType, resource_name: str,
                operations: Iterable[AclOperation]) -> set[AclOperation]:
        return {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE}


def test_an_authorizer_narrows_the_field_to_supported_operations_it_allows() -> None:
    # IDEMPOTENT_WRITE is allowed but is not a topic operation, so it stays out
    field = authorized_operations(ResourceType.TOPIC, "orders", ReadOnly())
    assert field == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
