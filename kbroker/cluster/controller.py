"""The controller as it runs in a broker, as Kafka 3.9's KafkaController in ZooKeeper mode.

Lifecycle. On start (and whenever /controller disappears) the broker races for /controller; the winner bumps
/controller_epoch in the same multi (zk.register_controller) and fails over: it sets up /feature, registers its
watches, reads brokers, topics, assignments (with reassignments in progress), partition states, deletions and
pending preferred elections from ZooKeeper, starts the channel to every live broker, and runs Kafka's
onControllerFailover (controller_events.process_controller_failover). It resigns when a write is fenced
(ControllerMovedError: another broker holds a newer epoch), when /controller names someone else, or when the
ZooKeeper session expires; a new session re-registers the broker (the owner's `reregister`) and races again.

Events run one at a time, as on Kafka's single controller event thread: watches (on kazoo's threads) and requests
(AlterPartition, ControlledShutdown, AllocateProducerIds, on the broker's loop) put events on an asyncio queue; one
task takes them in turn and runs each on a dedicated worker thread, because ZooKeeper calls block. Watch callbacks
carry no data: the event reads ZooKeeper when it runs, as Kafka's handlers do. Once an event is done, its request
batches go to the brokers through the channel (controller_channel), in the order the event made them.

Watches are kazoo recipes that stay registered until their callback says stop; each carries the generation it was
registered in, and resigning starts a new generation, so a deposed controller's watches stop at their next call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker.cluster import controller_events as events
from kbroker.cluster import zk as zk_paths
from kbroker.cluster.controller_alter_partition import (
    AlterPartitionRequestData,
    AlterPartitionResponseData,
    process_alter_partition,
)
from kbroker.cluster.controller_channel import (
    ControllerChannel,
    LeaderAndIsrResponseReceived,
    ResponseEvent,
    TopicDeletionStopReplicaResponseReceived,
)
from kbroker.cluster.controller_context import TopicPartition, is_being_reassigned
from kbroker.cluster.controller_core import NOT_CONTROLLER_MESSAGE, ControllerConfig, ControllerCore, ControllerOutput
from kbroker.cluster.controller_reassignment import (
    process_api_partition_reassignment,
    process_zk_partition_reassignment,
)
from kbroker.cluster.controller_store import ControllerMovedError
from kbroker.cluster.model import FinalizedFeatures, ProducerIdBlock, ReplicaAssignment, TopicAssignment
from kbroker.cluster.zk import ZkClient
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
TICK_S = 1.0  # how often the auto-rebalance schedule is looked at
NO_CONTROLLER = -1


def controller_config(config: Mapping[str, object], broker_id: int, inter_broker_listener: str) -> ControllerConfig:
    """The controller's settings from a broker's configuration (a BrokerConfig, or its values by Kafka's names)."""
    return ControllerConfig(
        controller_id=broker_id, inter_broker_listener=inter_broker_listener,
        delete_topic_enable=bool(config["delete.topic.enable"]),
        unclean_leader_election_enable=bool(config["unclean.leader.election.enable"]),
        auto_leader_rebalance_enable=bool(config["auto.leader.rebalance.enable"]),
        leader_imbalance_per_broker_percentage=int(config["leader.imbalance.per.broker.percentage"]),  # type: ignore[call-overload]
        leader_imbalance_check_interval_seconds=int(config["leader.imbalance.check.interval.seconds"]))  # type: ignore[call-overload]


# ---------------------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Startup:
    pass


@dataclass(frozen=True)
class ControllerChange:
    """/controller was created or rewritten: resign if it is no longer this broker."""


@dataclass(frozen=True)
class Reelect:
    """/controller was deleted: resign if needed, then race for it."""


@dataclass(frozen=True)
class RegisterBrokerAndReelect:
    """A new ZooKeeper session after the old one expired."""


@dataclass(frozen=True)
class Expire:
    """The ZooKeeper session expired: ephemerals and watches are gone."""


@dataclass(frozen=True)
class BrokerChange:
    pass


@dataclass(frozen=True)
class BrokerModifications:
    broker_id: int


@dataclass(frozen=True)
class TopicChange:
    pass


@dataclass(frozen=True)
class PartitionModifications:
    topic: str


@dataclass(frozen=True)
class TopicDeletion:
    pass


@dataclass(frozen=True)
class ZkPreferredReplicaElection:
    """/admin/preferred_replica_election was written (kafka-preferred-replica-election's ZooKeeper path)."""


@dataclass(frozen=True)
class ZkPartitionReassignment:
    """/admin/reassign_partitions was created (kafka-reassign-partitions' ZooKeeper path)."""


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection:
    pass


@dataclass(frozen=True)
class ResponseReceived:
    """A broker's answer, tagged with the controller generation whose channel received it."""

    generation: int
    event: ResponseEvent


@dataclass(frozen=True)
class AlterPartitionReceived:
    request: AlterPartitionRequestData
    version: int


@dataclass(frozen=True)
class ControlledShutdown:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class AllocateProducerIds:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class ElectLeaders:
    partitions: tuple[TopicPartition, ...]
    election_type: str  # "preferred" or "unclean"


@dataclass(frozen=True)
class AlterReassignments:
    targets: tuple[tuple[TopicPartition, tuple[int, ...] | None], ...]  # None cancels


@dataclass(frozen=True)
class ListReassignments:
    partitions: tuple[TopicPartition, ...] | None  # None: all of them


@dataclass(frozen=True)
class _Shutdown:
    pass


@dataclass
class _Done:
    """What one event leaves for the loop: its answer (or error) and the outputs whose requests must go out."""

    result: Any = None
    error: BaseException | None = None
    outputs: list[ControllerOutput] | None = None


# ---------------------------------------------------------------------------------------------- the controller


class KafkaController:
    """One broker's controller: elected or standing by, driven by its event queue."""

    def __init__(self, zk: ZkClient, config: ControllerConfig, *, reregister: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.zk = zk
        self.config = config
        self.broker_id = config.controller_id
        self.reregister = reregister  # writes this broker's registration again after a session expired
        self.clock = clock
        self.active_controller_id = NO_CONTROLLER
        self.core: ControllerCore | None = None
        self.channel: ControllerChannel | None = None
        self._generation = 0
        self._channel_generation = -1
        self._watched_topics: set[str] = set()
        self._watched_brokers: set[int] = set()
        self._outputs: list[ControllerOutput] = []
        self._rebalance_queued = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[object, asyncio.Future | None]] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"controller-{self.broker_id}")
        self._tasks: list[asyncio.Task] = []
        self._handlers: dict[type, Callable[[Any], Any]] = {
            Startup: lambda e: self._elect(), ControllerChange: lambda e: self._maybe_resign(),
            Reelect: lambda e: self._reelect(), RegisterBrokerAndReelect: self._register_broker_and_reelect,
            Expire: self._expire, BrokerChange: self._broker_change, BrokerModifications: self._broker_modification,
            TopicChange: self._topic_change, PartitionModifications: self._partition_modifications,
            TopicDeletion: self._topic_deletion, ZkPreferredReplicaElection: self._zk_preferred_replica_election,
            ZkPartitionReassignment: self._zk_partition_reassignment,
            AutoPreferredReplicaLeaderElection: self._auto_rebalance, ResponseReceived: self._response_received,
            AlterPartitionReceived: self._alter_partition, ControlledShutdown: self._controlled_shutdown,
            AllocateProducerIds: self._allocate_producer_ids, ElectLeaders: self._elect_leaders,
            AlterReassignments: self._alter_reassignments, ListReassignments: self._list_reassignments,
        }

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id and self.core is not None

    # ---- lifecycle (on the loop)

    async def start(self) -> None:
        """Watch /controller, then race for it (Kafka's Startup event)."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self.zk.on_session_lost(lambda: self._put_threadsafe(Expire()))
        self.zk.on_new_session(lambda: self._put_threadsafe(RegisterBrokerAndReelect()))
        first = [True]

        def controller_changed(controller_id: int | None) -> None:
            if first[0]:  # the recipe's first call reports the present state, which Startup reads itself
                first[0] = False
                return
            self._put_threadsafe(Reelect() if controller_id is None else ControllerChange())

        await self._loop.run_in_executor(self._executor, self.zk.watch_controller, controller_changed)
        self._queue.put_nowait((Startup(), None))
        self._tasks = [self._loop.create_task(self._run(), name=f"controller-{self.broker_id}-events"),
                       self._loop.create_task(self._tick(), name=f"controller-{self.broker_id}-scheduler")]

    async def stop(self) -> None:
        """Kafka's KafkaController.shutdown: stop taking events, resign in memory, close the channel. /controller
        goes when the owner closes the ZooKeeper session."""
        if self._queue is None:
            return
        self._queue.put_nowait((_Shutdown(), None))
        for task in self._tasks[1:]:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():  # requests that came after the shutdown: their broker asks again
            _, answer = self._queue.get_nowait()
            if answer is not None and not answer.done():
                answer.set_exception(ControllerMovedError("the controller shut down"))
        await asyncio.get_running_loop().run_in_executor(self._executor, self._resign_for_shutdown)
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        self._executor.shutdown(wait=True)
        self._queue = None

    def _resign_for_shutdown(self) -> None:
        self.active_controller_id = NO_CONTROLLER
        self._on_resignation()

    # ---- requests (on the loop)

    async def alter_partition(self, request: AlterPartitionRequestData, version: int) -> AlterPartitionResponseData:
        return await self._ask(AlterPartitionReceived(request, version))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        return await self._ask(ControlledShutdown(broker_id, broker_epoch))

    async def allocate_producer_ids(self, broker_id: int,
                                    broker_epoch: int) -> tuple[ErrorCode, ProducerIdBlock | None]:
        return await self._ask(AllocateProducerIds(broker_id, broker_epoch))

    async def elect_leaders(self, partitions: Sequence[TopicPartition],
                            election_type: str) -> dict[TopicPartition, int | tuple[ErrorCode, str | None]]:
        """ElectLeaders (43): per partition its new leader, or Kafka's error and message."""
        return await self._ask(ElectLeaders(tuple(partitions), election_type))

    async def alter_reassignments(self, targets: Sequence[tuple[TopicPartition, tuple[int, ...] | None]]) -> Any:
        """AlterPartitionReassignments (45): a per-partition (error, message) dict, or one error for all."""
        return await self._ask(AlterReassignments(tuple(targets)))

    async def list_reassignments(self, partitions: Sequence[TopicPartition] | None
                                 ) -> tuple[ErrorCode, dict[TopicPartition, ReplicaAssignment]]:
        """ListPartitionReassignments (46): the reassignments in progress (of `partitions`, or all)."""
        return await self._ask(ListReassignments(None if partitions is None else tuple(partitions)))

    async def _ask(self, event: object) -> Any:
        if self._queue is None or self._loop is None:
            raise ControllerMovedError("the controller is not running")
        answer = self._loop.create_future()
        self._queue.put_nowait((event, answer))
        return await answer

    # ---- the event queue

    def _put_threadsafe(self, event: object) -> None:
        """From a kazoo thread (a watch, a session change) onto the loop's queue."""
        loop, queue = self._loop, self._queue
        if loop is None or queue is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
            loop.call_soon_threadsafe(queue.put_nowait, (event, None))

    async def _run(self) -> None:
        assert self._queue is not None and self._loop is not None
        while True:
            event, answer = await self._queue.get()
            if isinstance(event, _Shutdown):
                return
            done = await self._loop.run_in_executor(self._executor, self._process, event)
            await self._send_requests(done.outputs or [])
            if answer is not None and not answer.done():
                if done.error is not None:
                    answer.set_exception(done.error)
                else:
                    answer.set_result(done.result)

    async def _tick(self) -> None:
        """The controller's scheduler: the auto-rebalance check, when it is due."""
        assert self._queue is not None
        while True:
            await asyncio.sleep(TICK_S)
            core = self.core
            if core is not None and not self._rebalance_queued and core.rebalance_due():
                self._rebalance_queued = True
                self._queue.put_nowait((AutoPreferredReplicaLeaderElection(), None))

    async def _send_requests(self, outputs: list[ControllerOutput]) -> None:
        """After an event: keep the channel in step with the live brokers, then queue the event's requests."""
        if not self.is_active:
            if self.channel is not None:
                channel, self.channel = self.channel, None
                await channel.close()
            return
        assert self.core is not None
        if self.channel is None or self._channel_generation != self._generation:
            if self.channel is not None:
                await self.channel.close()
            generation = self._generation
            self.channel = ControllerChannel(self.broker_id, self.config.inter_broker_listener,
                                             lambda e: self._put_response(generation, e))
            self._channel_generation = generation
        self.channel.sync(self.core.context.live_or_shutting_down_brokers())
        for output in outputs:
            for batch in output.requests:
                self.channel.send(batch)

    def _put_response(self, generation: int, event: ResponseEvent) -> None:
        if self._queue is not None:
            self._queue.put_nowait((ResponseReceived(generation, event), None))

    # ---- processing (on the event thread)

    def _process(self, event: object) -> _Done:
        self._outputs = []
        done = _Done()
        try:
            done.result = self._handlers[type(event)](event)
        except ControllerMovedError as error:
            log.info("controller %d: controller moved to another broker while processing %s", self.broker_id, event)
            self._clear_batch()
            self._maybe_resign()
            done.error = error
        except Exception as error:
            log.exception("controller %d: error processing %s", self.broker_id, event)
            self._clear_batch()
            done.error = error
        done.outputs, self._outputs = self._outputs, []
        return done

    def _emit(self, output: ControllerOutput) -> Any:
        self._outputs.append(output)
        for failure in output.failures:
            log.warning("controller %d: %s", self.broker_id, failure)
        return output.result

    def _clear_batch(self) -> None:
        if self.core is not None:
            self.core.batch.clear()

    def _watch(self, make_event: Callable[..., object | None], keep: Callable[[], bool] = lambda: True):
        """A watch callback for this generation: skips the recipe's first call (the state the event reads anyway),
        turns later calls into events, and stops once the generation is over or `keep` says so."""
        generation, first = self._generation, [True]

        def fire(*args: object) -> bool:
            if generation != self._generation or not keep():
                return False
            if first[0]:
                first[0] = False
                return True
            event = make_event(*args)
            if event is not None:
                self._put_threadsafe(event)
            return True

        return fire

    # ---- election and resignation

    def _elect(self) -> None:
        self.active_controller_id = self._current_controller()
        if self.active_controller_id != NO_CONTROLLER:
            return
        try:
            epoch = self.zk.register_controller(self.broker_id)
            if epoch is None:
                raise ControllerMovedError("another broker was elected controller")
            self.active_controller_id = self.broker_id
            log.info("[Controller id=%d] %d successfully elected as the controller. Epoch incremented to %d and "
                     "epoch zk version is now %d", self.broker_id, self.broker_id, epoch.epoch, epoch.zk_version,
                     extra={"broker_id": self.broker_id, "epoch": epoch.epoch})
            self._on_failover(epoch.epoch, epoch.zk_version)
        except ControllerMovedError:
            self._maybe_resign()
        except Exception:
            log.exception("broker %d: error while becoming controller; moving the controller", self.broker_id)
            self._trigger_controller_move()

    def _current_controller(self) -> int:
        found = self.zk.controller_id()
        return NO_CONTROLLER if found is None else found

    def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = self._current_controller()
        if was_active and self.active_controller_id != self.broker_id:
            self._on_resignation()

    def _reelect(self) -> None:
        self._maybe_resign()
        self._elect()

    def _register_broker_and_reelect(self, event: RegisterBrokerAndReelect) -> None:
        if self.reregister is not None:
            self.reregister()
        self._reelect()

    def _expire(self, event: Expire) -> None:
        self.active_controller_id = NO_CONTROLLER
        self._on_resignation()

    def _trigger_controller_move(self) -> None:
        """Give up the controllership after an unexpected failure: resign, then delete /controller (fenced)."""
        self.active_controller_id = self._current_controller()
        if self.active_controller_id != self.broker_id or self.core is None:
            return
        version = self.core.context.epoch_zk_version
        self.active_controller_id = NO_CONTROLLER
        self._on_resignation()
        with contextlib.suppress(ControllerMovedError):
            self.zk.resign_controller(version)

    def _on_resignation(self) -> None:
        self._generation += 1  # every watch of the old generation stops at its next call
        self._watched_topics.clear()
        self._watched_brokers.clear()
        if self.core is not None:
            self.core.active = False
            self.core.batch.clear()
            self.core.context.reset()
        self.core = None
        self._rebalance_queued = False
        log.info("[Controller id=%d] Resigning", self.broker_id, extra={"broker_id": self.broker_id})

    def _on_failover(self, epoch: int, epoch_zk_version: int) -> None:
        """Kafka's onControllerFailover: features, watches, the context from ZooKeeper, then the state machines."""
        self._generation += 1
        self._setup_feature_versioning()
        zk = self.zk
        zk.watch_brokers(self._watch(lambda ids: BrokerChange()))
        zk.watch_topics(self._watch(lambda topics: TopicChange()))
        zk.watch_topic_deletions(self._watch(lambda topics: TopicDeletion()))
        zk.watch_preferred_replica_election(self._watch(lambda exists: ZkPreferredReplicaElection() if exists
                                                        else None))
        zk.watch_partition_reassignment(self._watch(lambda created: ZkPartitionReassignment()))
        brokers = zk.live_brokers()
        assignments = zk.topic_assignments(zk.topics())
        for broker in brokers:
            self._watch_broker(broker.broker_id)
        for topic in assignments:
            self._watch_topic(topic)
        core = ControllerCore(self.config, zk, clock=self.clock, unclean_enabled=self._unclean_enabled)
        self.core = core
        pending_preferred = zk.preferred_replica_election()
        self._emit(events.process_controller_failover(core, epoch, epoch_zk_version, brokers, assignments.values(),
                                                      zk.topics_marked_for_deletion(), pending_preferred))
        zk.delete_preferred_replica_election(epoch_zk_version)  # its election ran (or was not needed) above

    def _setup_feature_versioning(self) -> None:
        """Kafka's enableFeatureVersioning (IBP >= 2.7): /feature enabled; an enabled one is kept as it is, a
        disabled one loses its levels. A Kafka 3.9 ZooKeeper broker finalizes no features, so a new one has none."""
        current = self.zk.features()
        if current is None or not current.enabled:
            self.zk.write_features(FinalizedFeatures(True))

    def _unclean_enabled(self, topic: str) -> bool:
        """The topic's unclean.leader.election.enable, else the broker's (read when an election needs it)."""
        override = self.zk.entity_config("topics", topic).get("unclean.leader.election.enable")
        if override is None:
            return self.config.unclean_leader_election_enable
        return override.strip().lower() == "true"

    def _watch_broker(self, broker_id: int) -> None:
        if broker_id not in self._watched_brokers:
            self._watched_brokers.add(broker_id)
            self.zk.watch_broker(broker_id, self._watch(
                lambda exists: BrokerModifications(broker_id) if exists else None,
                keep=lambda: broker_id in self._watched_brokers))

    def _watch_topic(self, topic: str) -> None:
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            self.zk.watch_topic(topic, self._watch(lambda exists: PartitionModifications(topic) if exists else None,
                                                   keep=lambda: topic in self._watched_topics))

    # ---- ZooKeeper events

    def _broker_change(self, event: BrokerChange) -> None:
        if not self.is_active:
            return
        brokers = self.zk.live_brokers()
        for broker in brokers:
            self._watch_broker(broker.broker_id)
        self._emit(events.process_broker_change(self.core, brokers))

    def _broker_modification(self, event: BrokerModifications) -> None:
        if not self.is_active:
            return
        broker = self.zk.broker(event.broker_id)
        if broker is not None:
            self._emit(events.process_broker_modification(self.core, broker))

    def _topic_change(self, event: TopicChange) -> None:
        if not self.is_active:
            return
        core = self.core
        assert core is not None
        topics = self.zk.topics()
        new_assignments = self.zk.topic_assignments(t for t in topics if t not in core.context.all_topics)
        for topic in new_assignments:
            self._watch_topic(topic)
        self._watched_topics.intersection_update(topics)
        self._emit(events.process_topic_change(core, topics, new_assignments))

    def _partition_modifications(self, event: PartitionModifications) -> None:
        if not self.is_active:
            return
        core = self.core
        assert core is not None
        assignment = self.zk.topic_assignment(event.topic)
        if assignment is None:
            return
        refused = self._emit(events.process_partition_modifications(core, assignment))
        if refused:  # partitions added to a topic being deleted: put the znode back as the controller knows it
            known = core.context.partition_full_replica_assignment_for_topic(event.topic)
            restored = TopicAssignment(event.topic, assignment.topic_id, dict(known))
            self.zk.set_topic_assignment(restored, core.context.epoch_zk_version)

    def _topic_deletion(self, event: TopicDeletion) -> None:
        if self.is_active:
            self._emit(events.process_topic_deletion(self.core, self.zk.topics_marked_for_deletion()))

    def _zk_preferred_replica_election(self, event: ZkPreferredReplicaElection) -> None:
        if not self.is_active or not self.zk.exists(zk_paths.PREFERRED_REPLICA_ELECTION):
            return
        core = self.core
        assert core is not None
        partitions = [TopicPartition(*tp) for tp in sorted(self.zk.preferred_replica_election())]
        self._emit(events.process_replica_leader_election(core, partitions, "preferred", "zk"))
        self.zk.delete_preferred_replica_election(core.context.epoch_zk_version)

    def _zk_partition_reassignment(self, event: ZkPartitionReassignment) -> None:
        if self.is_active and self.zk.exists(zk_paths.REASSIGN_PARTITIONS):
            self._emit(process_zk_partition_reassignment(self.core))

    def _auto_rebalance(self, event: AutoPreferredReplicaLeaderElection) -> None:
        self._rebalance_queued = False
        if self.is_active:
            self._emit(events.process_auto_preferred_replica_leader_election(self.core))

    def _response_received(self, event: ResponseReceived) -> None:
        if not self.is_active or event.generation != self._generation:
            return  # an answer to a channel that was closed since
        answer = event.event
        if isinstance(answer, LeaderAndIsrResponseReceived):
            self._emit(events.process_leader_and_isr_response(self.core, answer.broker_id, answer.error,
                                                              answer.partition_errors))
        elif isinstance(answer, TopicDeletionStopReplicaResponseReceived):
            self._emit(events.process_topic_deletion_stop_replica_response(self.core, answer.broker_id, answer.error,
                                                                          answer.partition_errors))
        elif answer.error != ErrorCode.NONE:
            log.warning("controller %d: broker %d answered UpdateMetadata with %s", self.broker_id, answer.broker_id,
                        answer.error.name)

    # ---- requests from brokers

    def _alter_partition(self, event: AlterPartitionReceived) -> AlterPartitionResponseData:
        if not self.is_active:
            return AlterPartitionResponseData(ErrorCode.NOT_CONTROLLER)
        return self._emit(process_alter_partition(self.core, event.request, event.version))

    def _controlled_shutdown(self, event: ControlledShutdown) -> tuple[ErrorCode, list[TopicPartition]]:
        if not self.is_active:
            return ErrorCode.NOT_CONTROLLER, []
        return self._emit(events.process_controlled_shutdown(self.core, event.broker_id, event.broker_epoch))

    def _elect_leaders(self, event: ElectLeaders) -> dict[TopicPartition, int | tuple[ErrorCode, str | None]]:
        if not self.is_active:
            return {tp: (ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE) for tp in event.partitions}
        return self._emit(events.process_replica_leader_election(self.core, event.partitions, event.election_type,
                                                                 "admin"))

    def _alter_reassignments(self, event: AlterReassignments) -> Any:
        if not self.is_active:
            return ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE
        return self._emit(process_api_partition_reassignment(self.core, dict(event.targets)))

    def _list_reassignments(self, event: ListReassignments) -> tuple[ErrorCode, dict[TopicPartition,
                                                                                     ReplicaAssignment]]:
        """Kafka's listPartitionReassignments: the partitions whose assignment is adding or removing replicas."""
        if not self.is_active:
            return ErrorCode.NOT_CONTROLLER, {}
        context = self.core.context
        known = set(context.all_partitions())
        wanted = known if event.partitions is None else {TopicPartition(*tp) for tp in event.partitions} & known
        found = {}
        for tp in wanted:
            assignment = context.partition_full_replica_assignment(tp)
            if is_being_reassigned(assignment):
                found[tp] = assignment
        return ErrorCode.NONE, found

    def _allocate_producer_ids(self, event: AllocateProducerIds) -> tuple[ErrorCode, ProducerIdBlock | None]:
        """Kafka's processAllocateProducerIds: the next block of /latest_producer_id_block for a registered broker
        at its current epoch."""
        if not self.is_active:
            return ErrorCode.NOT_CONTROLLER, None
        assert self.core is not None
        cached = self.core.context.broker_epoch(event.broker_id)
        if cached is None:
            log.warning("ignoring AllocateProducerIds from unknown broker %d", event.broker_id)
            return ErrorCode.BROKER_ID_NOT_REGISTERED, None
        if cached != event.broker_epoch:
            log.warning("ignoring AllocateProducerIds from broker %d at stale epoch %d", event.broker_id,
                        event.broker_epoch)
            return ErrorCode.STALE_BROKER_EPOCH, None
        try:
            return ErrorCode.NONE, self.zk.allocate_producer_id_block(event.broker_id)
        except Exception:
            log.exception("allocating producer ids for broker %d failed", event.broker_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR, None
