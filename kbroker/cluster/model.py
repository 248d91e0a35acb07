"""The typed records the cluster modules pass around, so only cluster/zk.py knows Kafka's znode JSON."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

NO_LEADER = -1
RECOVERED = 0   # leader_recovery_state: the leader's log is whole
RECOVERING = 1  # the leader came from an unclean election and is still recovering (KIP-704)


@dataclass(frozen=True)
class EndPoint:
    listener: str           # the listener name, e.g. PLAINTEXT
    host: str
    port: int
    security_protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL


@dataclass(frozen=True)
class BrokerRegistration:
    """What /brokers/ids/<id> says of a live broker."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    features: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max) version
    broker_epoch: int = -1  # the czxid of the registration znode: a restarted broker gets a higher one

    def endpoint(self, listener: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership: who leads, at which epoch, with which in-sync replicas."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int = RECOVERED
    partition_epoch: int = 0  # the version of the state znode; conditional writes compare it


@dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state: the leadership and the controller epoch that wrote it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas in preference order, and those a reassignment is adding or removing."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<t>: the topic's id and each partition's replicas."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, ReplicaAssignment]


@dataclass(frozen=True)
class ControllerEpoch:
    """The controller epoch, and the version of the /controller_epoch znode that holds it: every write the
    controller makes is conditioned on that version, so a deposed controller's writes fail (epoch fencing)."""

    epoch: int
    zk_version: int


@dataclass(frozen=True)
class ProducerIdBlock:
    """A range of producer ids handed to one broker (/latest_producer_id_block holds the newest)."""

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


@dataclass(frozen=True)
class FinalizedFeatures:
    """/feature: whether feature versioning is enabled and each finalized feature's level."""

    enabled: bool
    levels: dict[str, int] = field(default_factory=dict)
    zk_version: int = -1  # the znode's version when read; -1 for one not yet written
