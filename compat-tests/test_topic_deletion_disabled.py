"""delete.topic.enable=false: DeleteTopics is refused with TOPIC_DELETION_DISABLED and the topic stays, as Kafka's
brokers (ZooKeeper mode) and controllers (KRaft) answer."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.client("confluent-kafka"),
              pytest.mark.scenario("DeleteTopics with delete.topic.enable=false")]


def test_delete_topics_is_refused_with_topic_deletion_disabled_and_the_topic_stays(fresh_broker) -> None:
    bootstrap = fresh_broker("no-delete", "delete.topic.enable=false").bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([topic], operation_timeout=10)[topic].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED
    assert topic in admin.list_topics(timeout=10).topics
