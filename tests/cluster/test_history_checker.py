"""The failover tests' checker finds each kind of broken promise in a history (and passes a sound one)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from history import History, problems, replica_log

from wire.records import Record, build_batch


def sound_history() -> tuple[History, dict[int, list[tuple[int, str]]]]:
    """Producer p sent three records, all acknowledged, in one partition; a consumer saw the first; broker 2's
    replica has them all."""
    history = History()
    for offset, value in enumerate(["p-0", "p-1", "p-2"]):
        history.send(value)
        history.ack(value, 0, offset)
    history.observe(0, 0, "p-0")
    log = {0: [(0, "p-0"), (1, "p-1"), (2, "p-2")]}
    history.replicas[2] = {0: list(log[0])}
    return history, log


def test_a_sound_history_has_no_problems() -> None:
    history, log = sound_history()
    assert problems(history, log) == []


def test_an_acknowledged_record_missing_from_the_log_is_a_problem() -> None:
    history, log = sound_history()
    log[0] = log[0][:2]
    history.replicas[2][0] = log[0]
    assert problems(history, log) == ["p-2 acknowledged at (0, 2) but the log has it at no offset"]


def test_a_record_written_twice_is_a_problem() -> None:
    history, log = sound_history()
    log[0].append((3, "p-2"))
    history.replicas[2][0] = log[0]
    assert problems(history, log)[0] == "p-2 is in the log 2 times: [(0, 2), (0, 3)]"


def test_a_record_written_twice_by_a_producer_without_idempotence_is_allowed() -> None:
    history, log = sound_history()
    history.at_least_once.add("p")
    log[0].append((3, "p-2"))
    history.replicas[2][0] = log[0]
    assert problems(history, log) == []


def test_records_of_one_producer_out_of_send_order_are_a_problem() -> None:
    history, log = sound_history()
    history.acked.clear()
    log[0] = [(0, "p-1"), (1, "p-0"), (2, "p-2")]
    history.observed.clear()
    history.replicas[2][0] = log[0]
    assert problems(history, log) == ["p: p-1 (offset 0) follows p-0 (offset 1) in partition 0"]


def test_a_record_a_consumer_saw_that_the_log_later_lost_is_a_problem() -> None:
    history, log = sound_history()
    history.observe(0, 3, "p-3")
    assert problems(history, log) == ["a consumer read p-3 at (0, 3); the log ends with None there"]


def test_a_replica_that_differs_from_the_leader_is_a_problem() -> None:
    history, log = sound_history()
    history.replicas[2][0] = [(0, "p-0"), (1, "p-1"), (2, "q-7")]
    assert problems(history, log) == [
        "broker 2's replica of partition 0 differs from the leader's log: record 2: (2, 'q-7') where the leader "
        "has (2, 'p-2')"]


def test_a_record_nobody_sent_is_a_problem() -> None:
    history, log = sound_history()
    log[0].append((3, "ghost-1"))
    history.replicas[2][0] = log[0]
    assert problems(history, log) == ["ghost-1 is in the log but was never sent"]


def test_a_replica_log_is_read_from_segment_files(tmp_path: Path) -> None:
    partition = tmp_path / "topic-0"
    partition.mkdir()
    first = build_batch([Record(0, 1000, None, b"p-0"), Record(1, 1000, None, b"p-1")], base_offset=0)
    second = build_batch([Record(2, 1000, None, b"p-2")], base_offset=2)
    (partition / "00000000000000000000.log").write_bytes(first)
    (partition / "00000000000000000002.log").write_bytes(second)
    assert replica_log(partition) == [(0, "p-0"), (1, "p-1"), (2, "p-2")]
