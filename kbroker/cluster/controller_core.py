"""The pieces of a ZooKeeper-mode controller wired together, and what one controller event produces.

ControllerCore owns the context, the request batch, both state machines and the topic deletion manager, over a
ControllerStore (cluster/zk.py's ZkClient, or a test double). Event handlers (controller_events and siblings) are
functions over it; the `event` decorator gives each call's effects back as a ControllerOutput: the writes made,
the request batches sent (in order), the state changes given up on, and the handler's own answer. Nothing here
reads a clock but through `core.clock`, and nothing is global, so the same core can run against a real ZooKeeper.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, ParamSpec, TypeVar

from kbroker.cluster.controller_context import ControllerContext, TopicPartition
from kbroker.cluster.controller_requests import BrokerRequests, RequestBatch
from kbroker.cluster.controller_store import ControllerStore, RecordingStore, StoreWrite
from kbroker.cluster.partition_state_machine import PartitionStateMachine, StateChangeFailure
from kbroker.cluster.replica_state_machine import ReplicaStateMachine
from wire.errors import ErrorCode

T = TypeVar("T")
P = ParamSpec("P")

NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."  # Errors' own, which ApiError carries
# a partition the controller does not know, as ElectLeaders and AlterPartitionReassignments answer it
UNKNOWN_PARTITION: tuple[ErrorCode, str] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
AUTO_REBALANCE_FIRST_DELAY_S = 5.0  # onControllerFailover schedules the first check 5 s after becoming controller


@dataclass(frozen=True)
class ControllerConfig:
    """The broker configs the controller's decisions read (Kafka's names, dots as underscores)."""

    controller_id: int
    inter_broker_listener: str = "PLAINTEXT"
    delete_topic_enable: bool = True
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    leader_recovery_supported: bool = True  # inter.broker.protocol.version >= 3.2


@dataclass
class ControllerOutput(Generic[T]):
    """What one event did: writes in order, request batches in the order sent, failures, and its answer."""

    writes: list[StoreWrite] = field(default_factory=list)
    requests: list[BrokerRequests] = field(default_factory=list)
    failures: list[StateChangeFailure] = field(default_factory=list)
    result: T | None = None


class ControllerCore:
    """The active controller's state and machinery."""

    def __init__(self, config: ControllerConfig, store: ControllerStore, context: ControllerContext | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 unclean_enabled: Callable[[str], bool] | None = None) -> None:
        from kbroker.cluster.controller_deletion import TopicDeletionManager  # it needs a core to act on

        self.config = config
        self.context = context if context is not None else ControllerContext()
        self.store = RecordingStore(store)
        self.clock = clock
        self.active = True
        self.failures: list[StateChangeFailure] = []
        self.batch = RequestBatch(config.controller_id, self.context, config.inter_broker_listener,
                                  config.leader_recovery_supported)
        topic_unclean = unclean_enabled or (lambda topic: config.unclean_leader_election_enable)
        self.partition_state_machine = PartitionStateMachine(self.context, self.store, self.batch, topic_unclean,
                                                             config.leader_recovery_supported, self.failures)
        self.replica_state_machine = ReplicaStateMachine(self.context, self.store, self.batch, self.failures)
        self.topic_deletion = TopicDeletionManager(self)
        self.next_rebalance_check: float | None = None
        self._depth = 0

    def send_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition] = ()) -> None:
        """One batch of UpdateMetadata (KafkaController.sendUpdateMetadataRequest)."""
        self.batch.new_batch()
        self.batch.add_update_metadata(brokers, partitions)
        self.batch.send(self.context.epoch)

    def send_update_metadata_to_all(self, partitions: Iterable[TopicPartition] = ()) -> None:
        self.send_update_metadata(sorted(self.context.live_or_shutting_down_broker_ids), partitions)

    def schedule_auto_rebalance(self, delay_s: float) -> None:
        self.next_rebalance_check = self.clock() + delay_s

    def rebalance_due(self) -> bool:
        return self.next_rebalance_check is not None and self.clock() >= self.next_rebalance_check

    def _collect(self, result: T) -> ControllerOutput[T]:
        failures = list(self.failures)
        self.failures.clear()
        return ControllerOutput(self.store.take(), self.batch.take_sent(), failures, result)


def event(handler: Callable[P, T]) -> Callable[P, ControllerOutput[T]]:
    """Make a handler report its effects; a handler called from another adds to the outer one's output."""

    @functools.wraps(handler)
    def run(core: ControllerCore, *args: object, **kwargs: object) -> ControllerOutput[T]:
        if core._depth == 0:
            core._collect(None)  # drop anything left over from outside an event
        core._depth += 1
        try:
            result = handler(core, *args, **kwargs)
        finally:
            core._depth -= 1
        if core._depth:
            return ControllerOutput(result=result)
        return core._collect(result)

    return run  # type: ignore[return-value]
