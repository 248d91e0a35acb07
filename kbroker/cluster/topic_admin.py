"""CreateTopics, DeleteTopics and CreatePartitions in cluster mode, as Kafka 3.9's ZkAdminManager takes them.

Only the broker whose controller is active takes them; the others answer NOT_CONTROLLER and clients find the
controller in Metadata. The change is written to ZooKeeper (the topic znode, its config, a deletion mark) and
the controller does the rest; the answer waits until this broker's metadata cache shows the outcome (every
partition with a leader, or the topic gone), for at most the request's timeout: REQUEST_TIMED_OUT then, though
the change still happens, as in Kafka.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence

from kbroker.broker import TopicError
from kbroker.cluster.model import ReplicaAssignment, TopicAssignment
from kbroker.cluster.placement import (
    PlacementError,
    assign_new_partitions,
    assign_replicas_to_brokers,
    broker_metadatas,
)
from kbroker.cluster.zk import TopicExistsError
from kbroker.config import BrokerConfig
from kbroker.coordinator.offsets import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC
from wire.errors import ErrorCode

WAIT_STEP_S = 0.05  # how often a waiting request looks at the metadata cache again


class TopicAdmin:
    """The cluster side of the topic APIs for one member (kbroker/cluster/member.py)."""

    def __init__(self, member) -> None:
        self.member = member

    @property
    def is_controller(self) -> bool:
        controller = self.member.controller
        return controller is not None and controller.is_active

    # ---- creation

    def place(self, name: str, partitions: int, replication_factor: int,
              manual: Mapping[int, Sequence[int]]) -> dict[int, tuple[int, ...]]:
        """The new topic's replicas: the request's own, checked as AdminZkClient.validateTopicCreate does, or
        placed over the live brokers as AdminUtils.assignReplicasToBrokers."""
        if self.member.metadata.contains(name):
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if not manual:
            try:
                return assign_replicas_to_brokers(self.member.metadata.alive_brokers(), partitions,
                                                  replication_factor)
            except PlacementError as error:
                raise TopicError(error.error_code, error.client_message or "") from None
        replicas = {p: tuple(brokers) for p, brokers in manual.items()}
        if any(len(set(r)) != len(r) for r in replicas.values()):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Duplicate replica assignment found: {_scala_map(replicas)}")
        if len({len(r) for r in replicas.values()}) > 1:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "All partitions should have the same number of replicas")
        if sorted(replicas) != list(range(len(replicas))):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "partitions should be a consecutive 0-based integer sequence")
        return replicas

    async def create(self, name: str, replicas: Mapping[int, tuple[int, ...]], configs: Mapping[str, str]) -> uuid.UUID:
        assignment = TopicAssignment(name, uuid.uuid4(), {p: ReplicaAssignment(r) for p, r in replicas.items()})
        try:
            await asyncio.to_thread(self.member.zk.create_topic, assignment, dict(configs))
        except TopicExistsError as error:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, str(error)) from None
        return assignment.topic_id

    async def create_automatically(self, name: str, partitions: int, replication_factor: int,
                                   configs: Mapping[str, str]) -> ErrorCode:
        """Kafka's auto-creation in ZooKeeper mode: the broker asked writes the topic itself, controller or not.
        The answer for the topic: LEADER_NOT_AVAILABLE while it gets its leaders, or why it cannot be created
        (INVALID_REPLICATION_FACTOR while fewer brokers are alive than the factor)."""
        try:
            await self.create(name, self.place(name, partitions, replication_factor, {}), configs)
        except TopicError as error:
            if error.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode(error.error_code)
        return ErrorCode.LEADER_NOT_AVAILABLE

    async def create_offsets_topic(self, config: BrokerConfig) -> ErrorCode:
        """__consumer_offsets auto-created with its own settings (offsets.topic.*, a compacted log), whether
        FindCoordinator or Metadata asked first: one place, so both create the same topic."""
        partitions = int(config["offsets.topic.num.partitions"])  # type: ignore[call-overload]
        replication_factor = int(config["offsets.topic.replication.factor"])  # type: ignore[call-overload]
        return await self.create_automatically(OFFSETS_TOPIC, partitions, replication_factor, OFFSETS_TOPIC_CONFIGS)

    async def create_transaction_topic(self, config: BrokerConfig) -> ErrorCode:
        """__transaction_state auto-created with its own settings (transaction.state.log.*), whether
        FindCoordinator or Metadata asked first."""
        from kbroker.coordinator.transactions.coordinator import transaction_topic_configs

        partitions = int(config["transaction.state.log.num.partitions"])  # type: ignore[call-overload]
        replication_factor = int(config["transaction.state.log.replication.factor"])  # type: ignore[call-overload]
        return await self.create_automatically(TRANSACTION_TOPIC, partitions, replication_factor,
                                               transaction_topic_configs(config))

    def has_leaders(self, name: str, partition_count: int) -> bool:
        """DelayedCreatePartitions' test: the metadata cache knows a leader for every partition."""
        found = self.member.metadata.partitions(name)
        return len(found) >= partition_count and all(p.leader >= 0 for p in found[:partition_count])

    # ---- deletion

    def topic_of(self, name: str | None, topic_id: uuid.UUID) -> str | None:
        """A DeleteTopics entry's topic name, by name or (v6) by id, if the metadata cache knows it."""
        metadata = self.member.metadata
        if name:
            return name if metadata.contains(name) else None
        return metadata.topic_name(topic_id)

    async def mark_for_deletion(self, name: str) -> None:
        """AdminZkClient.deleteTopic; a topic already marked is waited for like one marked now."""
        await asyncio.to_thread(self.member.zk.mark_topic_for_deletion, name)

    def is_gone(self, name: str) -> bool:
        return not self.member.metadata.contains(name)

    # ---- new partitions

    async def add_partitions(self, name: str, count: int, manual: Sequence[Sequence[int]] | None,
                             validate_only: bool) -> None:
        """ZkAdminManager.createPartitions: the new partitions placed after the topic's layout (or as given),
        written to the topic znode; the controller creates them."""
        zk = self.member.zk
        existing = await asyncio.to_thread(zk.topic_assignment, name)
        registered = await asyncio.to_thread(zk.live_brokers)
        try:
            partitions = existing.partitions if existing is not None else {}
            added = assign_new_partitions(name, partitions, broker_metadatas(registered), count, manual)
        except PlacementError as error:
            raise TopicError(error.error_code, error.client_message or "") from None
        if validate_only or existing is None:
            return
        updated = TopicAssignment(name, existing.topic_id, {**existing.partitions, **added})
        await asyncio.to_thread(zk.set_topic_assignment, updated)

    # ---- waiting

    @staticmethod
    async def wait_until(done: Callable[[], bool], timeout_ms: int) -> bool:
        """Whether `done()` came true within `timeout_ms` (checked every WAIT_STEP_S)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while not done():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(min(WAIT_STEP_S, max(0.0, deadline - loop.time())))
        return True


def _scala_map(replicas: Mapping[int, tuple[int, ...]]) -> str:
    """A partition -> replicas map as Scala prints it in Kafka's messages."""
    listed = ", ".join(f"{p} -> List({', '.join(map(str, r))})" for p, r in replicas.items())
    return f"Map({listed})"
