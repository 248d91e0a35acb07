"""The controller's channel to the brokers, as Kafka 3.9's ControllerChannelManager: one connection and one queue
per live broker, requests sent one at a time in the order the controller made them.

A broker is reached on the endpoint its registration gives for the inter-broker listener. Each broker has its own
sender task: it takes the next request from the broker's queue, sends it, waits for the answer (or retries the
same request on a fresh connection after a backoff, as Kafka's RequestSendThread does, for as long as the broker
is in the channel), and hands the answer on as an event. A broker that died, or came back with a new epoch or
endpoint, loses its queue: what was still queued for it is dropped, as the controller will tell the new
incarnation everything again.

The request batches (controller_requests) are dataclasses named as Kafka's JSON specs name the fields, so they
become wire messages field by field: LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4, the versions Kafka 3.9's
controller sends. Answers become the events the controller acts on: LeaderAndIsr partition errors (offline log
dirs) and StopReplica answers for replicas being deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kbroker.cluster.broker_connection import BrokerConnection
from kbroker.cluster.controller_context import TopicPartition
from kbroker.cluster.controller_requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    BrokerRequests,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from kbroker.cluster.model import BrokerRegistration, EndPoint
from wire import DecodeError, messages
from wire.codegen import Message
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
REQUEST_TIMEOUT_S = 30.0  # controller.socket.timeout.ms
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.1, 1.0

ControllerRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
_API_OF: dict[type, tuple[int, int]] = {
    LeaderAndIsrRequest: (LEADER_AND_ISR, LEADER_AND_ISR_VERSION),
    UpdateMetadataRequest: (UPDATE_METADATA, UPDATE_METADATA_VERSION),
    StopReplicaRequest: (STOP_REPLICA, STOP_REPLICA_VERSION),
}


# ---------------------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class LeaderAndIsrResponseReceived:
    broker_id: int
    error: ErrorCode
    partition_errors: Mapping[TopicPartition, ErrorCode]


@dataclass(frozen=True)
class TopicDeletionStopReplicaResponseReceived:
    """A StopReplica answer, restricted to the replicas the request asked to delete."""

    broker_id: int
    error: ErrorCode
    partition_errors: Mapping[TopicPartition, ErrorCode]


@dataclass(frozen=True)
class UpdateMetadataResponseReceived:
    broker_id: int
    error: ErrorCode


ResponseEvent = LeaderAndIsrResponseReceived | TopicDeletionStopReplicaResponseReceived | UpdateMetadataResponseReceived


def response_event(broker_id: int, request: ControllerRequest, response: Message) -> ResponseEvent | None:
    """What the controller learns from one answer (None: nothing to act on)."""
    error = ErrorCode(response.error_code)
    if isinstance(request, LeaderAndIsrRequest):
        names = {t.topic_id: t.topic_name for t in request.topic_states}
        errors = {TopicPartition(names[t.topic_id], p.partition_index): ErrorCode(p.error_code)
                  for t in response.topics if t.topic_id in names for p in t.partition_errors}
        return LeaderAndIsrResponseReceived(broker_id, error, errors)
    if isinstance(request, StopReplicaRequest):
        deleting = {tp for tp, state in request.partition_states().items() if state.delete_partition}
        errors = {TopicPartition(p.topic_name, p.partition_index): ErrorCode(p.error_code)
                  for p in response.partition_errors}
        errors = {tp: e for tp, e in errors.items() if tp in deleting}
        return TopicDeletionStopReplicaResponseReceived(broker_id, error, errors) if errors else None
    return UpdateMetadataResponseReceived(broker_id, error)


# ---------------------------------------------------------------------------------------------- wire


def to_wire(request: ControllerRequest) -> Message:
    """A request batch dataclass as the wire message of the same name, field by field (the message's structs
    are classes on the top-level message class, named as the dataclasses are)."""
    top = getattr(messages, type(request).__name__)
    return _convert(request, top, top)


def _convert(value: object, cls: type, top: type) -> Message:
    fields = {}
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        item = getattr(value, f.name)
        if isinstance(item, tuple):
            item = [_convert(v, getattr(top, type(v).__name__), top) if dataclasses.is_dataclass(v) else v
                    for v in item]
        fields[f.name] = item
    return cls(**fields)



# ---------------------------------------------------------------------------------------------- per broker


class BrokerSender:
    """The queue and sender task of one broker (Kafka's ControllerBrokerStateInfo and RequestSendThread)."""

    def __init__(self, broker: BrokerRegistration, endpoint: EndPoint, client_id: str, timeout_s: float,
                 on_event: Callable[[ResponseEvent], None]) -> None:
        self.broker = broker
        self.endpoint = endpoint
        self.queue: asyncio.Queue[ControllerRequest] = asyncio.Queue()
        self._connection = BrokerConnection(endpoint.host, endpoint.port, client_id, timeout_s)
        self._on_event = on_event
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-to-{broker.broker_id}")

    async def _run(self) -> None:
        while True:
            request = await self.queue.get()
            response = await self._send_until_answered(request)
            if response is None:
                continue
            try:
                event = response_event(self.broker.broker_id, request, response)
            except Exception:
                log.exception("cannot read broker %d's answer to %s", self.broker.broker_id, type(request).__name__)
                continue
            if event is not None:
                self._on_event(event)

    async def _send_until_answered(self, request: ControllerRequest) -> Message | None:
        api_key, version = _API_OF[type(request)]
        try:
            body = to_wire(request)
        except Exception:  # a bug of ours must not stop the broker's sender: drop this one request
            log.exception("cannot build %s for broker %d", type(request).__name__, self.broker.broker_id)
            return None
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                return await self._connection.request(api_key, version, body)
            except DecodeError:
                log.exception("broker %d answered %s in a form we cannot read", self.broker.broker_id,
                              type(request).__name__)
                self._connection.close()
                return None
            except (OSError, EOFError, TimeoutError) as error:
                log.warning("controller to broker %d (%s:%d): %s; retrying in %.1f s", self.broker.broker_id,
                            self.endpoint.host, self.endpoint.port, error, backoff)
                self._connection.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._connection.close()


# ---------------------------------------------------------------------------------------------- the channel


class ControllerChannel:
    """Senders for the live brokers, kept in step with the controller's view of who is registered."""

    def __init__(self, controller_id: int, listener: str, on_event: Callable[[ResponseEvent], None],
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.controller_id = controller_id
        self.listener = listener
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.senders: dict[int, BrokerSender] = {}
        self._stopping: set[asyncio.Task] = set()

    def sync(self, brokers: Iterable[BrokerRegistration]) -> None:
        """Start senders for new brokers, restart those whose epoch or endpoints changed, stop those gone."""
        wanted = {b.broker_id: b for b in brokers}
        for broker_id, sender in list(self.senders.items()):
            broker = wanted.get(broker_id)
            if broker is None or broker.broker_epoch != sender.broker.broker_epoch or \
                    broker.endpoint(self.listener) != sender.endpoint:
                self.remove_broker(broker_id)
        for broker_id, broker in wanted.items():
            if broker_id not in self.senders:
                self.add_broker(broker)

    def add_broker(self, broker: BrokerRegistration) -> None:
        endpoint = broker.endpoint(self.listener)
        if endpoint is None:
            log.error("broker %d has no %s endpoint: the controller cannot reach it", broker.broker_id, self.listener)
            return
        self.senders[broker.broker_id] = BrokerSender(broker, endpoint, f"controller-{self.controller_id}",
                                                      self.timeout_s, self.on_event)

    def remove_broker(self, broker_id: int) -> None:
        """Stop the broker's sender and drop what was queued for it."""
        sender = self.senders.pop(broker_id, None)
        if sender is not None:
            task = asyncio.get_running_loop().create_task(sender.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def send(self, batch: BrokerRequests) -> None:
        """Queue a batch as Kafka sends one: every LeaderAndIsr, then every UpdateMetadata, then every StopReplica."""
        for requests in (batch.leader_and_isr, batch.update_metadata, batch.stop_replica):
            for broker_id, request in requests.items():
                sender = self.senders.get(broker_id)
                if sender is None:
                    log.debug("not sending %s to broker %d: not in the channel", type(request).__name__, broker_id)
                    continue
                sender.queue.put_nowait(request)

    async def close(self) -> None:
        for broker_id in list(self.senders):
            self.remove_broker(broker_id)
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)
