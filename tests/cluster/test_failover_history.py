"""kbroker keeps Kafka's acks=all promise through failures, and stock clients ride through them. Every scenario
runs on three `kbroker serve` processes and on three Apache Kafka 3.9 brokers in ZooKeeper mode (the reference),
over a real ZooKeeper, while a broker is killed with SIGKILL, paused with SIGSTOP, or the whole ISR dies.

Producers (acks=all): confluent-kafka, aiokafka and Java kafka-clients with idempotence, and kafkajs without it
(see compat-tests/node/history_producer.js); a kafka-python consumer reads meanwhile. The checker (history.py)
reads the full history of sends, acknowledgements and reads, and the log files of every replica at the end: every
acknowledged record is there exactly once (at least once for kafkajs), in send order, at the offset acknowledged,
on every replica, and nothing a consumer saw is ever gone. A Java consumer group commits while its coordinator is
killed, and a PySpark streaming query reads through a leader kill."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_wire_peer import WireClient
from kbroker_process import KINDS, KbrokerCluster, running_cluster
from waiting import wait_until
from workload import (
    EVERYONE,
    RECORDS_PER_PRODUCER,
    TIMEOUT,
    Workload,
    check,
    create_topic,
    leader_log,
    produce_all,
    replica_logs,
)

from wire import messages
from wire.records import Record, build_batch

NODE_DIR = Path(__file__).resolve().parents[2] / "compat-tests" / "node"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kbroker-failover")]

BROKER_IDS = EVERYONE
SESSION_MS = 6000
FAILOVER_S = SESSION_MS / 1000 + 60  # the session must expire first; then the controller's work is quick


@pytest.fixture(scope="module", params=sorted(KINDS))
def cluster(request, zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    """Three brokers: kbroker's, and Apache Kafka 3.9's in ZooKeeper mode with the same settings (the reference:
    a test that fails on Kafka is a wrong test)."""
    import java_harness
    import kafka_process

    connect = f"{zookeeper_server.connect}/failover-{uuid.uuid4().hex[:8]}"
    overrides = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": "3000",
                 "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
                 "auto.leader.rebalance.enable": "false", "offsets.topic.replication.factor": "3"}
    try:
        with running_cluster(connect, tmp_path_factory.mktemp(request.param), BROKER_IDS, overrides,
                             request.param) as started:
            yield started
    except kafka_process.KafkaUnavailable as error:
        java_harness.unavailable(f"Apache Kafka 3.9: {error}")


@pytest.fixture(autouse=True)
def whole(cluster: KbrokerCluster) -> KbrokerCluster:
    """Each test starts from every broker alive and known to every other (the one before restarts what it
    killed)."""
    for broker in cluster.brokers.values():
        if broker.process is None:
            broker.start()
    wait_until(lambda: all(cluster.knows_everyone(b) for b in cluster.brokers.values()), "the whole cluster",
               timeout=TIMEOUT)
    return cluster


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory):
    """kafka-clients 3.9 programs: HistoryProducer and GroupHistoryConsumer (compat-tests/java)."""
    import java_harness

    return java_harness.compile_harness(tmp_path_factory.mktemp("failover-java"), "3.9", extra=(
        java_harness.JAVA_DIR / "HistoryProducer.java", java_harness.JAVA_DIR / "GroupHistoryConsumer.java"))


@pytest.fixture(scope="module")
def other_producers(java) -> Callable[[str, str, int], dict[str, list[str]]]:
    """(bootstrap, topic, count) -> the command lines of the producers in other languages: kafka-clients 3.9
    (compat-tests/java/HistoryProducer.java) and kafkajs (compat-tests/node/history_producer.js), named by the
    prefix of their values; each prints the history lines Workload reads."""
    import java_harness

    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        java_harness.unavailable(f"node and kafkajs (npm ci --prefix {NODE_DIR}; scripts/test.sh does)")

    def commands(bootstrap: str, topic: str, count: int) -> dict[str, list[str]]:
        return {"java": java.command("HistoryProducer", bootstrap, topic, count, 2, "java"),
                "kafkajs": [node, str(NODE_DIR / "history_producer.js"), bootstrap, topic, str(count), "2", "kafkajs"]}

    return commands


def test_acknowledged_records_survive_a_kill_9_of_their_leader_once_each_in_order_on_every_replica(
        cluster: KbrokerCluster, other_producers, record_property) -> None:
    create_topic(cluster, "history", partitions=2, config={"min.insync.replicas": "2"})
    with Workload(cluster, "history", 2, other_producers(cluster.bootstrap(), "history", RECORDS_PER_PRODUCER)) \
            as workload:
        wait_until(lambda: workload.under_way(50), "every producer is under way")
        leader, _ = cluster.agreed(0, "history")  # type: ignore[misc]
        cluster.brokers[leader].stop(signal.SIGKILL)
        wait_until(lambda: (found := cluster.agreed(0, "history")) and found[0] != leader,
                   "a surviving replica leads history-0", timeout=FAILOVER_S)
        moved = workload.acked()
        wait_until(lambda: workload.acked() >= moved + 200, "acknowledgements after the new leader took over")
        cluster.brokers[leader].start()
        history = workload.finish()
    assert history.failed == {}, "every record was delivered within the producers' delivery timeout"
    assert len(history.acked) == 4 * RECORDS_PER_PRODUCER  # confluent-kafka, aiokafka, Java, kafkajs
    check(cluster, "history", 2, history)
    record_property("figure", f"{len(history.acked)} acknowledged, {len(history.observed)} read meanwhile")


def controller(zk: KazooClient) -> int | None:
    found = zk.exists("/controller")
    return None if found is None else json.loads(zk.get("/controller")[0])["brokerid"]


def test_a_new_controller_is_elected_within_the_session_timeout_of_a_kill_9_and_leads_the_dead_brokers_partitions(
        cluster: KbrokerCluster, record_property) -> None:
    create_topic(cluster, "led", partitions=3)
    zk = KazooClient(hosts=cluster.brokers[1].zookeeper)
    zk.start(timeout=30)
    try:
        old = controller(zk)
        assert old in BROKER_IDS
        cluster.brokers[old].stop(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: controller(zk) not in (None, old), "another broker is the controller",
                   timeout=FAILOVER_S, every=0.05)
        elapsed = time.monotonic() - killed_at
    finally:
        zk.stop()
        zk.close()
    record_property("figure", f"new controller after {elapsed:.1f} s")  # scripts/gen_cluster_scenarios.py
    assert elapsed <= SESSION_MS / 1000 + 1, f"the new controller took {elapsed:.1f} s"
    for index in range(3):
        wait_until(lambda i=index: (found := cluster.agreed(i, "led")) and found[0] != old
                   and found[1] == tuple(b for b in BROKER_IDS if b != old),
                   f"led-{index} is led by a live broker, the dead one out of its ISR")


def stale_produce(cluster: KbrokerCluster, broker: int, topic: str, value: str, answers: list) -> None:
    """An acks=all Produce sent straight to `broker` (still believing itself leader), its answer into `answers`."""
    client = WireClient("127.0.0.1", cluster.brokers[broker].port, timeout=TIMEOUT)
    try:
        batch = build_batch([Record(0, int(time.time() * 1000), None, value.encode())])
        PR = messages.ProduceRequest
        request = PR(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[PR.TopicProduceData(
            name=topic, partition_data=[PR.PartitionProduceData(index=0, records=batch)])])
        answers.append(client.call(0, 9, request).body.responses[0].partition_responses[0].error_code)
    finally:
        client.close()


def test_a_leader_paused_past_its_session_is_fenced_and_acknowledges_nothing_it_takes_after(
        cluster: KbrokerCluster) -> None:
    create_topic(cluster, "paused", config={"min.insync.replicas": "2"})
    with Workload(cluster, "paused", 1, count=1000) as workload:
        wait_until(lambda: workload.under_way(100), "the producers are under way")
        leader, _ = cluster.agreed(0, "paused")  # type: ignore[misc]
        cluster.brokers[leader].send(signal.SIGSTOP)
        try:
            wait_until(lambda: {cluster.partition(b, 0, "paused")[0] for b in cluster.live()  # type: ignore[index]
                                if b.broker_id != leader} - {leader, -1},
                       "the others elect a new leader while the old one sleeps", timeout=FAILOVER_S)
            answers: list[int] = []
            sender = threading.Thread(target=stale_produce, args=(cluster, leader, "paused", "stale-0", answers))
            sender.start()  # queued in the paused broker's socket: the first thing it reads when it wakes
            time.sleep(0.5)
        finally:
            cluster.brokers[leader].send(signal.SIGCONT)
        sender.join(TIMEOUT)
        assert answers and answers[0] != 0, f"the fenced leader acknowledged a write: {answers}"
        history = workload.finish()
    assert history.failed == {}
    final = check(cluster, "paused", 1, history)  # "stale-0" in the log would be "never sent" to the checker
    assert "stale-0" not in {value for _, value in final[0]}


def values_of(cluster: KbrokerCluster, topic: str) -> list[str]:
    return [value for _, value in leader_log(cluster, topic, 1)[0]]


def test_unclean_election_off_keeps_a_partition_offline_on_brings_it_back_and_its_old_leader_truncates(
        cluster: KbrokerCluster) -> None:
    """Replicas [1, 2]: broker 2 dies, broker 1 takes records alone, then dies; broker 2 comes back. With unclean
    election off the partition waits for broker 1; with it on broker 2 leads without broker 1's last records (the
    documented loss), and broker 1, back, truncates its diverged tail by leader epoch and rejoins the ISR."""
    topics = {"unclean-off": "false", "unclean-on": "true"}
    for topic, unclean in topics.items():
        create_topic(cluster, topic, assignment=[[1, 2]], config={"unclean.leader.election.enable": unclean})
        produce_all(cluster, topic, [f"before-{i}" for i in range(10)])
    cluster.brokers[2].stop(signal.SIGKILL)
    for topic in topics:
        wait_until(lambda t=topic: cluster.agreed(0, t) == (1, (1,)), f"{topic}: broker 1 alone in the ISR")
        produce_all(cluster, topic, [f"only-on-1-{i}" for i in range(5)])
    cluster.brokers[1].stop(signal.SIGKILL)
    cluster.brokers[2].start()
    wait_until(lambda: cluster.agreed(0, "unclean-on") == (2, (2,)), "unclean-on: broker 2 leads, uncleanly",
               timeout=FAILOVER_S)
    def offline_leader() -> int:
        return cluster.partition(cluster.brokers[3], 0, "unclean-off")[0]  # type: ignore[index]

    wait_until(lambda: offline_leader() == -1, "unclean-off has no leader")  # a broker's metadata may lag a moment
    for _ in range(10):  # and keeps none while broker 1, its whole ISR, is down
        assert offline_leader() in (-1, 1), "unclean-off got a leader outside its ISR"
        time.sleep(0.3)
    assert values_of(cluster, "unclean-on") == [f"before-{i}" for i in range(10)]
    produce_all(cluster, "unclean-on", [f"after-{i}" for i in range(5)])
    cluster.brokers[1].start()
    for topic in topics:
        wait_until(lambda t=topic: cluster.in_sync(0, t, (1, 2)), f"{topic}: both replicas in sync again")
    before = [f"before-{i}" for i in range(10)]
    assert values_of(cluster, "unclean-off") == before + [f"only-on-1-{i}" for i in range(5)]
    assert values_of(cluster, "unclean-on") == before + [f"after-{i}" for i in range(5)]
    for topic in topics:
        served = leader_log(cluster, topic, 1)
        wait_until(lambda t=topic, log=served: replica_logs(cluster, t, 1, (1, 2)) == {1: log, 2: log},
                   f"both replicas of {topic} hold what its leader serves")


def test_a_java_consumer_group_reads_everything_and_its_commits_never_go_back_while_its_coordinator_is_killed(
        cluster: KbrokerCluster, java) -> None:
    create_topic(cluster, "grouped", partitions=2)
    values = [f"grouped-{i}" for i in range(2000)]
    produce_all(cluster, "grouped", values)
    consumer = subprocess.Popen(java.command("GroupHistoryConsumer", cluster.bootstrap(), "grouped", "movers",
                                             len(values), 150), stdout=subprocess.PIPE, text=True)
    try:
        events: list[dict] = []
        reader = threading.Thread(target=lambda: events.extend(json.loads(line) for line in consumer.stdout
                                                               if line.startswith("{")), daemon=True)
        reader.start()
        wait_until(lambda: any(e.get("committed") for e in list(events)), "the group commits what it reads")
        coordinator = wait_until(lambda: (found := cluster.coordinator("movers")) >= 0 and found, "the coordinator")
        read_before = len({e["value"] for e in list(events) if "value" in e})
        cluster.brokers[coordinator].stop(signal.SIGKILL)
        assert consumer.wait(TIMEOUT + 60) == 0, "the Java consumer gave up"
        reader.join(30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert read_before < len(values), "the coordinator died while the group was still reading"
    assert {e["value"] for e in events if "value" in e} == set(values)
    commits = [e["committed"] for e in events if "committed" in e]
    for partition in ("0", "1"):
        offsets = [commit[partition] for commit in commits if partition in commit]
        assert offsets == sorted(offsets), f"partition {partition}'s commits went back: {offsets}"
    assert cluster.coordinator("movers") not in (coordinator, -1)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap().split(","), request_timeout_ms=30_000)
    try:
        stored = admin.list_group_offsets({"movers": None})["movers"]
    finally:
        admin.close()
    ends = {p: len(leader_log(cluster, "grouped", 2)[p]) for p in (0, 1)}
    assert {tp.partition: meta.offset for tp, meta in stored.items()} == ends == \
        {int(p): o for p, o in commits[-1].items()}


@pytest.fixture(scope="module")
def spark():
    import spark_session

    with spark_session.local_session("failover") as session:
        yield session


def test_a_spark_streaming_query_reads_every_acknowledged_record_once_through_a_leader_kill_9(
        cluster: KbrokerCluster, spark, tmp_path: Path) -> None:
    create_topic(cluster, "sparked", partitions=2, config={"min.insync.replicas": "2"})
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap())
             .option("subscribe", "sparked").option("startingOffsets", "earliest").load()
             .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName("sparked").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="500 milliseconds")
             .start())
    try:
        with Workload(cluster, "sparked", 2, aiokafka=False) as workload:
            wait_until(lambda: workload.acked() >= 300, "the producer is under way")
            leader, _ = cluster.agreed(0, "sparked")  # type: ignore[misc]
            cluster.brokers[leader].stop(signal.SIGKILL)
            history = workload.finish()
        assert history.failed == {}
        cluster.brokers[leader].start()
        wait_until(lambda: spark.sql("SELECT COUNT(*) AS n FROM sparked").collect()[0].n >= len(history.acked),
                   "Spark read every acknowledged record", timeout=TIMEOUT)
        assert query.exception() is None
        rows = spark.sql("SELECT partition, offset, value FROM sparked").collect()
    finally:
        query.stop()
    assert len(rows) == len({row.value for row in rows}), "Spark read a record twice"
    for row in rows:
        history.observe(row.partition, row.offset, row.value)
    check(cluster, "sparked", 2, history)
