"""cluster/zk.py's ZkClient as the controller's store (controller_store.ControllerStore), against a real ZooKeeper:
the controller's decisions land in Kafka 3.9's znodes, every write is fenced on /controller_epoch's version, and
the watches the running controller relies on fire and stop as it needs."""

from __future__ import annotations

import json
import queue
import threading
import uuid

import pytest
from kazoo.client import KazooClient

from kbroker.cluster import controller_events as events
from kbroker.cluster import controller_store
from kbroker.cluster.controller_context import TopicPartition
from kbroker.cluster.controller_core import ControllerConfig, ControllerCore
from kbroker.cluster.model import (
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
)
from kbroker.cluster.zk import ControllerMovedError, ZkClient

WAIT = 15


def registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id, "PLAINTEXT"),))


def topic(name: str, replicas: dict[int, tuple[int, ...]]) -> TopicAssignment:
    return TopicAssignment(name, uuid.uuid4(), {p: ReplicaAssignment(r) for p, r in replicas.items()})


def state_json(client: ZkClient, name: str, partition: int) -> dict:
    found = client.get(f"/brokers/topics/{name}/partitions/{partition}/state")
    assert found is not None
    return json.loads(found[0])


def become_controller(client: ZkClient, broker_id: int = 1) -> ControllerCore:
    """Elect `broker_id` and run Kafka's failover over what ZooKeeper holds, with the ZkClient as the store."""
    epoch = client.register_controller(broker_id)
    assert epoch is not None
    core = ControllerCore(ControllerConfig(broker_id), client)
    events.process_controller_failover(core, epoch.epoch, epoch.zk_version, client.live_brokers(),
                                       client.topic_assignments(client.topics()).values(),
                                       client.topics_marked_for_deletion())
    return core


def expire_session(server_connect: str, client: ZkClient) -> None:
    """Closing the same session from another connection makes ZooKeeper expire it for `client`."""
    session_id, password = client.kazoo.client_id
    thief = KazooClient(hosts=server_connect, client_id=(session_id, password))
    thief.start()
    thief.stop()
    thief.close()


def test_zk_controller_moved_error_is_the_store_interfaces_class():
    assert ControllerMovedError is controller_store.ControllerMovedError


def test_new_partitions_get_their_first_state_in_zookeeper_from_the_controller(zk, second_session):
    zk.register_broker(registration(1))
    second_session.register_broker(registration(2))
    core = become_controller(zk)
    created = topic("fresh", {0: (2, 1), 1: (1, 2)})
    zk.create_topic(created)
    events.process_topic_change(core, zk.topics(), {"fresh": created})
    epoch = zk.controller_epoch()
    assert epoch is not None
    assert state_json(zk, "fresh", 0) == {"version": 1, "leader": 2, "leader_epoch": 0,
                                          "controller_epoch": epoch.epoch, "isr": [2, 1]}
    assert state_json(zk, "fresh", 1)["leader"] == 1
    assert core.context.partition_leadership_info(TopicPartition("fresh", 0)).leader_and_isr.partition_epoch == 0


def test_a_dead_leaders_partitions_get_leaders_from_the_isr_in_zookeeper(zk, second_session):
    zk.register_broker(registration(1))
    second_session.register_broker(registration(2))
    zk.create_topic(topic("t", {0: (2, 1)}))
    core = become_controller(zk)
    assert state_json(zk, "t", 0)["leader"] == 2
    second_session.close()  # broker 2's session ends: its registration goes
    events.process_broker_change(core, zk.live_brokers())
    found = state_json(zk, "t", 0)
    assert (found["leader"], found["leader_epoch"], found["isr"]) == (1, 1, [1])


def test_a_deposed_controllers_state_change_raises_controller_moved(zk, second_session):
    zk.register_broker(registration(1))
    zk.create_topic(topic("t", {0: (1,)}))
    core = become_controller(zk)
    zk.resign_controller(core.context.epoch_zk_version)
    assert second_session.register_controller(2) is not None  # the epoch znode moves on
    created = topic("late", {0: (1,)})
    zk.create_topic(created)
    with pytest.raises(controller_store.ControllerMovedError):
        events.process_topic_change(core, zk.topics(), {"late": created})
    assert zk.partition_state("late", 0) is None


def test_a_stale_partition_state_write_is_a_version_conflict_to_the_store_interface(zk):
    zk.register_broker(registration(1))
    zk.create_topic(topic("t", {0: (1,)}))
    core = become_controller(zk)
    current = zk.partition_state("t", 0)
    assert current is not None
    stale = PartitionState(LeaderAndIsr(1, 5, (1,), partition_epoch=current.leader_and_isr.partition_epoch + 3),
                           core.context.epoch)
    outcome = zk.update_partition_states("t", {0: stale}, core.context.epoch_zk_version)[0]
    assert controller_store.is_version_conflict(outcome)
    assert state_json(zk, "t", 0)["leader_epoch"] == 0


def test_topic_deletion_marks_of_unknown_topics_are_dropped_by_the_controller(zk):
    zk.register_broker(registration(1))
    core = become_controller(zk)
    zk.mark_topic_for_deletion("ghost")
    events.process_topic_deletion(core, zk.topics_marked_for_deletion())
    assert zk.topics_marked_for_deletion() == []


def test_deleting_deletion_marks_is_fenced_on_the_controller_epoch(zk, second_session):
    epoch = zk.register_controller(1)
    assert epoch is not None
    zk.mark_topic_for_deletion("a")
    zk.mark_topic_for_deletion("b")
    zk.delete_topic_deletions(["a"], epoch.zk_version)
    assert zk.topics_marked_for_deletion() == ["b"]
    zk.resign_controller(epoch.zk_version)
    assert second_session.register_controller(2) is not None
    with pytest.raises(ControllerMovedError):
        zk.delete_topic_deletions(["b"], epoch.zk_version)
    assert zk.topics_marked_for_deletion() == ["b"]


def test_topic_assignments_are_read_together_and_missing_topics_left_out(zk):
    one, two = topic("one", {0: (1, 2)}), topic("two", {0: (2,), 1: (1,)})
    zk.create_topic(one)
    zk.create_topic(two)
    assert zk.topic_assignments(["one", "two", "none"]) == {"one": one, "two": two}


def test_topic_watch_fires_on_an_assignment_rewrite_until_told_to_stop(zk):
    created = topic("t", {0: (1,)})
    zk.create_topic(created)
    seen: queue.Queue[bool] = queue.Queue()
    keep_watching = threading.Event()
    keep_watching.set()

    def changed(exists: bool) -> bool:
        seen.put(exists)
        return keep_watching.is_set()

    zk.watch_topic("t", changed)
    assert seen.get(timeout=WAIT) is True
    grown = TopicAssignment("t", created.topic_id, {**created.partitions, 1: ReplicaAssignment((1,))})
    zk.set_topic_assignment(grown)
    assert seen.get(timeout=WAIT) is True
    keep_watching.clear()
    zk.set_topic_assignment(created)
    assert seen.get(timeout=WAIT) is True  # the call that said stop
    zk.set_topic_assignment(grown)
    with pytest.raises(queue.Empty):
        seen.get(timeout=1)


def test_broker_watch_sees_a_registration_rewritten_and_removed(zk, second_session):
    second_session.register_broker(registration(2))
    seen: queue.Queue[bool] = queue.Queue()
    zk.watch_broker(2, seen.put)
    assert seen.get(timeout=WAIT) is True
    moved = BrokerRegistration(2, (EndPoint("PLAINTEXT", "127.0.0.1", 9999, "PLAINTEXT"),))
    second_session.update_broker_registration(moved)
    assert seen.get(timeout=WAIT) is True
    second_session.close()
    assert seen.get(timeout=WAIT) is False


def test_admin_znode_watches_see_elections_and_reassignments_requested(zk):
    elections: queue.Queue[bool] = queue.Queue()
    reassignments: queue.Queue[bool] = queue.Queue()
    zk.watch_preferred_replica_election(elections.put)
    zk.watch_partition_reassignment(reassignments.put)
    assert (elections.get(timeout=WAIT), reassignments.get(timeout=WAIT)) == (False, False)
    zk.create_preferred_replica_election([("t", 0)])
    zk.create_partition_reassignment({("t", 0): (2, 1)})
    assert (elections.get(timeout=WAIT), reassignments.get(timeout=WAIT)) == (True, True)


def test_reassignment_watch_reports_each_creation_but_not_rewrites_or_deletion(zk):
    # Kafka's PartitionReassignmentHandler has only handleCreation
    seen: queue.Queue[bool] = queue.Queue()
    zk.watch_partition_reassignment(seen.put)
    assert seen.get(timeout=WAIT) is False
    zk.create_partition_reassignment({("t", 0): (2, 1)})
    assert seen.get(timeout=WAIT) is True
    epoch = zk.register_controller(1)
    zk.set_partition_reassignment({("t", 0): (2, 3)}, epoch.zk_version)
    zk.delete_partition_reassignment(epoch.zk_version)
    zk.create_partition_reassignment({("t", 1): (1, 2)})
    assert seen.get(timeout=WAIT) is True
    # a barrier: the session's watch callbacks run in order, so once a later change's has run, all before it have
    barrier: queue.Queue[bool] = queue.Queue()
    zk.watch_preferred_replica_election(barrier.put)
    zk.create_preferred_replica_election([("t", 0)])
    assert barrier.get(timeout=WAIT) is False and barrier.get(timeout=WAIT) is True
    assert seen.empty()


def test_reassignment_znode_rewrite_is_fenced_on_the_controller_epoch(zk):
    epoch = zk.register_controller(1)
    zk.create_partition_reassignment({("t", 0): (2, 1), ("t", 1): (1, 2)})
    with pytest.raises(ControllerMovedError):
        zk.set_partition_reassignment({("t", 1): (1, 2)}, epoch.zk_version + 1)
    zk.set_partition_reassignment({("t", 1): (1, 2)}, epoch.zk_version)
    assert zk.partition_reassignment() == {("t", 1): (1, 2)}


def test_session_expiry_is_announced_before_the_new_session(zookeeper_server, zk):
    order: queue.Queue[str] = queue.Queue()
    zk.on_session_lost(lambda: order.put("lost"))
    zk.on_new_session(lambda: order.put("new"))
    expire_session(zookeeper_server.connect, zk)
    assert order.get(timeout=WAIT * 2) == "lost"
    assert order.get(timeout=WAIT * 2) == "new"
