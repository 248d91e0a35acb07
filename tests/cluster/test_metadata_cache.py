"""The metadata cache holds what the controller's last UpdateMetadata said, as Kafka's ZkMetadataCache."""

from __future__ import annotations

import uuid

from kbroker.cluster.metadata_cache import (
    LEADER_DURING_DELETE,
    MetadataCache,
    PartitionMetadata,
    from_update_metadata,
    updates,
)
from kbroker.cluster.model import BrokerRegistration, EndPoint
from wire import messages

TOPIC_ID = uuid.uuid4()


def broker(broker_id: int, port: int, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),), rack)


def state(partition: int, leader: int, epoch: int = 3) -> PartitionMetadata:
    return PartitionMetadata("t", partition, leader, epoch, (1, 2), (1, 2))


def test_update_replaces_the_live_brokers_and_names_the_controller() -> None:
    cache = MetadataCache()
    cache.update(updates([broker(1, 9001), broker(2, 9002)], [], controller_id=1))
    cache.update(updates([broker(2, 9002, "r2")], [], controller_id=2))
    assert [b.broker_id for b in cache.alive_brokers()] == [2]
    assert cache.controller_id == 2
    assert cache.alive_broker(2).rack == "r2"


def test_partition_states_accumulate_across_updates() -> None:
    cache = MetadataCache()
    cache.update(updates([broker(1, 9001)], [state(0, 1)], topic_ids={"t": TOPIC_ID}))
    cache.update(updates([broker(1, 9001)], [state(1, 2, epoch=7)]))
    assert [(p.partition, p.leader, p.leader_epoch) for p in cache.partitions("t")] == [(0, 1, 3), (1, 2, 7)]
    assert cache.topic_id("t") == TOPIC_ID


def test_leader_during_delete_removes_the_partition_and_reports_it() -> None:
    cache = MetadataCache()
    cache.update(updates([broker(1, 9001)], [state(0, 1), state(1, 1)], topic_ids={"t": TOPIC_ID}))
    deleted = cache.update(updates([broker(1, 9001)], [state(0, LEADER_DURING_DELETE), state(1, LEADER_DURING_DELETE)]))
    assert deleted == [("t", 0), ("t", 1)]
    assert not cache.contains("t")
    assert cache.topic_name(TOPIC_ID) is None


def test_leader_endpoint_is_none_when_the_leader_is_not_alive() -> None:
    cache = MetadataCache()
    cache.update(updates([broker(1, 9001)], [state(0, 1), state(1, 2)]))
    assert cache.leader_endpoint("t", 0, "PLAINTEXT").port == 9001
    assert cache.leader_endpoint("t", 1, "PLAINTEXT") is None


def test_update_metadata_v8_request_becomes_records() -> None:
    R = messages.UpdateMetadataRequest
    request = R(controller_id=1, controller_epoch=4, broker_epoch=10, type=0, topic_states=[R.UpdateMetadataTopicState(
        topic_name="t", topic_id=TOPIC_ID, partition_states=[R.UpdateMetadataPartitionState(
            partition_index=0, controller_epoch=4, leader=2, leader_epoch=5, isr=[2], zk_version=9,
            replicas=[2, 1], offline_replicas=[1])])],
        live_brokers=[R.UpdateMetadataBroker(id=2, rack="a", endpoints=[R.UpdateMetadataEndpoint(
            port=9092, host="h", listener="INTERNAL", security_protocol=1)])])
    update = from_update_metadata(request)
    assert update.brokers == (BrokerRegistration(2, (EndPoint("INTERNAL", "h", 9092, "SSL"),), "a"),)
    assert update.partitions == (PartitionMetadata("t", 0, 2, 5, (2, 1), (2,), (1,), 9, 4),)
    assert (update.controller_id, update.controller_epoch, update.topic_ids) == (1, 4, {"t": TOPIC_ID})
