"""Stock clients against injected faults: each reacts as its documentation says (kbroker.faults, docs/testing.md).

These start a kbroker of their own (fault injection is kbroker's), so conftest skips them against any other
target with the reason "uses a kbroker of its own".
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError, RequestTimedOutError

from kbroker.testing import running_broker

from java_harness import JavaHarness, compile_harness

TOPIC = "payments"
MESSAGES = 20


@pytest.fixture
def broker(tmp_path) -> Iterator:
    with running_broker(tmp_path / "data", **{"group.initial.rebalance.delay.ms": "0"}) as running:
        running.broker.create_topic(TOPIC, 1)
        yield running


def _idempotent_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                     "retry.backoff.ms": 50, "message.timeout.ms": 30000})


def _produce_all(producer: Producer, count: int) -> list:
    """Send `count` values one by one (each its own request) and return the delivery errors."""
    errors = []
    for index in range(count):
        producer.produce(TOPIC, value=f"v{index}".encode(),
                         on_delivery=lambda error, _message: errors.append(error) if error else None)
        producer.flush(30)
    return errors


def _values(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if values:
                break
            continue
        if not message.error():
            values.append(message.value())
    consumer.close()
    return values


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: idempotent producer retries NOT_LEADER_OR_FOLLOWER")
def test_confluent_idempotent_producer_retries_not_leader_without_duplicates(broker) -> None:
    producer = _idempotent_producer(broker.bootstrap_servers)
    with broker.faults.record() as recording, \
            broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=3) as fault:
        errors = _produce_all(producer, MESSAGES)
    assert errors == []
    assert fault.fired == 3
    assert _values(broker.bootstrap_servers) == [f"v{i}".encode() for i in range(MESSAGES)]
    produces = recording.requests("Produce")
    refused = {_batch_id(entry) for entry in produces if entry["faults"]}
    accepted = {_batch_id(entry) for entry in produces if not entry["faults"]}
    assert refused <= accepted  # each refused batch came again, same producer id and sequence


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: lost produce answer is not a duplicate (idempotence)")
def test_confluent_idempotent_producer_stores_a_batch_once_when_its_answer_is_lost(broker) -> None:
    producer = _idempotent_producer(broker.bootstrap_servers)
    with broker.faults.inject(api="Produce", action="close_after", count=1) as fault:
        errors = _produce_all(producer, MESSAGES)
    assert (errors, fault.fired) == ([], 1)
    assert _values(broker.bootstrap_servers) == [f"v{i}".encode() for i in range(MESSAGES)]


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaHarness:
    return compile_harness(tmp_path_factory.mktemp("java-harness-faults"))


@pytest.mark.client("java")
@pytest.mark.scenario("Faults: idempotent producer retries NOT_LEADER_OR_FOLLOWER")
def test_java_idempotent_producer_retries_not_leader_without_duplicates(broker, java) -> None:
    with broker.faults.record() as recording, \
            broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=3) as fault:
        lines = java.run("produce", broker.bootstrap_servers, TOPIC, 0, MESSAGES)  # idempotent by default
    offsets = [line["offset"] for line in lines if line.get("type") == "record_metadata"]
    assert fault.fired == 3
    assert offsets == list(range(MESSAGES))
    assert broker.broker.partition_log(TOPIC, 0).log_end_offset == MESSAGES
    produces = recording.requests("Produce")
    refused = {_batch_id(entry) for entry in produces if entry["faults"]}
    accepted = {_batch_id(entry) for entry in produces if not entry["faults"]}
    assert refused <= accepted  # each refused batch came again, same producer id and sequence (idempotence)
    assert len({producer_id for producer_id, _ in refused | accepted}) == 1


@pytest.mark.client("kafka-python")
@pytest.mark.scenario("Faults: NOT_LEADER_OR_FOLLOWER refreshes metadata")
def test_kafka_python_refreshes_metadata_before_retrying_not_leader(broker) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=5, retry_backoff_ms=50)
    producer.send(TOPIC, b"warm-up").get(timeout=20)  # metadata known, connection open
    with broker.faults.record() as recording, \
            broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=1):
        sent = producer.send(TOPIC, b"after a leader change").get(timeout=20)
        deadline = time.monotonic() + 5  # the refresh is requested at once and sent beside the retry
        while "Metadata" not in _apis(recording) and time.monotonic() < deadline:
            time.sleep(0.05)
    producer.close()
    apis = _apis(recording)
    assert apis.index("Metadata") > apis.index("Produce")  # asked for after the refusal
    assert sent.offset == 1


@pytest.mark.client("kafka-python")
@pytest.mark.scenario("Faults: a hung broker trips the request timeout")
def test_kafka_python_request_times_out_against_a_hung_broker(broker) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0, request_timeout_ms=1500,
                             max_block_ms=5000)
    producer.send(TOPIC, b"warm-up").get(timeout=20)
    with broker.faults.inject(api="Produce", action="hang"):
        started = time.monotonic()
        with pytest.raises((KafkaTimeoutError, RequestTimedOutError)):
            producer.send(TOPIC, b"never answered").get(timeout=30)
        waited = time.monotonic() - started
    producer.close(timeout=5)
    assert 1.0 <= waited < 15


def _rejoin_after_session_expiry(broker, group: str, settings: dict) -> tuple[str, list[int], list]:
    """A consumer of `group` reads half the topic, commits, has its session expired, and reads on: (the member
    expired, how many messages had arrived at each assignment, every message read)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for index in range(MESSAGES):
        producer.produce(TOPIC, value=f"v{index}".encode())
    producer.flush(20)
    received: list = []
    assigned_at: list[int] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **settings})
    consumer.subscribe([TOPIC], on_assign=lambda _consumer, _partitions: assigned_at.append(len(received)))
    received += _consume(consumer, MESSAGES // 2)
    consumer.commit(asynchronous=False)
    (member,) = broker.faults.expire_session(group)
    deadline = time.monotonic() + 30
    while (len(assigned_at) < 2 or received[-1].offset() < MESSAGES - 1) and time.monotonic() < deadline:
        received += _consume(consumer, 1, timeout=0.5)
    consumer.close()
    return member, assigned_at, received


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: expired session, rebalance, resume from committed offsets")
def test_confluent_consumer_rejoins_after_session_expiry_and_resumes_from_committed_offset(broker) -> None:
    member, assigned_at, received = _rejoin_after_session_expiry(
        broker, "billing", {"session.timeout.ms": 10000, "heartbeat.interval.ms": 200})
    assert member
    assert len(assigned_at) == 2  # assigned, then assigned again after rejoining
    after_rejoin = received[assigned_at[1]:]
    assert [m.offset() for m in after_rejoin] == list(range(MESSAGES // 2, MESSAGES))  # from the committed offset


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: expired session, rebalance, resume from committed offsets")
def test_confluent_kip848_consumer_rejoins_after_session_expiry_and_resumes_from_committed_offset(broker) -> None:
    member, assigned_at, received = _rejoin_after_session_expiry(broker, "billing-848", {"group.protocol": "consumer"})
    assert member
    assert len(assigned_at) == 2  # assigned, fenced, then assigned again after joining with epoch 0
    assert [m.offset() for m in received[assigned_at[1]:]] == list(range(MESSAGES // 2, MESSAGES))


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: forced rebalance")
def test_confluent_kip848_consumer_reconciles_to_the_epoch_of_a_forced_rebalance(broker) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "rebalanced-848",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    groups = broker.broker.coordinator.consumer_groups.groups
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "never assigned"
        consumer.poll(0.2)
    epoch = groups["rebalanced-848"].group_epoch
    assert broker.faults.force_rebalance("rebalanced-848") is True
    (member,) = groups["rebalanced-848"].members.values()
    while member.member_epoch <= epoch:
        assert time.monotonic() < deadline + 30, "the member never reconciled to the new epoch"
        consumer.poll(0.2)
        (member,) = groups["rebalanced-848"].members.values()
    reconciled_to, group_epoch = member.member_epoch, groups["rebalanced-848"].group_epoch
    consumer.close()
    assert reconciled_to == group_epoch == epoch + 1


@pytest.mark.client("confluent-kafka")
@pytest.mark.scenario("Faults: coordinator loading, the consumer retries")
def test_confluent_consumer_waits_out_a_loading_coordinator(broker) -> None:
    faults = broker.faults.coordinator_unavailable("COORDINATOR_LOAD_IN_PROGRESS", count=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(TOPIC, value=b"v")
    producer.flush(20)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "loading",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    received = _consume(consumer, 1)
    consumer.close()
    assert [m.value() for m in received] == [b"v"]
    assert sum(fault.fired for fault in faults) >= 1


def _consume(consumer: Consumer, count: int, timeout: float = 30) -> list:
    received, deadline = [], time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            assert message.error().code() in (KafkaError._PARTITION_EOF,), message.error()
            continue
        received.append(message)
    return received


def _apis(recording) -> list[str]:
    return [entry["api"] for entry in list(recording.entries)]


def _batch_id(entry: dict) -> tuple[int, int]:
    """(producer id, base sequence) of a recorded produce's first batch."""
    batch = _first_batch(entry)
    return batch["producer_id"], batch["base_sequence"]


def _first_batch(entry: dict) -> dict:
    return entry["request"]["topic_data"][0]["partition_data"][0]["records"][0]
