"""The transaction coordinator: transactional ids' state on `__transaction_state`, and the markers
that end their transactions in the partitions they wrote to (Kafka 3.9's transactions v1)."""

from kbroker.coordinator.transactions.coordinator import TransactionCoordinator
from kbroker.coordinator.transactions.metadata import TransactionMetadata, TxnState

__all__ = ["TransactionCoordinator", "TransactionMetadata", "TxnState"]
