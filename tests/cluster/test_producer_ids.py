"""Producer ids in cluster mode come from blocks the controller allocates (kbroker/cluster/producer_ids.py), here
a one-broker cluster on a real ZooKeeper whose kbroker is also the controller. Beside a Kafka 3.9 controller:
test_broker_with_kafka_controller.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kbroker.cluster.zk import PRODUCER_ID_BLOCK_SIZE
from wire import messages
from wire.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_wire_peer as peer_lib
from controller_node import ControllerNode

BROKER_ID = 1


def first_producer_id(client: peer_lib.WireClient) -> int:
    """The first id, retried as clients do while the broker has no block yet (COORDINATOR_LOAD_IN_PROGRESS: the
    controller may not have taken in this broker's registration when the first request comes)."""
    request = messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1, producer_id=-1,
                                             producer_epoch=-1)
    deadline = time.monotonic() + 30
    while True:
        answer = client.call(22, 4, request).body
        if answer.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            assert answer.error_code == 0, answer
            return answer.producer_id
        time.sleep(0.1)


def test_producer_ids_run_on_into_the_next_block_without_a_retry(zookeeper: str, tmp_path: Path) -> None:
    node = ControllerNode(tmp_path, zookeeper, BROKER_ID, listener="PLAINTEXT").start()
    try:
        deadline = time.monotonic() + 60
        while not node.is_active():
            assert time.monotonic() < deadline, "kbroker did not become the controller"
            time.sleep(0.1)
        client = peer_lib.WireClient("127.0.0.1", node.running.port)
        try:
            first = first_producer_id(client)
            # then each answer without error: the next block is fetched before the first runs out
            ids = [first] + [peer_lib.init_producer_id(client) for _ in range(PRODUCER_ID_BLOCK_SIZE)]
        finally:
            client.close()
        block = node.zk.producer_id_block()
    finally:
        node.stop()
    assert ids == list(range(PRODUCER_ID_BLOCK_SIZE + 1))
    assert (block.broker_id, block.first_producer_id) == (BROKER_ID, PRODUCER_ID_BLOCK_SIZE)
