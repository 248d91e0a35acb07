"""Recording: what the client actually sent and what it got back, in memory or as JSON lines."""

from __future__ import annotations

import json

from fault_wire import PRODUCE, TOPIC, P, batch

from kbroker.testing import running_broker


def _idempotent_produce(sequence: int) -> object:
    records = batch(producer_id=42, sequence=sequence)
    return P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=records)])])


def test_recording_keeps_each_request_with_its_header_fields_and_answer(broker, client) -> None:
    with broker.faults.record() as recording:
        client.call(PRODUCE, 9, _idempotent_produce(0))
    (entry,) = recording.requests("Produce")
    assert (entry["api"], entry["version"], entry["client_id"], entry["correlation_id"]) == (
        "Produce", 9, "fault-test", client.correlation_id)
    assert entry["response"]["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert entry["duration_ms"] >= 0


def test_recorded_batches_show_producer_id_and_sequence(broker, client) -> None:
    with broker.faults.record() as recording:
        client.call(PRODUCE, 9, _idempotent_produce(0))
        client.call(PRODUCE, 9, _idempotent_produce(1))
    batches = [entry["request"]["topic_data"][0]["partition_data"][0]["records"][0]
               for entry in recording.requests("Produce")]
    assert [(b["producer_id"], b["base_sequence"]) for b in batches] == [(42, 0), (42, 1)]


def test_recording_notes_which_faults_fired(broker, client) -> None:
    with broker.faults.record() as recording, \
            broker.faults.inject(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=1) as fault:
        client.call(PRODUCE, 9, _idempotent_produce(0))
        client.call(PRODUCE, 9, _idempotent_produce(0))
    assert [entry["faults"] for entry in recording.requests("Produce")] == [[fault.id], []]


def test_recording_to_a_file_writes_one_json_object_a_line(broker, client, tmp_path) -> None:
    path = tmp_path / "requests.jsonl"
    with broker.faults.record(path, keep=False) as recording:
        client.call(PRODUCE, 9, _idempotent_produce(0))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["api"] for line in lines] == ["Produce"]
    assert recording.entries == []


def test_stopping_the_recording_uninstalls_the_hook(broker, client) -> None:
    with broker.faults.record():
        assert broker.broker.faults is not None
    assert broker.broker.faults is None


def test_a_stopping_broker_closes_the_files_it_records_to(tmp_path) -> None:
    with running_broker(tmp_path / "data") as stopping:
        recording = stopping.faults.record(tmp_path / "requests.jsonl")
    assert recording.closed
    assert stopping.faults.recordings() == []
