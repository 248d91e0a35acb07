"""The transaction coordinator's APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27, a partition leader's side), DescribeTransactions (65), ListTransactions (66).

InitProducerId lives with the producer ids (producers.py) and TxnOffsetCommit with the group coordinator
(offsets.py). A single node serves transactions v1 (Kafka 3.9's protocol, what librdkafka and older clients speak)
and, as Kafka 4 does, transactions v2 (KIP-890 part 2: EndTxn v5, partitions added by their leaders) for the
clients the transaction.version feature in ApiVersions steers there; a ZooKeeper-mode cluster serves v1 only, as
Kafka 3.9 (docs/compatibility.md).
"""

from __future__ import annotations

from kbroker.apis.registry import handles
from kbroker.broker import Broker, now_ms
from kbroker.coordinator.topic_regex import InvalidRegex
from kbroker.coordinator.transactions.markers import write_marker
from kbroker.coordinator.transactions.records import TRANSACTIONS_V2
from wire import messages
from wire.errors import ErrorCode

FENCED_AS_EPOCH_BEFORE = 2  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn below v2 know no PRODUCER_FENCED
TRANSACTIONS_V2_END_TXN = 5  # EndTxn from v5 ends a transactions v2 transaction (Kafka's transactionVersionForEndTxn)
BROKER_ADD_FROM = 4  # AddPartitionsToTxn v4+ is sent by brokers, which may name internal topics (the group's offsets)


def _for_version(error: ErrorCode, version: int) -> ErrorCode:
    """Kafka's answer to clients that predate PRODUCER_FENCED (KIP-588)."""
    if error == ErrorCode.PRODUCER_FENCED and version < FENCED_AS_EPOCH_BEFORE:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _refused_partitions(broker: Broker, topics, internal_allowed: bool) -> dict[tuple[str, int], ErrorCode]:
    """Partitions no transaction may name: internal topics' from a client (Kafka authorizes only the others, so a
    marker never lands in __transaction_state; a broker adding a group's offsets partition may name them) and
    unknown ones (in a cluster: unknown to the metadata cache)."""
    known = broker.known_topics()[0]
    refused = {}
    for topic in topics:
        for partition in topic.partitions:
            if topic.name in INTERNAL_TOPICS and not internal_allowed:
                refused[(topic.name, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic.name not in known or not 0 <= partition < known[topic.name].partitions:
                refused[(topic.name, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return refused


async def _add_partitions(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int, topics,
                    verify_only: bool, version: int):
    """One transaction's topic results: refused partitions their error and the rest OPERATION_NOT_ATTEMPTED (Kafka
    adds none then), else the coordinator's one answer for all."""
    Response = messages.AddPartitionsToTxnResponse
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    coordinator = broker.transactions
    from_broker = version >= BROKER_ADD_FROM  # a partition leader or group coordinator for its producer
    refused = {} if verify_only else _refused_partitions(broker, topics, internal_allowed=from_broker)
    if refused:  # in Kafka's order: unauthorized (internal) topics, unknown ones, then the rest
        order = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        errors = {tp: code for code in order for tp, refusal in refused.items() if refusal == code}
        errors.update((tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted if tp not in refused)
    elif verify_only:  # a partition leader asking whether the producer added these (KIP-890)
        errors = {tp: coordinator.verify(transactional_id, producer_id, producer_epoch, tp) for tp in wanted}
    else:
        added = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted,
                                                 TRANSACTIONS_V2 if from_broker else 0)
        error = _for_version(added, version)
        errors = {tp: error for tp in wanted}
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(Response.AddPartitionsToTxnPartitionResult(
            partition_index=partition, partition_error_code=error))
    return [Response.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results)
            for topic, results in by_topic.items()]


@handles(24)
async def add_partitions_to_txn(broker: Broker, header, request):
    Response = messages.AddPartitionsToTxnResponse
    version = header.request_api_version
    if version <= 3:
        return Response(throttle_time_ms=0, results_by_topic_v3_and_below=await _add_partitions(
            broker, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False, version))
    return Response(throttle_time_ms=0, error_code=0, results_by_transaction=[
        Response.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=await _add_partitions(
            broker, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only, version))
        for t in request.transactions])


@handles(25)
async def add_offsets_to_txn(broker: Broker, header, request):
    coordinator = broker.transactions
    error = await coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                       [coordinator.group_partition(request.group_id)])
    return messages.AddOffsetsToTxnResponse(throttle_time_ms=0,
                                            error_code=_for_version(error, header.request_api_version))


@handles(26)
async def end_txn(broker: Broker, header, request):
    """v5 is transactions v2 (KIP-890 part 2): the epoch is bumped by every end, and the answer names the producer id
    and epoch the client continues with."""
    version = header.request_api_version
    coordinator = broker.transactions
    if version >= TRANSACTIONS_V2_END_TXN:
        error, producer_id, epoch = await coordinator.end_transaction_v2(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
        return messages.EndTxnResponse(throttle_time_ms=0, error_code=error, producer_id=producer_id,
                                       producer_epoch=epoch)
    error = await coordinator.end_transaction(request.transactional_id, request.producer_id,
                                              request.producer_epoch, request.committed)
    return messages.EndTxnResponse(throttle_time_ms=0, error_code=_for_version(error, version))


@handles(27)
async def write_txn_markers(broker: Broker, header, request):
    """Markers from a coordinator (or Admin.abortTransaction) for partitions this broker leads; in a cluster answered
    once each partition's ISR has its marker, as Kafka appends them with acks=all."""
    Response = messages.WriteTxnMarkersResponse
    now = now_ms()
    written: dict[tuple[str, int], int] = {}  # partition -> the end of its marker
    results = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                error, end = write_marker(broker, topic.name, index, marker.producer_id, marker.producer_epoch,
                                          marker.coordinator_epoch, marker.transaction_result, now)
                partitions.append(Response.WritableTxnMarkerPartitionResult(partition_index=index, error_code=error))
                if end >= 0:
                    written[(topic.name, index)] = max(end, written.get((topic.name, index), end))
            topics.append(Response.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions))
        results.append(Response.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    if written and getattr(broker, "cluster", None) is not None:
        await _replicated(broker, written, results)
    return Response(markers=results)


async def _replicated(broker: Broker, written: dict[tuple[str, int], int], results) -> None:
    errors = await broker.replicas.wait_for_acks(written, int(broker.config["request.timeout.ms"]))
    for marker in results:
        for topic in marker.topics:
            for partition in topic.partitions:
                error = errors.get((topic.name, partition.partition_index))
                if error and not partition.error_code:
                    partition.error_code = error


@handles(65)
async def describe_transactions(broker: Broker, header, request):
    Response = messages.DescribeTransactionsResponse
    states = []
    for transactional_id in request.transactional_ids:
        error, metadata = broker.transactions.describe(transactional_id)
        if metadata is None:
            states.append(Response.TransactionState(  # Kafka leaves the other fields at their defaults
                error_code=error, transactional_id=transactional_id, transaction_state="", transaction_timeout_ms=0,
                transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[]))
            continue
        states.append(Response.TransactionState(
            error_code=0, transactional_id=transactional_id, transaction_state=metadata.state.kafka_name,
            transaction_timeout_ms=metadata.timeout_ms, transaction_start_time_ms=metadata.start_ms,
            producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
            topics=[Response.TopicData(topic=topic, partitions=partitions)
                    for topic, partitions in metadata.topics().items()]))
    return Response(throttle_time_ms=0, transaction_states=states)


@handles(66)
async def list_transactions(broker: Broker, header, request):
    Response = messages.ListTransactionsResponse
    version = header.request_api_version
    try:
        unknown, found = broker.transactions.list(
            list(request.state_filters), set(request.producer_id_filters),
            request.duration_filter if version >= 1 else -1,
            request.transactional_id_pattern if version >= 2 else None)
    except InvalidRegex:  # Kafka's InvalidRegularExpression, answered by KafkaApis' getErrorResponse
        return Response(throttle_time_ms=0, error_code=ErrorCode.INVALID_REGULAR_EXPRESSION, unknown_state_filters=[],
                        transaction_states=[])
    return Response(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=[
        Response.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                  transaction_state=m.state.kafka_name) for m in found])
