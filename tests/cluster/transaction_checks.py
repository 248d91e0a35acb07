"""What the cluster transaction tests share: a transactional producer and a read_committed check over one topic
(stock clients only: confluent-kafka's transactional producer, kafka-python's and confluent-kafka's read_committed
consumers), and the coordinator a transactional id has now."""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition
from kbroker_process import KbrokerCluster
from waiting import wait_until

KEY_TYPE_TRANSACTION = 1
TOPIC = "transactional"
PARTITIONS = 3
TIMEOUT = 60
FAILOVER_S = 6 + TIMEOUT  # a ZooKeeper session of 6 s to expire, then the election


def transaction_coordinator(cluster: KbrokerCluster, transactional_id: str) -> int:
    """The broker FindCoordinator names for the transactional id; -1 while none is available."""
    return cluster.coordinator(transactional_id, KEY_TYPE_TRANSACTION)


def leader_of(cluster: KbrokerCluster, partition: int) -> int:
    """TOPIC-`partition`'s leader once every live broker's Metadata agrees on it (an ISR change under way makes
    their answers differ for a moment)."""
    return wait_until(lambda: cluster.agreed(partition, TOPIC), f"the brokers agree on {TOPIC}-{partition}")[0]


def state_leaders(cluster: KbrokerCluster, partitions: int) -> dict[int, int]:
    """`__transaction_state`'s partition -> leader, once the Metadata of the broker asked shows all of them led."""
    def found() -> dict[int, int] | None:
        topic = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0}) \
            .list_topics("__transaction_state", timeout=10).topics.get("__transaction_state")
        if topic is None or len(topic.partitions) != partitions or any(p.leader < 0 for p in topic.partitions.values()):
            return None
        return {index: p.leader for index, p in topic.partitions.items()}
    return wait_until(found, "__transaction_state's partitions have leaders")


def new_coordinator(cluster: KbrokerCluster, transactional_id: str, old: int) -> int:
    """Once another broker than `old` coordinates the id (its state partition's leader moved)."""
    return wait_until(lambda: (found := transaction_coordinator(cluster, transactional_id)) not in (old, -1) and found,
                      "another broker coordinates the transactional id", timeout=FAILOVER_S)


@contextlib.contextmanager
def killed(cluster: KbrokerCluster, broker_id: int) -> Iterator[None]:
    """kill -9 of the broker for the block; restarted after it, and waited for back in every ISR of TOPIC."""
    cluster.brokers[broker_id].stop(signal.SIGKILL)
    try:
        yield
    finally:
        cluster.brokers[broker_id].start()
        everyone = tuple(sorted(cluster.brokers))
        for index in range(PARTITIONS):
            wait_until(lambda i=index: cluster.in_sync(i, TOPIC, everyone), f"{TOPIC}-{index} has its full ISR")


def transactional_producer(cluster: KbrokerCluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": transactional_id,
                         "log_level": 0, "transaction.timeout.ms": 60_000})
    producer.init_transactions(TIMEOUT)
    return producer


def produce_all(producer: Producer, values: list[bytes]) -> None:
    """One record per value, round-robin over the topic's partitions, all acknowledged."""
    errors = []
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, partition=i % PARTITIONS,
                         on_delivery=lambda error, _: error is not None and errors.append(error))
    producer.flush(TIMEOUT)
    assert not errors, errors


def retrying(action, what: str, timeout: float = FAILOVER_S) -> None:
    """A transactional call the client itself reports as retriable, repeated until it succeeds (what an application
    does with librdkafka's transactional API while its coordinator fails over)."""
    def attempt() -> bool:
        try:
            action()
        except KafkaException as error:
            if error.args[0].retriable():
                return False
            raise
        return True
    wait_until(attempt, what, timeout=timeout)


def end_offsets(cluster: KbrokerCluster, isolation_level: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap().split(","), isolation_level=isolation_level)
    try:
        found = consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    return {tp.partition: offset for tp, offset in found.items()}


def stable(cluster: KbrokerCluster) -> bool:
    """No transaction is open in the topic: every partition's last stable offset is its high watermark."""
    try:
        return end_offsets(cluster, "read_committed") == end_offsets(cluster, "read_uncommitted")
    except Exception:
        return False


def committed_values(cluster: KbrokerCluster) -> list[bytes]:
    """Every value a read_committed consumer reads from the whole topic, once the topic is stable."""
    wait_until(lambda: stable(cluster), "every transaction in the topic ended (LSO = HW)",
               timeout=FAILOVER_S)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "log_level": 0})
    seen: list[bytes] = []
    try:
        consumer.assign([ConfluentPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        wait_until(lambda: _poll_into(consumer, seen, at_end) and len(at_end) == PARTITIONS,
                   "the read_committed consumer reached the end of every partition")
    finally:
        consumer.close()
    return seen


def _poll_into(consumer: Consumer, seen: list[bytes], at_end: set[int]) -> bool:
    for message in consumer.consume(500, timeout=0.5):
        if message.error() is None:
            seen.append(message.value())
        elif message.error().code() == -191:  # _PARTITION_EOF
            at_end.add(message.partition())
    return True


def offsets_committed_with_transactions(cluster: KbrokerCluster, producer: Producer, group: str, partition: int,
                                        committed: int, aborted: int) -> int:
    """The group's committed offset of TOPIC-`partition` after a transaction sent it `committed` and committed, then
    another sent it `aborted` and aborted (each also producing one record)."""
    metadata = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "log_level": 0})
    try:
        for offset, commit in ((committed, True), (aborted, False)):
            producer.begin_transaction()
            produce_all(producer, [f"{group}-output-{offset}".encode()])
            producer.send_offsets_to_transaction([ConfluentPartition(TOPIC, partition, offset)],
                                                 metadata.consumer_group_metadata(), TIMEOUT)
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.abort_transaction(TIMEOUT)
        wait_until(lambda: stable(cluster), "both transactions ended")
        return metadata.committed([ConfluentPartition(TOPIC, partition)], timeout=TIMEOUT)[0].offset
    finally:
        metadata.close()


def read_after_commit_and_abort(cluster: KbrokerCluster, producer: Producer, prefix: str, count: int) -> list[bytes]:
    """The values a read_committed consumer reads anew after the producer's transaction of `count` records
    `<prefix>-committed-<i>` commits and the next one, of `<prefix>-aborted-<i>`, aborts."""
    before = set(committed_values(cluster))
    for outcome in ("committed", "aborted"):
        producer.begin_transaction()
        produce_all(producer, [f"{prefix}-{outcome}-{i}".encode() for i in range(count)])
        if outcome == "committed":
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    return [v for v in committed_values(cluster) if v not in before]
