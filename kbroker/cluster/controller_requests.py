"""The controller's request batch (Kafka 3.9's AbstractControllerBrokerRequestBatch): what each state change tells
which broker, gathered per broker and sent together.

Requests are plain dataclasses whose fields are named as Kafka's JSON specs name them (snake_case, as
wire.schema.attribute_name spells them), so turning one into a wire message is mechanical. Versions are the ones
Kafka 3.9's controller uses at inter.broker.protocol.version 3.4 and later.

Rules carried over from Kafka:
- a partition added twice to one broker's LeaderAndIsr keeps the latest state, and `is_new` once set stays set;
  a StopReplica's `delete_partition` likewise;
- every LeaderAndIsr partition also goes to every live or shutting-down broker in UpdateMetadata;
- a partition queued for deletion is announced with leader -2 (and StopReplica carries leader epoch -2);
- requests go only to brokers still registered when the batch is sent: LeaderAndIsr first, then UpdateMetadata,
  then StopReplica.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kbroker.cluster.controller_context import ControllerContext, TopicPartition, during_delete
from kbroker.cluster.model import PartitionState, ReplicaAssignment
from wire.schema import ZERO_UUID

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True)
class LeaderAndIsrPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False
    leader_recovery_state: int = 0


@dataclass(frozen=True)
class LeaderAndIsrTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@dataclass(frozen=True)
class LeaderAndIsrLiveLeader:
    broker_id: int
    host_name: str
    port: int


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]
    is_k_raft_controller: bool = False
    type: int = 0  # UNKNOWN: the ZooKeeper controller never says incremental or full

    def partition_states(self) -> dict[TopicPartition, LeaderAndIsrPartitionState]:
        return {TopicPartition(t.topic_name, p.partition_index): p for t in self.topic_states
                for p in t.partition_states}


@dataclass(frozen=True)
class UpdateMetadataPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class UpdateMetadataTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: tuple[UpdateMetadataPartitionState, ...]


@dataclass(frozen=True)
class UpdateMetadataEndpoint:
    port: int
    host: str
    listener: str
    security_protocol: int


@dataclass(frozen=True)
class UpdateMetadataBroker:
    id: int
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None = None


@dataclass(frozen=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: tuple[UpdateMetadataTopicState, ...]
    live_brokers: tuple[UpdateMetadataBroker, ...]
    is_k_raft_controller: bool = False
    type: int = 0

    def partition_states(self) -> dict[TopicPartition, UpdateMetadataPartitionState]:
        return {TopicPartition(t.topic_name, p.partition_index): p for t in self.topic_states
                for p in t.partition_states}


@dataclass(frozen=True)
class StopReplicaPartitionState:
    partition_index: int
    leader_epoch: int
    delete_partition: bool


@dataclass(frozen=True)
class StopReplicaTopicState:
    topic_name: str
    partition_states: tuple[StopReplicaPartitionState, ...]


@dataclass(frozen=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: tuple[StopReplicaTopicState, ...]
    is_k_raft_controller: bool = False
    delete_partitions: bool = False  # v0-2 only; v3+ says it per partition

    def partition_states(self) -> dict[TopicPartition, StopReplicaPartitionState]:
        return {TopicPartition(t.topic_name, p.partition_index): p for t in self.topic_states
                for p in t.partition_states}


@dataclass(frozen=True)
class BrokerRequests:
    """One sent batch: the requests for each broker, by type, keyed by broker id."""

    leader_and_isr: dict[int, LeaderAndIsrRequest] = field(default_factory=dict)
    update_metadata: dict[int, UpdateMetadataRequest] = field(default_factory=dict)
    stop_replica: dict[int, StopReplicaRequest] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.leader_and_isr or self.update_metadata or self.stop_replica)


class BatchNotEmpty(RuntimeError):
    """A new batch was started while the last one still held requests (Kafka's IllegalStateException)."""


class RequestBatch:
    """Collects requests between `new_batch` and `send`; `sent` keeps every non-empty batch in order."""

    def __init__(self, controller_id: int, context: ControllerContext, inter_broker_listener: str = "PLAINTEXT",
                 leader_recovery_supported: bool = True) -> None:
        self.controller_id = controller_id
        self.context = context
        self.inter_broker_listener = inter_broker_listener
        self.leader_recovery_supported = leader_recovery_supported
        self.sent: list[BrokerRequests] = []
        self._leader_and_isr: dict[int, dict[TopicPartition, LeaderAndIsrPartitionState]] = {}
        self._stop_replica: dict[int, dict[TopicPartition, StopReplicaPartitionState]] = {}
        self._update_metadata_brokers: set[int] = set()
        self._update_metadata_partitions: dict[TopicPartition, UpdateMetadataPartitionState] = {}

    def new_batch(self) -> None:
        if self._leader_and_isr or self._stop_replica or self._update_metadata_brokers:
            raise BatchNotEmpty("Controller to broker state change requests batch is not empty while creating a "
                                "new one")

    def clear(self) -> None:
        self._leader_and_isr.clear()
        self._stop_replica.clear()
        self._update_metadata_brokers.clear()
        self._update_metadata_partitions.clear()

    def add_leader_and_isr(self, broker_ids: Iterable[int], tp: TopicPartition, state: PartitionState,
                           assignment: ReplicaAssignment, is_new: bool) -> None:
        """Tell `broker_ids` the partition's leadership; every live broker then hears of it in UpdateMetadata."""
        lai = state.leader_and_isr
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            states = self._leader_and_isr.setdefault(broker_id, {})
            already_new = tp in states and states[tp].is_new
            states[tp] = LeaderAndIsrPartitionState(
                topic_name=tp.topic, partition_index=tp.partition, controller_epoch=state.controller_epoch,
                leader=lai.leader, leader_epoch=lai.leader_epoch, isr=tuple(lai.isr),
                partition_epoch=lai.partition_epoch, replicas=tuple(assignment.replicas),
                adding_replicas=tuple(assignment.adding), removing_replicas=tuple(assignment.removing),
                is_new=is_new or already_new,
                leader_recovery_state=lai.leader_recovery_state if self.leader_recovery_supported else 0)
        self.add_update_metadata(self.context.live_or_shutting_down_broker_ids, [tp])

    def add_stop_replica(self, broker_ids: Iterable[int], tp: TopicPartition, delete_partition: bool) -> None:
        leader_epoch = self.context.leader_epoch(tp)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            states = self._stop_replica.setdefault(broker_id, {})
            already_delete = tp in states and states[tp].delete_partition
            states[tp] = StopReplicaPartitionState(tp.partition, leader_epoch, already_delete or delete_partition)

    def add_update_metadata(self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata to `broker_ids`, carrying these partitions' states (those without a leader yet are
        skipped, as Kafka skips them)."""
        self._update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        for tp in partitions:
            state = self.context.partition_leadership_info(tp)
            if state is None:
                continue
            replicas = self.context.partition_replica_assignment(tp)
            lai = state.leader_and_isr
            if self.context.is_topic_queued_up_for_deletion(tp.topic):
                lai = during_delete(lai)
            self._update_metadata_partitions[tp] = UpdateMetadataPartitionState(
                topic_name=tp.topic, partition_index=tp.partition, controller_epoch=state.controller_epoch,
                leader=lai.leader, leader_epoch=lai.leader_epoch, isr=tuple(lai.isr), zk_version=lai.partition_epoch,
                replicas=tuple(replicas),
                offline_replicas=tuple(r for r in replicas if not self.context.is_replica_online(r, tp)))

    def send(self, controller_epoch: int) -> BrokerRequests:
        """Build the batch's requests for brokers still registered, clear the batch, and remember what was sent."""
        live = self.context.live_or_shutting_down_broker_ids
        sent = BrokerRequests(
            {b: self._leader_and_isr_request(b, s, controller_epoch)
             for b, s in sorted(self._leader_and_isr.items()) if b in live},
            self._update_metadata_requests(controller_epoch, live),
            {b: self._stop_replica_request(b, s, controller_epoch)
             for b, s in sorted(self._stop_replica.items()) if b in live})
        self.clear()
        if sent:
            self.sent.append(sent)
        return sent

    def take_sent(self) -> list[BrokerRequests]:
        sent, self.sent = self.sent, []
        return sent

    # ---- building

    def _leader_and_isr_request(self, broker_id: int, states: dict[TopicPartition, LeaderAndIsrPartitionState],
                                controller_epoch: int) -> LeaderAndIsrRequest:
        leader_ids = {s.leader for s in states.values()}
        leaders = []
        for broker in self.context.live_or_shutting_down_brokers():
            endpoint = broker.endpoint(self.inter_broker_listener)
            if broker.broker_id in leader_ids and endpoint is not None:
                leaders.append(LeaderAndIsrLiveLeader(broker.broker_id, endpoint.host, endpoint.port))
        topic_states = tuple(
            LeaderAndIsrTopicState(topic, self.context.topic_ids.get(topic, ZERO_UUID), parts)
            for topic, parts in _by_topic(states).items())
        return LeaderAndIsrRequest(self.controller_id, controller_epoch, self._broker_epoch(broker_id), topic_states,
                                   tuple(leaders))

    def _update_metadata_requests(self, controller_epoch: int, live: frozenset[int]) -> dict[int,
                                                                                            UpdateMetadataRequest]:
        topic_states = tuple(
            UpdateMetadataTopicState(topic, self.context.topic_ids.get(topic, ZERO_UUID), parts)
            for topic, parts in _by_topic(self._update_metadata_partitions).items())
        brokers = tuple(self._metadata_broker(b) for b in self.context.live_or_shutting_down_brokers())
        return {b: UpdateMetadataRequest(self.controller_id, controller_epoch, self._broker_epoch(b), topic_states,
                                         brokers)
                for b in sorted(self._update_metadata_brokers & live)}

    @staticmethod
    def _metadata_broker(broker) -> UpdateMetadataBroker:
        endpoints = tuple(UpdateMetadataEndpoint(e.port, e.host, e.listener,
                                                 SECURITY_PROTOCOL_IDS.get(e.security_protocol, -1))
                          for e in broker.endpoints)
        return UpdateMetadataBroker(broker.broker_id, endpoints, broker.rack)

    def _stop_replica_request(self, broker_id: int, states: dict[TopicPartition, StopReplicaPartitionState],
                              controller_epoch: int) -> StopReplicaRequest:
        topic_states = tuple(StopReplicaTopicState(topic, parts) for topic, parts in _by_topic(states).items())
        return StopReplicaRequest(self.controller_id, controller_epoch, self._broker_epoch(broker_id), topic_states)

    def _broker_epoch(self, broker_id: int) -> int:
        epoch = self.context.broker_epoch(broker_id)
        return -1 if epoch is None else epoch


def _by_topic(states: dict[TopicPartition, object]) -> dict[str, tuple]:
    grouped: dict[str, list] = {}
    for tp in sorted(states, key=lambda t: (t.topic, t.partition)):
        grouped.setdefault(tp.topic, []).append(states[tp])
    return {topic: tuple(parts) for topic, parts in grouped.items()}
