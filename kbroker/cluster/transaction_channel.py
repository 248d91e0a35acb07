"""A cluster member's transaction requests to other brokers: COMMIT/ABORT markers to the leaders of a
transaction's partitions (Kafka's TransactionMarkerChannelManager, WriteTxnMarkers v1) and, for a partition
leader, the KIP-890 check that a producer's transaction has the partition (Kafka's AddPartitionsToTxnManager,
AddPartitionsToTxn v4 verify_only to the transactional id's coordinator).

Leaders and coordinators are found in the metadata cache; a request that cannot be sent (no leader known, a
connection refused or timed out) answers the retriable error its caller retries on, never raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kbroker.cluster.broker_connection import BrokerConnection
from kbroker.coordinator.hashing import partition_for
from kbroker.coordinator.transactions.records import TRANSACTION_TOPIC
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
WRITE_TXN_MARKERS, ADD_PARTITIONS_TO_TXN = 27, 24
MARKERS_VERSION = 1  # what Kafka 3.9's marker channel sends
VERIFY_VERSION = 4   # the first with verify_only, what Kafka 3.9's partition leaders send


class TransactionChannel:
    """Two connections per broker on the inter-broker listener, one for markers and one for verification (a leader
    holds a marker's answer until its ISR has it, which a producer's verification must not queue behind)."""

    def __init__(self, member, timeout_s: float) -> None:
        self.member = member
        self.timeout_s = timeout_s
        self._connections: dict[tuple[int, int], BrokerConnection] = {}

    def _connection(self, broker_id: int, api_key: int) -> BrokerConnection | None:
        endpoint = self.member.metadata.endpoint(broker_id, self.member.inter_broker_listener)
        if endpoint is None:
            return None
        connection = self._connections.get((broker_id, api_key))
        if connection is None:
            connection = BrokerConnection(endpoint.host, endpoint.port, f"broker-{self.member.broker_id}-txn",
                                          self.timeout_s)
            self._connections[(broker_id, api_key)] = connection
        elif (connection.host, connection.port) != (endpoint.host, endpoint.port):
            connection.retarget(endpoint.host, endpoint.port)
        return connection

    # --- markers ------------------------------------------------------------------------------

    async def write_markers(self, partitions: Iterable[tuple[str, int]], producer_id: int, producer_epoch: int,
                            coordinator_epoch: int, commit: bool) -> dict[tuple[str, int], ErrorCode]:
        """Each partition's answer from its leader: UNKNOWN_TOPIC_OR_PARTITION for a topic the cluster no longer
        has (its marker is not needed), a retriable error while its leader is unknown or unreachable."""
        metadata = self.member.metadata
        outcomes: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, index in partitions:
            state = metadata.partition(topic, index)
            if state is None:
                outcomes[(topic, index)] = ErrorCode.NOT_LEADER_OR_FOLLOWER if metadata.contains(topic) \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader < 0:
                outcomes[(topic, index)] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(state.leader, []).append((topic, index))
        answers = await asyncio.gather(*(
            self._markers_to(leader, found, producer_id, producer_epoch, coordinator_epoch, commit)
            for leader, found in by_leader.items()))
        for answer in answers:
            outcomes.update(answer)
        return outcomes

    async def _markers_to(self, leader: int, partitions: list[tuple[str, int]], producer_id: int,
                          producer_epoch: int, coordinator_epoch: int, commit: bool
                          ) -> dict[tuple[str, int], ErrorCode]:
        R = messages.WriteTxnMarkersRequest
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = R(markers=[R.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=indexes)
                    for topic, indexes in by_topic.items()])])
        connection = self._connection(leader, WRITE_TXN_MARKERS)
        if connection is None:
            return dict.fromkeys(partitions, ErrorCode.LEADER_NOT_AVAILABLE)
        try:
            answer = await _in_task(connection.request(WRITE_TXN_MARKERS, MARKERS_VERSION, request))
        except Exception as error:  # the leader is down or slow: the coordinator retries
            log.info("cannot send markers to broker %d: %r", leader, error)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        outcomes: dict[tuple[str, int], ErrorCode] = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
        for marker in answer.markers:
            for topic in marker.topics:
                for result in topic.partitions:
                    if (topic.name, result.partition_index) in outcomes:
                        outcomes[(topic.name, result.partition_index)] = _error(result.error_code)
        return outcomes

    # --- produce verification -----------------------------------------------------------------

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker leading the id's `__transaction_state` partition, -1 if none is known."""
        states = self.member.metadata.partitions(TRANSACTION_TOPIC)
        if not states:
            return -1
        return states[partition_for(transactional_id, len(states))].leader

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partition: tuple[str, int]) -> ErrorCode:
        """The coordinator's verify-only answer for one partition; COORDINATOR_NOT_AVAILABLE when it cannot be
        asked (the produce is then refused with a retriable error)."""
        coordinator = self.coordinator_of(transactional_id)
        connection = self._connection(coordinator, ADD_PARTITIONS_TO_TXN) if coordinator >= 0 else None
        if connection is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        R = messages.AddPartitionsToTxnRequest
        topic, index = partition
        request = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=True, topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=[index])])])
        try:
            answer = await _in_task(connection.request(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, request))
        except Exception as error:
            log.info("cannot ask broker %d to verify a transaction: %r", coordinator, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if answer.error_code:
            return _error(answer.error_code)
        for result in answer.results_by_transaction:
            for topic_result in result.topic_results:
                for partition_result in topic_result.results_by_partition:
                    if (topic_result.name, partition_result.partition_index) == partition:
                        return _error(partition_result.partition_error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


async def _in_task(request):
    """A request's own task: its timeout needs one, and a request handler may be driven without (the network layer
    steps handlers that finish at once itself)."""
    return await asyncio.ensure_future(request)


def _error(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
