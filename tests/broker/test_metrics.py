"""The Prometheus endpoint of one broker: off unless prometheus.port is set, and every figure of docs/metrics.md
moves when its event happens. A real broker, stock clients, /metrics scraped over HTTP."""

from __future__ import annotations

import logging
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kbroker.testing import BrokerThread, running_broker

TIMEOUT = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """One broker with metrics on (any free port) that fsyncs every append, so flushes happen."""
    with running_broker(tmp_path_factory.mktemp("metrics"), **{"prometheus.port": "0",
                                                               "log.flush.interval.messages": "1",
                                                               "group.initial.rebalance.delay.ms": "0"}) as started:
        yield started


def scrape(broker: BrokerThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    url = f"http://127.0.0.1:{broker.running.metrics_endpoint.port}/metrics"
    with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(broker: BrokerThread, name: str, **labels: str) -> float:
    return scrape(broker).get((name, tuple(sorted(labels.items()))), 0.0)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def new_topic(broker: BrokerThread, partitions: int = 1) -> str:
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    return name


def produce(broker: BrokerThread, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50})
    for item in values:
        producer.produce(topic, item, partition=0)
    assert producer.flush(TIMEOUT) == 0


def consumer(broker: BrokerThread, group: str, **settings: object) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **settings})


def test_without_prometheus_port_there_is_no_endpoint_and_nothing_is_counted(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as plain:
        assert plain.running.metrics_endpoint is None
        assert plain.broker.metrics is None


def test_prometheus_port_is_accepted_without_an_unknown_key_warning(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    from kbroker import config

    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        built = config.build({"prometheus.port": "9404", "prometheus.host": "0.0.0.0"})
    assert (built["prometheus.port"], built["prometheus.host"]) == (9404, "0.0.0.0")
    assert not [r for r in caplog.records if "unknown" in r.getMessage()]


@pytest.mark.parametrize(("settings", "address"), [
    ({"listeners": "PLAINTEXT://10.1.2.3:9092", "prometheus.port": "9404"}, ("10.1.2.3", 9404)),
    ({"listeners": "PLAINTEXT://:9092", "prometheus.port": "9404"}, ("127.0.0.1", 9404)),
    ({"prometheus.port": "9404", "prometheus.host": "0.0.0.0"}, ("0.0.0.0", 9404)),
    ({}, None),
])
def test_the_endpoint_listens_on_prometheus_host_else_the_first_listeners_host(settings: dict, address) -> None:
    from kbroker import config
    from kbroker.metrics import endpoint_address

    assert endpoint_address(config.build(settings)) == address


def test_describe_configs_does_not_report_the_prometheus_settings(broker: BrokerThread) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker.broker.node_id))
    described = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert "log.dirs" in described
    assert not [name for name in described if name.startswith("prometheus.")]


def test_the_endpoint_answers_other_paths_with_404(broker: BrokerThread) -> None:
    url = f"http://127.0.0.1:{broker.running.metrics_endpoint.port}/elsewhere"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=TIMEOUT)
    assert refused.value.code == 404


def test_messages_in_counts_the_records_appended_to_each_topic(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [b"a", b"b", b"c"])
    assert value(broker, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 3


def test_bytes_in_counts_the_batch_bytes_appended_to_each_topic(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [b"x" * 1000])
    assert value(broker, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 1000


def test_bytes_out_counts_the_record_bytes_sent_to_consumers(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    produce(broker, topic, [b"y" * 1000])
    reader = consumer(broker, f"g-{topic}")
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        message = reader.poll(TIMEOUT)
        assert message is not None and message.value() == b"y" * 1000
    finally:
        reader.close()
    assert value(broker, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 1000


def test_each_answered_request_counts_under_its_api(broker: BrokerThread) -> None:
    before = value(broker, "kafka_network_requestmetrics_requests_total", request="CreateTopics")
    new_topic(broker)
    assert value(broker, "kafka_network_requestmetrics_requests_total", request="CreateTopics") == before + 1


@pytest.mark.parametrize("histogram", ["requestqueuetimems", "localtimems", "responsequeuetimems", "totaltimems"])
def test_each_request_time_histogram_observes_every_produce(broker: BrokerThread, histogram: str) -> None:
    name = f"kafka_network_requestmetrics_{histogram}"
    before = value(broker, f"{name}_count", request="Produce")
    produce(broker, new_topic(broker), [b"timed"])
    after = scrape(broker)
    assert after[(f"{name}_count", (("request", "Produce"),))] == before + 1
    assert after[(f"{name}_bucket", (("le", "+Inf"), ("request", "Produce")))] == before + 1


def test_total_time_includes_the_wait_of_a_long_poll_fetch(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    before = scrape(broker)
    waited = before.get(("kafka_network_requestmetrics_totaltimems_sum", (("request", "Fetch"),)), 0.0)
    reader = consumer(broker, f"g-{topic}", **{"fetch.wait.max.ms": 300})
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        reader.poll(1.5)  # nothing to read: each fetch waits its 300 ms out
    finally:
        reader.close()
    after = value(broker, "kafka_network_requestmetrics_totaltimems_sum", request="Fetch")
    assert after - waited >= 250


def test_the_fetch_purgatory_holds_a_long_poll_while_it_waits(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    reader = consumer(broker, f"g-{topic}", **{"fetch.wait.max.ms": 5000})
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        reader.poll(0.5)
        wait_for(lambda: value(broker, "kafka_server_delayedoperationpurgatory_purgatorysize",
                               delayedOperation="Fetch") >= 1, "a fetch waits in the purgatory")
    finally:
        reader.close()
    wait_for(lambda: value(broker, "kafka_server_delayedoperationpurgatory_purgatorysize",
                           delayedOperation="Fetch") == 0, "the purgatory is empty again")


def test_leader_count_grows_with_each_partition_created_here(broker: BrokerThread) -> None:
    before = value(broker, "kafka_server_replicamanager_leadercount")
    new_topic(broker, partitions=3)
    assert value(broker, "kafka_server_replicamanager_leadercount") == before + 3


def test_a_single_node_is_the_active_controller_without_offline_partitions(broker: BrokerThread) -> None:
    assert value(broker, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(broker, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(broker, "kafka_server_replicamanager_underreplicatedpartitions") == 0


def test_log_size_is_reported_per_partition_and_grows_with_appends(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    assert scrape(broker)[("kafka_log_log_size", (("partition", "0"), ("topic", topic)))] == 0
    produce(broker, topic, [b"z" * 500])
    assert value(broker, "kafka_log_log_size", topic=topic, partition="0") > 500


def test_each_log_flush_is_timed(broker: BrokerThread) -> None:
    before = value(broker, "kafka_log_logflushstats_logflushrateandtimems_count")
    produce(broker, new_topic(broker), [b"flushed"])  # log.flush.interval.messages=1: the append fsyncs
    assert value(broker, "kafka_log_logflushstats_logflushrateandtimems_count") > before


@pytest.fixture
def unflushed_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A second broker in this process, with metrics on and Kafka's default of no flush per append."""
    with running_broker(tmp_path / "data", **{"prometheus.port": "0"}) as started:
        yield started


def test_the_background_flush_after_a_segment_roll_is_timed(unflushed_broker: BrokerThread) -> None:
    topic = f"rolled-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": unflushed_broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "2048"})])[topic].result(TIMEOUT)
    for _ in range(3):  # two batches never fit one segment: each append after the first rolls it, then flushes
        produce(unflushed_broker, topic, [b"r" * 1000])
    wait_for(lambda: value(unflushed_broker, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1,
             "a background flush timed")


def test_a_broker_times_only_its_own_log_flushes(broker: BrokerThread, unflushed_broker: BrokerThread) -> None:
    produce(broker, new_topic(broker), [b"flushed"])  # the module's broker fsyncs this append
    assert value(unflushed_broker, "kafka_log_logflushstats_logflushrateandtimems_count") == 0


def test_a_group_that_commits_offsets_is_counted(broker: BrokerThread) -> None:
    topic = new_topic(broker)
    before = value(broker, "kafka_coordinator_group_groupmetadatamanager_numgroups")
    committer = consumer(broker, f"g-{topic}")
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        committer.close()
    assert value(broker, "kafka_coordinator_group_groupmetadatamanager_numgroups") == before + 1


def test_consumer_group_lag_is_the_high_watermark_minus_the_committed_offset(broker: BrokerThread) -> None:
    topic, group = new_topic(broker), f"lagging-{uuid.uuid4().hex[:6]}"
    produce(broker, topic, [b"1", b"2", b"3", b"4", b"5"])
    committer = consumer(broker, group)
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert value(broker, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 3
        committer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        assert value(broker, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 0
    finally:
        committer.close()


def test_connection_count_follows_clients_connecting_and_leaving(broker: BrokerThread) -> None:
    name = "kafka_server_socket_server_metrics_connection_count"
    before = value(broker, name, listener="PLAINTEXT")
    host, port = broker.bootstrap_servers.split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT):
        wait_for(lambda: value(broker, name, listener="PLAINTEXT") == before + 1, "the connection is counted")
    wait_for(lambda: value(broker, name, listener="PLAINTEXT") == before, "the closed connection is not")
