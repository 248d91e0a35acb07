"""The broker's requests to its controller: AlterPartition, ControlledShutdown, and the ISR shrink check.

As Kafka 3.9's AlterPartitionManager over a BrokerToControllerChannelManager (ZooKeeper mode):
- the controller is whichever broker the metadata cache names, reached on the inter-broker listener;
- ISR changes the partitions propose (expand when a follower catches up, shrink when one lags) are queued,
  at most one per partition (the Partition keeps one in flight), and sent together as AlterPartition v3 (topic
  ids, ISR members with broker epoch -1 as a ZooKeeper-mode broker sends them), one request in flight;
- an answer per partition is applied with `isr_change_confirmed` / `isr_change_failed`; a refused request
  (NOT_CONTROLLER, STALE_BROKER_EPOCH...) or a failed connection sends the same proposals again after a
  backoff, as do partition errors the Partition says are worth retrying;
- every replica.lag.time.max.ms / 2 the ISRs of the partitions led here are checked for lagging followers
  (Kafka's isr-expiration task);
- a graceful stop first asks the controller for a controlled shutdown (ControlledShutdown v3), retried
  controlled.shutdown.max.retries times, controlled.shutdown.retry.backoff.ms apart, while partitions remain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from kbroker.cluster.broker_connection import BrokerConnection
from kbroker.cluster.model import EndPoint, LeaderAndIsr
from kbroker.cluster.partition import Partition
from kbroker.cluster.replica_manager import ReplicaManager
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

ALTER_PARTITION, CONTROLLED_SHUTDOWN = 56, 7
ALTER_PARTITION_VERSION, CONTROLLED_SHUTDOWN_VERSION = 3, 3
NO_BROKER_EPOCH = -1
RETRY_BACKOFF_S = 0.05  # Kafka retries a failed AlterPartition quickly (50 ms)
REQUEST_TIMEOUT_S = 30.0


class ControllerChannel:
    """A connection to whichever broker is the controller now (it follows `controller()`)."""

    def __init__(self, controller: Callable[[], EndPoint | None], client_id: str) -> None:
        self.controller = controller
        self.client_id = client_id
        self._connection: BrokerConnection | None = None

    async def request(self, api_key: int, version: int, body: object, timeout_s: float = REQUEST_TIMEOUT_S):
        """The controller's answer; ConnectionError when no controller is known."""
        endpoint = self.controller()
        if endpoint is None:
            raise ConnectionError("no controller is known")
        if self._connection is None:
            self._connection = BrokerConnection(endpoint.host, endpoint.port, self.client_id, timeout_s)
        else:
            self._connection.retarget(endpoint.host, endpoint.port)
        answer = await self._connection.request(api_key, version, body, timeout_s)  # type: ignore[arg-type]
        if getattr(answer, "error_code", ErrorCode.NONE) == ErrorCode.NOT_CONTROLLER:
            self.close()  # as Kafka's NodeToControllerRequestThread: look the controller up again next time
        return answer

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


class AlterPartitionManager:
    """Sends the ISR changes the partitions propose; see the module docstring."""

    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], channel: ControllerChannel,
                 replicas: ReplicaManager, topic_id: Callable[[str], uuid.UUID | None]) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.channel = channel
        self.replicas = replicas
        self.topic_id = topic_id
        self._pending: dict[tuple[str, int], tuple[Partition, LeaderAndIsr]] = {}
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.replicas.propose_isr = self.submit
        self._tasks = [loop.create_task(self._send_loop(), name="alter-partition"),
                       loop.create_task(self._shrink_loop(), name="isr-expiration")]

    async def stop(self) -> None:
        self.replicas.propose_isr = None
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.channel.close()

    def submit(self, partition: Partition, proposed: LeaderAndIsr) -> None:
        """The replica manager's `propose_isr` hook: queue the proposal (it replaces an unsent older one)."""
        self._pending[(partition.topic, partition.index)] = (partition, proposed)
        self._wakeup.set()

    async def _shrink_loop(self) -> None:
        interval = max(self.replicas.replica_lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.replicas.maybe_shrink_isrs()
            except Exception:
                log.exception("ISR shrink check failed")

    async def _send_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._pending = self._pending, {}
            if not batch:
                continue
            retry = await self._send(batch)
            for key, item in retry.items():
                self._pending.setdefault(key, item)
            if retry:
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wakeup.set()

    def _request(self, batch: dict[tuple[str, int], tuple[Partition, LeaderAndIsr]]):
        R = messages.AlterPartitionRequest
        by_topic: dict[uuid.UUID, list] = {}
        for (topic, index), (_, proposed) in batch.items():
            topic_id = self.topic_id(topic) or uuid.UUID(int=0)
            by_topic.setdefault(topic_id, []).append(R.PartitionData(
                partition_index=index, leader_epoch=proposed.leader_epoch,
                new_isr_with_epochs=[R.BrokerState(broker_id=b, broker_epoch=NO_BROKER_EPOCH) for b in proposed.isr],
                leader_recovery_state=proposed.leader_recovery_state, partition_epoch=proposed.partition_epoch))
        return R(broker_id=self.broker_id, broker_epoch=self.broker_epoch(),
                 topics=[R.TopicData(topic_id=topic_id, partitions=parts) for topic_id, parts in by_topic.items()])

    async def _send(self, batch: dict[tuple[str, int], tuple[Partition, LeaderAndIsr]]) -> dict:
        """Send one batch; returns the proposals to send again."""
        try:
            answer = await self.channel.request(ALTER_PARTITION, ALTER_PARTITION_VERSION, self._request(batch))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.debug("AlterPartition failed, will retry: %s", error)  # every retry: a line each would flood the log
            return batch
        if answer.error_code:
            log.info("AlterPartition refused: %s", ErrorCode(answer.error_code).name)
            return batch
        by_id = {(self.topic_id(t) or uuid.UUID(int=0), i): (t, i) for t, i in batch}
        retry = {}
        for topic in answer.topics:
            for p in topic.partitions:
                key = by_id.get((topic.topic_id, p.partition_index))
                if key is None:
                    continue
                partition, proposed = batch[key]
                if p.error_code == ErrorCode.NONE:
                    confirmed = LeaderAndIsr(p.leader_id, p.leader_epoch, tuple(p.isr), p.leader_recovery_state,
                                             p.partition_epoch)
                    partition.isr_change_confirmed(proposed, confirmed)  # it logs "ISR updated to ..."
                elif partition.isr_change_failed(proposed, ErrorCode(p.error_code)):
                    retry[key] = batch[key]
        return retry


async def controlled_shutdown(channel: ControllerChannel, broker_id: int, broker_epoch: int,
                              max_retries: int, backoff_ms: int) -> bool:
    """Ask the controller to move leadership away before this broker stops; True once it agreed."""
    request = messages.ControlledShutdownRequest(broker_id=broker_id, broker_epoch=broker_epoch)
    for attempt in range(max_retries + 1):
        try:
            answer = await channel.request(CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION, request)
            if answer.error_code == ErrorCode.NONE and not answer.remaining_partitions:
                log.info("controlled shutdown succeeded")
                return True
            log.info("controlled shutdown: %s, %d partitions remain", ErrorCode(answer.error_code).name,
                     len(answer.remaining_partitions))
        except Exception as error:
            log.info("controlled shutdown attempt %d failed: %s", attempt + 1, error)
        if attempt < max_retries:
            await asyncio.sleep(backoff_ms / 1000)
    log.warning("proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")
    return False
