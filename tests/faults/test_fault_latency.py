"""Latency and throttling: a slow broker and a broker that tells the client to back off."""

from __future__ import annotations

import time

from fault_wire import PRODUCE, TOPIC, partition_errors, produce_request, read_records

from wire.errors import ErrorCode


def test_delay_holds_the_answer_for_the_time_asked(broker, client) -> None:
    with broker.faults.inject(api="Produce", delay_ms=300) as fault:
        started = time.monotonic()
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
        waited = time.monotonic() - started
    assert waited >= 0.3
    assert partition_errors(response) == {(TOPIC, 0): ErrorCode.NONE}
    assert fault.fired == 1


def test_a_produce_pipelined_behind_a_delayed_one_reaches_the_log_after_it(broker, client) -> None:
    with broker.faults.inject(api="Produce", delay_ms=300, count=1):
        client.send(PRODUCE, 9, produce_request({TOPIC: [0]}, value=b"first"))
        client.send(PRODUCE, 9, produce_request({TOPIC: [0]}, value=b"second"))
        client.receive(PRODUCE, 9)
        client.receive(PRODUCE, 9)
    assert [record.value for record in read_records(broker, TOPIC, 0)] == [b"first", b"second"]


def test_delay_applies_only_to_the_api_named(broker, client) -> None:
    with broker.faults.inject(api="Fetch", delay_ms=2000):
        started = time.monotonic()
        client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
        assert time.monotonic() - started < 1


def test_throttle_sets_throttle_time_ms_on_a_normal_answer(broker, client) -> None:
    with broker.faults.inject(api="Produce", throttle_ms=250):
        response = client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert response.throttle_time_ms == 250
    assert partition_errors(response) == {(TOPIC, 0): ErrorCode.NONE}
    assert broker.broker.partition_log(TOPIC, 0).log_end_offset == 1
