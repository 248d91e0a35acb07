"""One transactional id's state and the moves between states, as Kafka's TransactionMetadata makes them.

A move is prepared as a new TransactionMetadata (nothing changes until the record saying so is in
`__transaction_state`); `TransactionCoordinator` writes it, then makes it current.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(IntEnum):
    """The ids Kafka writes as TransactionStatus; names as DescribeTransactions and ListTransactions spell them."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return next((state for state in cls if state.kafka_name == name), None)


# states a client may start a new transaction (or a new epoch) from
COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


@dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # the id and epoch before the last bump, so a client retrying InitProducerId after a lost answer gets it again
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # transactions v2: the producer id the client moves to once this transaction completes (its epoch ran out)
    next_producer_id: int = NO_PRODUCER_ID
    # the transactions version of the client's last AddPartitions/EndTxn (0: v1 requests, 2: KIP-890 part 2)
    client_tv: int = 0
    # markers whose writing is under way: requests meanwhile get CONCURRENT_TRANSACTIONS
    pending: TxnState | None = field(default=None, compare=False)

    def moved(self, **changes: object) -> TransactionMetadata:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka's isProducerEpochExhausted: one bump is kept in reserve for fencing."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def new_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TransactionMetadata | None:
        """Kafka's prepareIncrementProducerEpoch: Empty at the next epoch; a retry that already got the bump
        gets it again; None when the expected epoch is neither (PRODUCER_FENCED)."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self.moved(producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                          state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)

    def new_producer_id(self, producer_id: int, timeout_ms: int, keep_last_epoch: bool,
                        now_ms: int) -> TransactionMetadata:
        """Kafka's prepareProducerIdRotation: an exhausted epoch moves to a fresh producer id at epoch 0."""
        return self.moved(producer_id=producer_id, producer_epoch=0, last_producer_id=self.producer_id,
                          last_producer_epoch=self.producer_epoch if keep_last_epoch else NO_PRODUCER_EPOCH,
                          timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1,
                          last_update_ms=now_ms)

    def with_partitions(self, partitions: frozenset[tuple[str, int]], now_ms: int,
                        client_tv: int = 0) -> TransactionMetadata:
        """Kafka's prepareAddPartitions: Ongoing, started now unless it already was."""
        start = now_ms if self.state in COMPLETED else self.start_ms
        return self.moved(state=TxnState.ONGOING, partitions=self.partitions | partitions, start_ms=start,
                          last_update_ms=now_ms, client_tv=client_tv)

    def fenced(self) -> TransactionMetadata:
        """Kafka's prepareFenceProducerEpoch: the epoch the abort of a zombie's transaction is written with."""
        return self.moved(producer_epoch=min(self.producer_epoch + 1, MAX_EPOCH), last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepared(self, commit: bool, now_ms: int) -> TransactionMetadata:
        return self.moved(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, last_update_ms=now_ms)

    def prepared_v2(self, commit: bool, next_producer_id: int, now_ms: int) -> TransactionMetadata:
        """Kafka's prepareAbortOrCommit for a transactions v2 EndTxn: the epoch is bumped with the Prepare record (the
        markers carry the bumped one), and an exhausted epoch names the producer id the client moves to. An abort with
        no partition added (an empty transaction) starts now."""
        return self.moved(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                          producer_epoch=min(self.producer_epoch + 1, MAX_EPOCH),
                          last_producer_epoch=self.producer_epoch, last_producer_id=self.producer_id,
                          next_producer_id=next_producer_id,
                          start_ms=self.start_ms if self.partitions else now_ms, last_update_ms=now_ms, client_tv=2)

    def completed(self, now_ms: int) -> TransactionMetadata:
        """Kafka's prepareComplete: the markers are written, the partitions forgotten; a transactions v2 producer
        whose epoch ran out moves to its next producer id, at epoch 0."""
        commit = self.state == TxnState.PREPARE_COMMIT
        done = self.moved(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                          partitions=frozenset(), last_update_ms=now_ms, pending=None)
        if self.next_producer_id != NO_PRODUCER_ID:
            done = done.moved(producer_id=self.next_producer_id, producer_epoch=0, next_producer_id=NO_PRODUCER_ID)
        return done

    def end_answer(self) -> tuple[int, int]:
        """The producer id and epoch an EndTxn v5 answer gives the client: those it continues with."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def topics(self) -> dict[str, list[int]]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return by_topic
