"""The cluster events operators grep a broker's log for, in Kafka's words (docs/logging.md): controller election,
leadership, ISR shrink and expand. Two `kbroker serve` processes on a real ZooKeeper; their logs read as written."""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kbroker_process import KbrokerCluster, KbrokerProcess, running_cluster
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka-zk-cluster")]

BROKER_IDS = (1, 2)
TOPIC = "logged"
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    connect = f"{zookeeper_server.connect}/kbroker-logging-{uuid.uuid4().hex[:8]}"
    overrides = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "2000",
                 "replica.fetch.backoff.ms": "200", "auto.leader.rebalance.enable": "false"}
    with running_cluster(connect, tmp_path_factory.mktemp("logging-cluster"), BROKER_IDS, overrides) as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap()})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=2)])[TOPIC].result(TIMEOUT)
        wait_until(lambda: started.in_sync(0, TOPIC, BROKER_IDS), "both replicas in the ISR", TIMEOUT)
        yield started


def lines(broker: KbrokerProcess, pattern: str) -> list[str]:
    return [line for line in broker.log.read_text().splitlines() if re.search(pattern, line)]


def wait_for_line(broker: KbrokerProcess, pattern: str) -> str:
    wait_until(lambda: lines(broker, pattern), f"broker {broker.broker_id} logs {pattern!r}", TIMEOUT)
    return lines(broker, pattern)[0]


def leader_and_follower(cluster: KbrokerCluster) -> tuple[KbrokerProcess, KbrokerProcess]:
    leader_id = cluster.agreed(0, TOPIC)[0]
    follower_id = next(i for i in BROKER_IDS if i != leader_id)
    return cluster.brokers[leader_id], cluster.brokers[follower_id]


def test_exactly_one_broker_logs_its_election_as_controller(cluster: KbrokerCluster):
    elected = {b.broker_id: lines(b, r"\[Controller id=(\d+)\] \1 successfully elected as the controller\. Epoch "
                                     r"incremented to \d+ and epoch zk version is now \d+")
               for b in cluster.brokers.values()}
    assert sorted(len(found) for found in elected.values()) == [0, 1], elected


def test_the_leader_logs_that_it_starts_at_a_leader_epoch(cluster: KbrokerCluster):
    leader, _ = leader_and_follower(cluster)
    line = wait_for_line(leader, rf"\[Partition {TOPIC}-0 broker={leader.broker_id}\] {TOPIC}-0 starts at leader "
                                 r"epoch 0 from offset 0 with partition epoch \d+, high watermark 0, ISR \[1,2\]")
    assert " INFO " in line


def test_the_follower_logs_that_it_follows_the_leader(cluster: KbrokerCluster):
    leader, follower = leader_and_follower(cluster)
    wait_for_line(follower, rf"\[Partition {TOPIC}-0 broker={follower.broker_id}\] Follower {TOPIC}-0 starts at "
                            rf"leader epoch 0 .* Current leader is {leader.broker_id}\.")


def controller(cluster: KbrokerCluster) -> KbrokerProcess:
    (elected,) = [b for b in cluster.brokers.values() if lines(b, r"successfully elected as the controller")]
    return elected


def test_a_killed_follower_is_logged_out_of_the_isr_and_back_in_after_its_restart(cluster: KbrokerCluster):
    leader = controller(cluster)  # a follower that is not the controller: the leader's AlterPartition goes through
    follower = next(b for b in cluster.brokers.values() if b is not leader)
    topic = "isr-logged"
    admin = AdminClient({"bootstrap.servers": leader.bootstrap})
    assignment = [[leader.broker_id, follower.broker_id]]
    created = NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=assignment)
    admin.create_topics([created])[topic].result(TIMEOUT)
    wait_until(lambda: cluster.in_sync(0, topic, BROKER_IDS), "both replicas in the ISR", TIMEOUT)
    follower.stop(signal.SIGKILL)
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "1"})
    producer.produce(topic, b"written while the follower is down", partition=0)
    assert producer.flush(TIMEOUT) == 0  # the follower now lags: replica.lag.time.max.ms later it is out
    shrink = wait_for_line(leader, rf"\[Partition {topic}-0 broker={leader.broker_id}\] Shrinking ISR from 1,2 to "
                                   rf"{leader.broker_id}\. Leader: \(highWatermark: \d+, endOffset: 1\)\. Out of sync "
                                   rf"replicas: \(brokerId: {follower.broker_id}, endOffset: -?\d+\)\.")
    assert " INFO " in shrink
    wait_for_line(leader, rf"\[Partition {topic}-0 broker={leader.broker_id}\] ISR updated to {leader.broker_id} "
                          r"and version updated to \d+")
    wait_until(lambda: not cluster.knows_everyone(leader), "the killed broker's ZooKeeper session gone", TIMEOUT)
    follower.start()  # (while its old session lives, its registration would clash)
    wait_for_line(leader, rf"\[Partition {topic}-0 broker={leader.broker_id}\] Expanding ISR from "
                          rf"{leader.broker_id} to 1,2")
    wait_until(lambda: cluster.in_sync(0, topic, BROKER_IDS), "the follower back in the ISR", TIMEOUT)
