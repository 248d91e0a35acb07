"""AlterReplicaLogDirs (34) over the wire: a replica's log moves to another log dir of the broker while it
serves, DescribeLogDirs (35) shows the copy under way, and the errors are Kafka's."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.testing import BrokerThread, running_broker
from wire import messages
from wire.errors import ErrorCode
from wire.records import Record, build_batch, decode_batch, iter_batches

from raw_client import RawClient

PRODUCE, FETCH, ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, INCREMENTAL_ALTER_CONFIGS = 0, 1, 34, 35, 44
BROKER_RESOURCE = 4
TOPIC = "t"
BATCHES = 200
MOVE_TIMEOUT_S = 20
ARLD, DLD = messages.AlterReplicaLogDirsRequest, messages.DescribeLogDirsRequest


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """Log dirs a and b, topic `t` with partition 0 in a, and small segments so a log has several."""
    a, b = tmp_path / "a", tmp_path / "b"
    with running_broker(tmp_path, **{"log.dirs": f"{a},{b}", "log.segment.bytes": "4096",
                                     "offsets.topic.num.partitions": "1"}) as running:
        running.broker.create_topic(TOPIC, 1)
        assert running.broker.logs.log_dir_of(TOPIC, 0) == a
        yield running


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[RawClient]:
    connection = RawClient(broker.bootstrap_servers)
    yield connection
    connection.close()


def _dir(broker: BrokerThread, name: str) -> str:
    return str(broker.config.log_dirs[0].parent / name)


def _produce(client: RawClient, value: bytes) -> None:
    P = messages.ProduceRequest
    answer = client.call(PRODUCE, 9, P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=build_batch(
            [Record(0, 1_000, None, value, [])]))])]))
    assert answer.responses[0].partition_responses[0].error_code == 0


def _values(client: RawClient) -> list[bytes]:
    """Every record value of the partition, read with Fetch from offset 0."""
    F = messages.FetchRequest
    values: list[bytes] = []
    while True:
        answer = client.call(FETCH, 12, F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
            F.FetchTopic(topic=TOPIC, partitions=[F.FetchPartition(partition=0, fetch_offset=len(values),
                                                                   partition_max_bytes=1 << 20)])]))
        data = answer.responses[0].partitions[0]
        assert data.error_code == 0
        if not data.records:
            return values
        values += [r.value for position, _ in iter_batches(data.records)
                   for r in decode_batch(data.records, position)[1] if r.offset >= len(values)]


def _alter(client: RawClient, path: str, topic: str = TOPIC, version: int = 2) -> int:
    answer = client.call(ALTER_REPLICA_LOG_DIRS, version, ARLD(dirs=[
        ARLD.AlterReplicaLogDir(path=path, topics=[ARLD.AlterReplicaLogDirTopic(name=topic, partitions=[0])])]))
    [result] = answer.results
    assert result.topic_name == topic
    return result.partitions[0].error_code


def _where(client: RawClient) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> (lag, whether a future replica) of partition t-0 there."""
    answer = client.call(DESCRIBE_LOG_DIRS, 4, DLD(topics=[DLD.DescribableLogDirTopic(topic=TOPIC, partitions=[0])]))
    return {r.log_dir: [(p.offset_lag, p.is_future_key) for t in r.topics for p in t.partitions]
            for r in answer.results}


def _wait_until_in(client: RawClient, path: str) -> None:
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while _where(client)[path] != [(0, False)]:
        assert time.monotonic() < deadline, f"t-0 did not arrive in {path}: {_where(client)}"
        time.sleep(0.05)


@pytest.mark.parametrize("version", [1, 2])
def test_a_replica_moved_to_another_log_dir_keeps_every_record_and_takes_new_ones(broker, client, version):
    written = [b"record-%d" % i for i in range(BATCHES)]
    for value in written:
        _produce(client, value)
    assert _alter(client, _dir(broker, "b"), version=version) == ErrorCode.NONE
    _wait_until_in(client, _dir(broker, "b"))
    assert _where(client)[_dir(broker, "a")] == []
    _produce(client, b"after the move")
    assert _values(client) == [*written, b"after the move"]
    assert (Path(_dir(broker, "b")) / "t-0").is_dir() and not (Path(_dir(broker, "a")) / "t-0").exists()


def test_a_copy_under_way_is_described_as_a_future_replica_with_its_lag(broker, client):
    for i in range(10):
        _produce(client, b"%d" % i)
    logs = broker.broker.logs
    # started as AlterReplicaLogDirs starts it, without the mover the request would wake: the copy stays at 0
    broker.on_loop(lambda: logs.create_future(TOPIC, 0, Path(_dir(broker, "b"))))
    assert _where(client) == {_dir(broker, "a"): [(0, False)], _dir(broker, "b"): [(10, True)]}


def test_a_move_cut_short_by_a_restart_completes_after_it(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    settings = {"log.dirs": f"{a},{b}", "offsets.topic.num.partitions": "1"}
    with running_broker(tmp_path, **settings) as first:
        first.broker.create_topic(TOPIC, 1)
        with contextlib.closing(RawClient(first.bootstrap_servers)) as client:
            for i in range(20):
                _produce(client, b"%d" % i)
        first.on_loop(lambda: first.broker.logs.create_future(TOPIC, 0, b))
    with running_broker(tmp_path, **settings) as second, contextlib.closing(RawClient(second.bootstrap_servers)) \
            as client:
        _wait_until_in(client, str(b))
        assert _values(client) == [b"%d" % i for i in range(20)]


def test_moving_a_replica_to_the_dir_it_is_in_answers_none_and_moves_nothing(broker, client):
    assert _alter(client, _dir(broker, "a")) == ErrorCode.NONE
    assert broker.broker.logs.future(TOPIC, 0) is None and _where(client)[_dir(broker, "b")] == []


def test_a_path_that_is_no_log_dir_answers_log_dir_not_found(broker, client):
    assert _alter(client, _dir(broker, "c")) == ErrorCode.LOG_DIR_NOT_FOUND


def test_a_log_dir_named_by_a_relative_path_is_found(broker, client, monkeypatch):
    monkeypatch.chdir(broker.config.log_dirs[0].parent)
    assert _alter(client, "b") == ErrorCode.NONE
    _wait_until_in(client, _dir(broker, "b"))


def test_an_unknown_topic_answers_unknown_topic_or_partition(broker, client):
    assert _alter(client, _dir(broker, "b"), topic="no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _throttle(client: RawClient, broker: BrokerThread, rate: str | None) -> None:
    """Sets this broker's dynamic replica.alter.log.dirs.io.max.bytes.per.second (None: deletes it) with
    IncrementalAlterConfigs, as `kafka-configs --entity-type brokers --entity-name <id> --alter` does."""
    R = messages.IncrementalAlterConfigsRequest
    change = R.AlterableConfig(name=THROTTLE, config_operation=1 if rate is None else 0, value=rate)
    answer = client.call(INCREMENTAL_ALTER_CONFIGS, 1, R(validate_only=False, resources=[R.AlterConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=str(broker.broker.node_id), configs=[change])]))
    assert [r.error_code for r in answer.responses] == [ErrorCode.NONE]


THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def test_a_move_waits_on_the_alter_log_dirs_throttle_and_finishes_once_it_is_lifted(broker, client):
    for i in range(40):
        _produce(client, b"%04d" % i + bytes(1000))  # about 44 KB in all
    _throttle(client, broker, "2000")  # bytes per second: the copy takes more than 20 s under it
    assert _alter(client, _dir(broker, "b")) == ErrorCode.NONE
    time.sleep(2)
    [(lag, future)] = _where(client)[_dir(broker, "b")]
    assert future and lag > 20, "two seconds into the move, most of the log is still to be copied"
    _throttle(client, broker, None)
    _wait_until_in(client, _dir(broker, "b"))
    assert len(_values(client)) == 40
