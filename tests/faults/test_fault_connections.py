"""Connection faults: a close before or after handling, a hung broker, a reset mid-response, refused connections."""

from __future__ import annotations

import socket
import time

import pytest
from fault_wire import PRODUCE, TOPIC, partition_errors, produce_request

from wire.errors import ErrorCode

from raw_client import RawClient


def _end(broker) -> int:
    return broker.broker.partition_log(TOPIC, 0).log_end_offset


def test_close_before_handling_drops_the_connection_and_appends_nothing(broker, client) -> None:
    with broker.faults.inject(api="Produce", action="close_before", count=1), \
            pytest.raises(ConnectionError, match="closed by the broker"):
        client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert _end(broker) == 0


def test_close_after_handling_appends_but_never_answers(broker, client) -> None:
    with broker.faults.inject(api="Produce", action="close_after", count=1), \
            pytest.raises(ConnectionError, match="closed by the broker"):
        client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))
    assert _end(broker) == 1


def test_reset_sends_part_of_the_answer_then_a_tcp_reset(broker, client) -> None:
    with broker.faults.inject(api="Produce", action="reset", count=1):
        client.send(PRODUCE, 9, produce_request({TOPIC: [0]}))
        received = b""
        with pytest.raises(ConnectionResetError):
            while chunk := client.sock.recv(1 << 16):
                received += chunk
    assert len(received) > 4, "part of the answer arrives before the reset"
    assert len(received) < 4 + int.from_bytes(received[:4], "big")


def test_hang_never_answers_while_the_fault_exists_and_answers_once_removed(broker, client) -> None:
    fault = broker.faults.inject(api="Produce", action="hang")
    client.send(PRODUCE, 9, produce_request({TOPIC: [0]}))
    client.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        client.sock.recv(1)
    fault.remove()
    client.sock.settimeout(5)
    assert partition_errors(client.receive(PRODUCE, 9)) == {(TOPIC, 0): ErrorCode.NONE}


def _accepts(broker) -> bool:
    try:
        socket.create_connection(("127.0.0.1", broker.running.port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


def test_refused_connections_are_refused_for_the_time_asked_then_accepted(broker) -> None:
    started = time.monotonic()
    broker.faults.refuse_connections(1.0)
    assert not _accepts(broker)
    while not _accepts(broker):
        assert time.monotonic() - started < 30, "the listeners never opened again"
        time.sleep(0.05)
    assert time.monotonic() - started >= 1.0
    client = RawClient(broker.bootstrap_servers, client_id="fault-test")
    try:
        assert partition_errors(client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))) == {
            (TOPIC, 0): ErrorCode.NONE}
    finally:
        client.close()


def test_open_connections_keep_working_while_new_ones_are_refused(broker, client) -> None:
    client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))  # accepted and served before the listeners close
    broker.faults.refuse_connections(1.0)
    assert not _accepts(broker)
    assert partition_errors(client.call(PRODUCE, 9, produce_request({TOPIC: [0]}))) == {(TOPIC, 0): ErrorCode.NONE}
