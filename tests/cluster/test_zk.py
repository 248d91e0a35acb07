"""kbroker/cluster/zk.py against a real ZooKeeper: Kafka 3.9's znodes, JSON, ephemerality and conditional writes."""

from __future__ import annotations

import json
import queue
import threading
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from kbroker.cluster import zk as zkmod
from kbroker.cluster.model import (
    RECOVERING,
    BrokerRegistration,
    EndPoint,
    FinalizedFeatures,
    LeaderAndIsr,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
)
from kbroker.cluster.zk import ControllerMovedError, TopicExistsError, WriteStatus, ZkClient

WAIT = 15


def registration(broker_id: int, port: int = 9092, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),), rack)


def raw(client: ZkClient, path: str) -> dict:
    found = client.get(path)
    assert found is not None, path
    return json.loads(found[0])


def assignment(name: str, partitions: int = 2, replicas: tuple[int, ...] = (1,)) -> TopicAssignment:
    return TopicAssignment(name, uuid.uuid4(), {p: ReplicaAssignment(replicas) for p in range(partitions)})


def leadership(leader: int, epoch: int, isr: tuple[int, ...], zk_version: int = 0,
               controller_epoch: int = 1) -> PartitionState:
    return PartitionState(LeaderAndIsr(leader, epoch, isr, partition_epoch=zk_version), controller_epoch)


# ---- connection, chroot, bootstrap

def test_zookeeper_connect_splits_hosts_from_chroot():
    assert zkmod.split_connect("a:1,b:2/kafka/one/") == ("a:1,b:2", "/kafka/one")
    assert zkmod.split_connect("a:1") == ("a:1", "")


def test_the_chroot_is_created_and_holds_every_znode(zookeeper_server, zookeeper):
    chroot = zookeeper.split("/", 1)[1]
    with ZkClient(zookeeper) as client:
        client.create_top_level_paths()
    root = KazooClient(hosts=zookeeper_server.connect)
    root.start()
    try:
        assert root.exists(f"/{chroot}/brokers/ids") is not None
        assert root.exists("/brokers") is None
    finally:
        root.stop()
        root.close()


def test_top_level_paths_are_the_persistent_paths_a_kafka_broker_creates(zk):
    for path in ("/consumers", "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes",
                 "/admin/delete_topics", "/isr_change_notification", "/latest_producer_id_block",
                 "/log_dir_event_notification", "/config/topics", "/config/clients", "/config/users",
                 "/config/brokers", "/config/ips"):
        data, stat = zk.get(path)
        assert data is None and stat.ephemeralOwner == 0, path


def test_cluster_id_is_created_once_then_read_back(zk):
    assert zk.create_or_get_cluster_id("first-id") == "first-id"
    assert zk.create_or_get_cluster_id("second-id") == "first-id"
    assert raw(zk, "/cluster/id") == {"version": "1", "id": "first-id"}


def test_generated_broker_sequence_ids_count_up_from_one(zk):
    assert [zk.generate_broker_sequence_id() for _ in range(3)] == [1, 2, 3]


# ---- brokers

def test_broker_registration_is_kafkas_version_5_json(zk):
    zk.register_broker(BrokerRegistration(
        3, (EndPoint("INTERNAL", "10.0.0.1", 9093, "SSL"), EndPoint("CLIENT", "10.0.0.1", 9092, "PLAINTEXT")),
        "rack-a", {"metadata.version": (1, 21)}))
    body = raw(zk, "/brokers/ids/3")
    assert int(body.pop("timestamp")) > 0
    assert body == {"version": 5, "host": "10.0.0.1", "port": 9092, "jmx_port": -1, "rack": "rack-a",
                    "endpoints": ["INTERNAL://10.0.0.1:9093", "CLIENT://10.0.0.1:9092"],
                    "listener_security_protocol_map": {"INTERNAL": "SSL", "CLIENT": "PLAINTEXT"},
                    "features": {"metadata.version": {"min_version": 1, "max_version": 21}}}


def test_broker_registration_reads_back_as_written(zk):
    written = BrokerRegistration(2, (EndPoint("PLAINTEXT", "::1", 9092, "PLAINTEXT"),), "r1", {"f": (1, 2)})
    epoch = zk.register_broker(written)
    assert zk.broker(2) == BrokerRegistration(2, written.endpoints, "r1", {"f": (1, 2)}, epoch)


def test_broker_registration_is_ephemeral(zookeeper, zk):
    with ZkClient(zookeeper) as other:
        other.register_broker(registration(5))
        assert zk.get("/brokers/ids/5")[1].ephemeralOwner == other.session_id
    assert zk.broker(5) is None


def test_broker_epoch_is_the_registration_czxid_and_grows_on_reregistration(zookeeper, zk):
    with ZkClient(zookeeper) as first:
        epoch = first.register_broker(registration(1))
        assert epoch == zk.get("/brokers/ids/1")[1].czxid
    with ZkClient(zookeeper) as second:
        assert second.register_broker(registration(1)) > epoch


def test_a_live_broker_id_cannot_be_registered_by_another_session(zk, second_session):
    zk.register_broker(registration(1))
    with pytest.raises(NodeExistsError):
        second_session.register_broker(registration(1, port=9999))
    assert zk.broker(1).endpoints[0].port == 9092


def test_live_brokers_lists_every_registration_by_id_with_its_epoch(zk, second_session):
    epochs = {7: zk.register_broker(registration(7)), 2: second_session.register_broker(registration(2))}
    assert [(b.broker_id, b.broker_epoch) for b in zk.live_brokers()] == [(2, epochs[2]), (7, epochs[7])]


def test_broker_watch_sees_brokers_join_and_leave(zookeeper, zk):
    seen: queue.Queue[list[int]] = queue.Queue()
    zk.watch_brokers(seen.put)
    assert seen.get(timeout=WAIT) == []
    with ZkClient(zookeeper) as other:
        other.register_broker(registration(4))
        assert seen.get(timeout=WAIT) == [4]
    assert seen.get(timeout=WAIT) == []


# ---- controller

def test_the_controller_znode_is_ephemeral_version_2_json(zk):
    zk.register_controller(1)
    data, stat = zk.get("/controller")
    body = json.loads(data)
    assert int(body.pop("timestamp")) > 0
    assert body == {"version": 2, "brokerid": 1, "kraftControllerEpoch": -1}
    assert stat.ephemeralOwner == zk.session_id


def test_the_first_controller_gets_epoch_1_in_a_persistent_epoch_znode(zk):
    elected = zk.register_controller(1)
    assert (elected.epoch, elected.zk_version) == (1, 1)
    data, stat = zk.get("/controller_epoch")
    assert data == b"1" and stat.ephemeralOwner == 0


def test_only_one_of_two_brokers_racing_becomes_controller(zk, second_session):
    barrier = threading.Barrier(2)
    results: dict[int, object] = {}

    def race(client: ZkClient, broker_id: int) -> None:
        barrier.wait()
        results[broker_id] = client.register_controller(broker_id)

    threads = [threading.Thread(target=race, args=(c, i)) for c, i in ((zk, 1), (second_session, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    winners = [broker_id for broker_id, won in results.items() if won is not None]
    assert len(winners) == 1 and zk.controller_id() == winners[0]
    assert zk.controller_epoch().epoch == 1


def test_each_election_increments_the_controller_epoch(zookeeper, zk):
    with ZkClient(zookeeper) as first:
        assert first.register_controller(1).epoch == 1
    assert zk.controller_id() is None
    assert zk.register_controller(2).epoch == 2


def test_a_deposed_controller_is_fenced_from_writing(zookeeper, zk):
    zk.create_topic(assignment("t", 1))
    with ZkClient(zookeeper) as old:
        stale = old.register_controller(1)
    zk.register_controller(2)
    with ZkClient(zookeeper) as old, pytest.raises(ControllerMovedError):
        old.create_partition_states("t", {0: leadership(1, 0, (1,))}, stale.zk_version)
    assert zk.partition_state("t", 0) is None


def test_controller_watch_sees_the_controller_go_and_another_come(zookeeper, zk):
    seen: queue.Queue[int | None] = queue.Queue()
    zk.watch_controller(seen.put)
    assert seen.get(timeout=WAIT) is None
    with ZkClient(zookeeper) as first:
        first.register_controller(1)
        assert seen.get(timeout=WAIT) == 1
    assert seen.get(timeout=WAIT) is None
    zk.register_controller(2)
    assert seen.get(timeout=WAIT) == 2


def test_a_controller_resigning_with_a_stale_epoch_leaves_its_successor(zookeeper, zk):
    with ZkClient(zookeeper) as old:
        stale = old.register_controller(1)
    zk.register_controller(2)
    with pytest.raises(ControllerMovedError):
        zk.resign_controller(stale.zk_version)
    assert zk.controller_id() == 2


# ---- topics

def test_a_new_topic_has_version_3_assignment_and_its_config_znode(zk):
    topic = TopicAssignment("orders", uuid.UUID("95efbc27-49df-4b03-9e10-f10a42a0ac2a"),
                            {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 1))})
    zk.create_topic(topic, {"retention.ms": "12345"})
    assert raw(zk, "/brokers/topics/orders") == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 1]},
                                                 "topic_id": "le-8J0nfSwOeEPEKQqCsKg",
                                                 "adding_replicas": {}, "removing_replicas": {}}
    assert raw(zk, "/config/topics/orders") == {"version": 1, "config": {"retention.ms": "12345"}}
    assert zk.topic_assignment("orders") == topic


def test_a_topic_without_overrides_still_gets_an_empty_config_znode(zk):
    zk.create_topic(assignment("plain"))
    assert raw(zk, "/config/topics/plain") == {"version": 1, "config": {}}


def test_creating_an_existing_topic_is_refused_and_changes_nothing(zk):
    first = assignment("dup")
    zk.create_topic(first, {"a": "1"})
    with pytest.raises(TopicExistsError, match="already exists"):
        zk.create_topic(assignment("dup", 5), {"a": "2"})
    assert zk.topic_assignment("dup") == first
    assert zk.entity_config("topics", "dup") == {"a": "1"}


def test_a_topic_marked_for_deletion_cannot_be_created_again(zk):
    zk.create_topic(assignment("going"))
    assert zk.mark_topic_for_deletion("going")
    with pytest.raises(TopicExistsError, match="marked for deletion"):
        zk.create_topic(assignment("going"))


def test_reassignment_replicas_appear_in_the_topic_znode(zk):
    zk.create_topic(assignment("moving", 1, (1, 2)))
    moving = TopicAssignment("moving", zk.topic_assignment("moving").topic_id,
                             {0: ReplicaAssignment((3, 1, 2), adding=(3,), removing=(2,))})
    assert zk.set_topic_assignment(moving).ok
    body = raw(zk, "/brokers/topics/moving")
    assert (body["adding_replicas"], body["removing_replicas"]) == ({"0": [3]}, {"0": [2]})
    assert zk.topic_assignment("moving") == moving


def test_topic_watch_sees_a_new_topic(zk):
    seen: queue.Queue[list[str]] = queue.Queue()
    zk.watch_topics(seen.put)
    assert seen.get(timeout=WAIT) == []
    zk.create_topic(assignment("new"))
    assert seen.get(timeout=WAIT) == ["new"]


def test_deleting_a_topics_znodes_removes_tree_config_and_mark(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("gone", 1))
    zk.create_partition_states("gone", {0: leadership(1, 0, (1,))}, elected.zk_version)
    zk.mark_topic_for_deletion("gone")
    zk.delete_topic_znodes("gone", elected.zk_version)
    assert not any(zk.exists(p) for p in ("/brokers/topics/gone", "/config/topics/gone", "/admin/delete_topics/gone"))


# ---- partition states

def test_partition_state_is_version_1_json_under_structural_znodes(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("t", 1))
    result = zk.create_partition_states("t", {0: leadership(2, 0, (2, 1), controller_epoch=elected.epoch)},
                                        elected.zk_version)
    assert result[0].ok and result[0].version == 0
    assert raw(zk, "/brokers/topics/t/partitions/0/state") == {
        "version": 1, "leader": 2, "leader_epoch": 0, "controller_epoch": 1, "isr": [2, 1]}
    assert zk.get("/brokers/topics/t/partitions")[0] is None and zk.get("/brokers/topics/t/partitions/0")[0] is None


def test_partition_state_reads_back_with_its_znode_version(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("t", 1))
    zk.create_partition_states("t", {0: leadership(1, 0, (1,))}, elected.zk_version)
    assert zk.update_partition_state("t", 0, leadership(1, 1, (1,), zk_version=0)).version == 1
    assert zk.partition_state("t", 0) == leadership(1, 1, (1,), zk_version=1)
    assert zk.partition_states([("t", 0), ("t", 9)]) == {("t", 0): leadership(1, 1, (1,), zk_version=1)}


def test_a_stale_partition_state_write_gets_a_version_conflict(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("t", 1))
    zk.create_partition_states("t", {0: leadership(1, 0, (1, 2))}, elected.zk_version)
    assert zk.update_partition_state("t", 0, leadership(1, 0, (1,), zk_version=0), elected.zk_version).ok
    stale = zk.update_partition_state("t", 0, leadership(2, 1, (2,), zk_version=0), elected.zk_version)
    assert stale.status is WriteStatus.VERSION_CONFLICT and stale.status.value == "version conflict"
    assert zk.partition_state("t", 0).leader_and_isr.isr == (1,)


def test_creating_an_existing_partition_state_reports_node_exists(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("t", 1))
    zk.create_partition_states("t", {0: leadership(1, 0, (1,))}, elected.zk_version)
    again = zk.create_partition_states("t", {0: leadership(1, 5, (1,))}, elected.zk_version)
    assert again[0].status is WriteStatus.NODE_EXISTS


def test_leader_recovery_state_is_written_only_while_recovering(zk):
    elected = zk.register_controller(1)
    zk.create_topic(assignment("t", 1))
    recovering = PartitionState(LeaderAndIsr(1, 3, (1,), RECOVERING), 1)
    zk.create_partition_states("t", {0: recovering}, elected.zk_version)
    assert raw(zk, "/brokers/topics/t/partitions/0/state")["leader_recovery_state"] == RECOVERING
    zk.update_partition_state("t", 0, leadership(1, 3, (1,)))
    assert "leader_recovery_state" not in raw(zk, "/brokers/topics/t/partitions/0/state")


# ---- configs and notifications

def test_a_config_change_writes_the_entity_then_a_version_2_notification(zk):
    name = zk.change_entity_config("topics", "t", {"cleanup.policy": "compact"})
    assert name == "config_change_0000000000"
    assert raw(zk, "/config/topics/t") == {"version": 1, "config": {"cleanup.policy": "compact"}}
    assert raw(zk, f"/config/changes/{name}") == {"version": 2, "entity_path": "topics/t"}
    assert zk.config_changes() == [(name, "topics/t")]


def test_the_cluster_default_broker_config_lives_under_default(zk):
    zk.change_entity_config("brokers", zkmod.DEFAULT_ENTITY, {"log.cleaner.threads": "2"})
    assert zk.entity_config("brokers", "<default>") == {"log.cleaner.threads": "2"}
    assert zk.entities_with_config("brokers") == ["<default>"]


def test_entity_names_are_sanitized_as_kafkas_sanitizer_does():
    assert zkmod.sanitize_entity_name("User:alice smith*~é") == "User%3Aalice%20smith%2A%7E%C3%A9"
    assert zkmod.sanitize_entity_name("client-1.a_b") == "client-1.a_b"


def test_config_change_watch_sees_a_new_notification(zk):
    seen: queue.Queue[list[str]] = queue.Queue()
    zk.watch_config_changes(seen.put)
    assert seen.get(timeout=WAIT) == []
    zk.change_entity_config("topics", "t", {})
    assert seen.get(timeout=WAIT) == ["config_change_0000000000"]


# ---- admin znodes

def test_partition_reassignment_znode_is_kafkas_version_1_json(zk):
    assert zk.create_partition_reassignment({("t", 0): (2, 3)})
    assert raw(zk, "/admin/reassign_partitions") == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}
    assert zk.partition_reassignment() == {("t", 0): (2, 3)}
    zk.delete_partition_reassignment()
    assert zk.partition_reassignment() is None


def test_a_partition_reassignment_znode_that_is_not_kafkas_json_reads_as_empty(zk):
    zk.kazoo.create("/admin/reassign_partitions", b'{"version":1,"partitions":[{"topic":"t"}]}', makepath=True)
    assert zk.partition_reassignment() == {}


def test_preferred_replica_election_znode_is_kafkas_version_1_json(zk):
    assert zk.create_preferred_replica_election([("t", 1)])
    assert raw(zk, "/admin/preferred_replica_election") == {"version": 1,
                                                            "partitions": [{"topic": "t", "partition": 1}]}
    assert zk.preferred_replica_election() == {("t", 1)}


def test_topic_deletion_marks_are_listed_and_watched(zk):
    seen: queue.Queue[list[str]] = queue.Queue()
    zk.watch_topic_deletions(seen.put)
    assert seen.get(timeout=WAIT) == []
    assert zk.mark_topic_for_deletion("x") and not zk.mark_topic_for_deletion("x")
    assert seen.get(timeout=WAIT) == ["x"] and zk.topics_marked_for_deletion() == ["x"]


def test_feature_znode_is_kafka_3_9s_version_2_json(zk):
    assert zk.write_features(FinalizedFeatures(True)) == 0
    assert raw(zk, "/feature") == {"version": 2, "status": 1, "features": {}}
    zk.write_features(FinalizedFeatures(True, {"metadata.version": 21}))
    assert zk.features() == FinalizedFeatures(True, {"metadata.version": 21}, 1)


# ---- producer id blocks

def test_the_first_producer_id_block_starts_at_zero_in_version_1_json(zk):
    block = zk.allocate_producer_id_block(3)
    assert (block.first_producer_id, block.last_producer_id) == (0, 999)
    assert raw(zk, "/latest_producer_id_block") == {"version": 1, "broker": 3, "block_start": "0",
                                                    "block_end": "999"}


def test_concurrent_producer_id_allocations_never_overlap(zk, second_session):
    blocks = []

    def allocate(client: ZkClient, broker_id: int) -> None:
        for _ in range(10):
            blocks.append(client.allocate_producer_id_block(broker_id))

    threads = [threading.Thread(target=allocate, args=(c, i)) for c, i in ((zk, 1), (second_session, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)
    assert sorted(b.first_producer_id for b in blocks) == [i * 1000 for i in range(20)]


# ---- sessions

def test_a_new_session_after_expiry_is_announced_so_ephemerals_can_be_rewritten(zookeeper_server, zk):
    renewed = threading.Event()
    zk.on_new_session(renewed.set)
    zk.register_broker(registration(1))
    session_id, password = zk.kazoo.client_id
    thief = KazooClient(hosts=zookeeper_server.connect, client_id=(session_id, password))
    thief.start()
    thief.stop()  # closing the same session from elsewhere expires it for zk
    thief.close()
    assert renewed.wait(WAIT * 2)
    assert zk.broker(1) is None  # the registration died with the old session


def test_broker_watch_keeps_firing_after_the_session_expires(zookeeper_server, zookeeper, zk):
    seen: queue.Queue[list[int]] = queue.Queue()
    renewed = threading.Event()
    zk.on_new_session(renewed.set)
    zk.watch_brokers(seen.put)
    assert seen.get(timeout=WAIT) == []
    session_id, password = zk.kazoo.client_id
    thief = KazooClient(hosts=zookeeper_server.connect, client_id=(session_id, password))
    thief.start()
    thief.stop()
    thief.close()
    assert renewed.wait(WAIT * 2)
    with ZkClient(zookeeper) as other:
        other.register_broker(registration(6))
        while (latest := seen.get(timeout=WAIT)) != [6]:  # the re-set watch may report [] once more first
            assert latest == []


def test_a_read_during_a_zookeeper_outage_completes_once_it_is_back(zookeeper_server, zookeeper):
    with ZkClient(zookeeper, session_timeout_ms=30_000) as client:
        client.create_top_level_paths()
        client.create_or_get_cluster_id("survives")
        zookeeper_server.stop()
        answer: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=lambda: answer.put(client.cluster_id()))
        try:
            reader.start()
            assert answer.empty()
        finally:
            zookeeper_server.start()
        assert answer.get(timeout=60) == "survives"
