"""Moving a replica between the log dirs of one broker (AlterReplicaLogDirs, KIP-113), as an operator does with
kafka-reassign-partitions' `log_dirs`: kafka-python's admin client asks for the move and watches it with
DescribeLogDirs, confluent-kafka writes before and after and reads everything back.

The broker is one of the module's own, with two log dirs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import kafka_tools
import pytest
from kafka import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, UnknownTopicOrPartitionError
from kafka.structs import TopicPartitionReplica

from confluent_client import consume, produce
from settle import create_topic, eventually

pytestmark = [pytest.mark.client("kafka-python"), pytest.mark.scenario("Replica moved between log dirs")]
RECORDS = 500


@pytest.fixture(scope="module")
def two_log_dirs(own_broker, tmp_path_factory) -> tuple[str, list[str]]:
    """(bootstrap, its two log dirs) of a broker of the module's own."""
    root = tmp_path_factory.mktemp("log-dirs")
    dirs = [str(root / "a"), str(root / "b")]
    broker = own_broker("two-log-dirs", f"log.dirs={','.join(dirs)}")
    return broker.bootstrap, dirs


@pytest.fixture
def admin(two_log_dirs):
    client = KafkaAdminClient(bootstrap_servers=two_log_dirs[0])
    yield client
    client.close()


def _placement(admin: KafkaAdminClient, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> (partition, whether a future replica) of `topic` there."""
    [broker] = admin.describe_log_dirs()
    return {entry["log_dir"]: sorted((p["partition_index"], p["is_future_key"])
                                     for t in entry["topics"] if t["name"] == topic for p in t["partitions"])
            for entry in broker["log_dirs"]}


def _broker_id(admin: KafkaAdminClient) -> int:
    return admin.describe_log_dirs()[0]["broker"]


def _home_and_other(admin: KafkaAdminClient, topic: str, dirs: list[str]) -> tuple[str, str]:
    placement = _placement(admin, topic)
    home = next(d for d in dirs if (0, False) in placement[d])
    return home, next(d for d in dirs if d != home)


def test_a_moved_replica_serves_every_record_from_its_new_log_dir(two_log_dirs, admin, topic_name):
    bootstrap, dirs = two_log_dirs
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": b"before-%d" % i, "partition": 0} for i in range(RECORDS)])
    home, other = _home_and_other(admin, topic_name, dirs)
    replica = TopicPartitionReplica(topic_name, 0, _broker_id(admin))

    assert admin.alter_replica_log_dirs({replica: other}) == {replica: NoError}

    placement = eventually(lambda: _placement(admin, topic_name), lambda p: p[other] == [(0, False)])
    assert placement == {other: [(0, False)], home: []}
    produce(bootstrap, topic_name, [{"value": b"after", "partition": 0}])
    values = [m.value() for m in consume(bootstrap, topic_name, 0, RECORDS + 1)]
    assert values == [b"before-%d" % i for i in range(RECORDS)] + [b"after"]
    assert (Path(other) / f"{topic_name}-0").is_dir()


def test_moving_a_replica_to_the_log_dir_it_is_in_answers_no_error(two_log_dirs, admin, topic_name):
    bootstrap, dirs = two_log_dirs
    create_topic(bootstrap, topic_name, 1)
    home, other = _home_and_other(admin, topic_name, dirs)
    replica = TopicPartitionReplica(topic_name, 0, _broker_id(admin))
    assert admin.alter_replica_log_dirs({replica: home}) == {replica: NoError}
    assert _placement(admin, topic_name) == {home: [(0, False)], other: []}


def test_a_path_that_is_not_a_log_dir_answers_log_dir_not_found(two_log_dirs, admin, topic_name, tmp_path):
    bootstrap, _ = two_log_dirs
    create_topic(bootstrap, topic_name, 1)
    replica = TopicPartitionReplica(topic_name, 0, _broker_id(admin))
    assert admin.alter_replica_log_dirs({replica: str(tmp_path)}) == {replica: LogDirNotFoundError}


def test_moving_a_replica_of_an_unknown_topic_answers_unknown_topic_or_partition(two_log_dirs, admin, topic_name):
    _, dirs = two_log_dirs
    replica = TopicPartitionReplica(topic_name, 0, _broker_id(admin))
    assert admin.alter_replica_log_dirs({replica: dirs[1]}) == {replica: UnknownTopicOrPartitionError}


def test_kafka_reassign_partitions_moves_a_replica_to_the_log_dir_its_plan_names(two_log_dirs, admin, topic_name,
                                                                                 tmp_path):
    bootstrap, dirs = two_log_dirs
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": b"%d" % i, "partition": 0} for i in range(RECORDS)])
    home, other = _home_and_other(admin, topic_name, dirs)
    broker_id = _broker_id(admin)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [broker_id], "log_dirs": [other]}]}))
    reassign = ("ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--reassignment-json-file", plan)

    kafka_tools.run(*reassign, "--execute")

    verified = eventually(lambda: kafka_tools.run(*reassign, "--verify"), lambda out: "completed successfully" in out)
    assert f"Reassignment of replica {topic_name}-0-{broker_id} completed successfully." in verified, verified
    assert _placement(admin, topic_name) == {other: [(0, False)], home: []}
    assert [m.value() for m in consume(bootstrap, topic_name, 0, RECORDS)] == [b"%d" % i for i in range(RECORDS)]


THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def test_a_move_throttled_by_kafka_reassign_partitions_waits_until_the_throttle_is_lifted(two_log_dirs, admin,
                                                                                          topic_name, tmp_path):
    """--replica-alter-log-dirs-throttle sets the broker's dynamic replica.alter.log.dirs.io.max.bytes.per.second:
    3 MB at 100 kB/s takes half a minute, so two seconds in the copy is under way; deleting the config with
    kafka-configs lets it finish."""
    bootstrap, dirs = two_log_dirs
    create_topic(bootstrap, topic_name, 1)
    values = [b"%04d" % i + bytes(10_000) for i in range(300)]
    produce(bootstrap, topic_name, [{"value": value, "partition": 0} for value in values])
    home, other = _home_and_other(admin, topic_name, dirs)
    broker_id = _broker_id(admin)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [broker_id], "log_dirs": [other]}]}))
    config = ("ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-name",
              str(broker_id))
    try:
        kafka_tools.run("ReassignPartitionsCommand", "--bootstrap-server", bootstrap, "--reassignment-json-file",
                        plan, "--execute", "--replica-alter-log-dirs-throttle", "100000")
        assert THROTTLE in kafka_tools.run(*config, "--describe")
        time.sleep(2)
        assert _placement(admin, topic_name) == {home: [(0, False)], other: [(0, True)]}, "still copying"
    finally:
        kafka_tools.run(*config, "--alter", "--delete-config", THROTTLE)
    eventually(lambda: _placement(admin, topic_name), lambda p: p == {other: [(0, False)], home: []})
    assert [m.value() for m in consume(bootstrap, topic_name, 0, len(values))] == values
