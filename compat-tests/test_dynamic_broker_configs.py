"""Dynamic broker configs (issue 19 item 4): AlterConfigs and IncrementalAlterConfigs on a BROKER resource,
this broker (its id) or the cluster default (the empty name), against a broker of the kind under test.

The requests go over the wire (the stock Python clients refuse an empty broker name). Kafka applies a
dynamic config a moment after it answers, in KRaft and ZooKeeper mode alike, so the tests wait for
DescribeConfigs (or the effect) to show it. Every test puts back what it set: the module shares one broker.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import differential as wd
import settle
from settle import eventually

pytestmark = [pytest.mark.client("wire"), pytest.mark.scenario("Describe/alter configs")]

BROKER, TOPIC = 4, 2
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = 1, 2, 3, 5
INVALID_REQUEST = 42
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
HOUR_MS = 3_600_000


class DynamicConfigs:
    """One connection to the broker: alter and describe its BROKER resources; remembers what it set."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.conn = wd.Connection(bootstrap)
        self.node = str(next(iter(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).brokers)))
        self.touched: dict[str, set[str]] = {}

    def alter(self, resource: str, *ops: tuple[str, int, str | None], validate_only: bool = False,
              resource_type: int = BROKER) -> tuple[int, str | None]:
        """IncrementalAlterConfigs on one resource: (error code, error message)."""
        if not validate_only and resource_type == BROKER:
            self.touched.setdefault(resource, set()).update(name for name, _, _ in ops)
        request = wd.build("IncrementalAlterConfigsRequest", 1, {"validate_only": validate_only, "resources": [
            {"resource_type": resource_type, "resource_name": resource,
             "configs": [{"name": name, "config_operation": op, "value": value} for name, op, value in ops]}]})
        [response] = self.conn.call(INCREMENTAL_ALTER_CONFIGS, 1, request).responses
        return response.error_code, response.error_message

    def describe(self, resource: str, *keys: str, resource_type: int = BROKER) -> dict[str, dict]:
        """DescribeConfigs with synonyms: {name: {value, config_source, read_only, is_sensitive, synonyms}}."""
        request = wd.build("DescribeConfigsRequest", 4, {"include_synonyms": True, "include_documentation": False,
                                                         "resources": [{"resource_type": resource_type,
                                                                        "resource_name": resource,
                                                                        "configuration_keys": list(keys) or None}]})
        [result] = self.conn.call(DESCRIBE_CONFIGS, 4, request).results
        assert result.error_code == 0, result.error_message
        return {c.name: {"value": c.value, "source": c.config_source, "read_only": c.read_only,
                         "sensitive": c.is_sensitive, "synonyms": [(s.name, s.value, s.source) for s in c.synonyms]}
                for c in result.configs}

    def value_when(self, resource: str, name: str, value: str | None) -> dict | None:
        """The described entry of `name` once its value is `value` (None: once it is gone from the resource)."""
        found = eventually(lambda: self.describe(resource, name).get(name),
                           lambda entry: (entry is None) if value is None else (entry or {}).get("value") == value)
        return found

    def put_back(self) -> None:
        for resource, names in self.touched.items():
            self.alter(resource, *((name, DELETE, None) for name in sorted(names)))
        self.conn.close()


@pytest.fixture(scope="module")
def bootstrap_dynamic(own_broker) -> str:
    """The module's broker; its retention check runs every second (a static setting, 5 minutes by default)."""
    return own_broker("dynamic-configs", "log.retention.check.interval.ms=1000").bootstrap


@pytest.fixture
def configs(bootstrap_dynamic: str) -> Iterator[DynamicConfigs]:
    admin = DynamicConfigs(bootstrap_dynamic)
    yield admin
    admin.put_back()


# --- what DescribeConfigs reports ----------------------------------------------------------------


def test_cluster_default_is_described_as_dynamic_default_broker_config(configs):
    """A config set on the empty name is listed there, writable, with itself as its only synonym."""
    assert configs.alter("", ("log.retention.ms", SET, "5400000")) == (0, None)
    entry = configs.value_when("", "log.retention.ms", "5400000")
    assert entry == {"value": "5400000", "source": DYNAMIC_DEFAULT, "read_only": False, "sensitive": False,
                     "synonyms": [("log.retention.ms", "5400000", DYNAMIC_DEFAULT)]}


def test_broker_config_synonyms_list_this_broker_then_the_cluster_default_then_the_default(configs):
    """Kafka's precedence in DescribeConfigs: per broker, cluster default, (static,) default; the finer
    unit first within each level."""
    assert configs.alter("", ("log.retention.ms", SET, "5400000")) == (0, None)
    assert configs.alter(configs.node, ("log.retention.ms", SET, "3600000")) == (0, None)
    entry = configs.value_when(configs.node, "log.retention.ms", "3600000")
    assert (entry["source"], entry["read_only"]) == (DYNAMIC_BROKER, False)
    assert entry["synonyms"] == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                                 ("log.retention.ms", "5400000", DYNAMIC_DEFAULT),
                                 ("log.retention.hours", "168", DEFAULT)]


def test_topic_without_override_reports_the_dynamic_default_as_its_source(configs, topic_name):
    """A topic config falls back to the broker's dynamic default, and says so."""
    topic = settle.create_topic(configs.bootstrap, topic_name, 1)
    assert configs.alter("", ("log.retention.ms", SET, "5400000")) == (0, None)
    entry = eventually(lambda: configs.describe(topic, "retention.ms", resource_type=TOPIC)["retention.ms"],
                       lambda found: found["value"] == "5400000")
    assert (entry["value"], entry["source"]) == ("5400000", DYNAMIC_DEFAULT)
    assert entry["synonyms"] == [("log.retention.ms", "5400000", DYNAMIC_DEFAULT),
                                 ("log.retention.hours", "168", DEFAULT)]


def test_unknown_broker_config_is_kept_and_described_as_sensitive(configs):
    """Kafka stores a name it does not know and shows it without its value (it cannot tell it is no secret)."""
    name = f"kbroker.compat.{uuid.uuid4().hex[:8]}"
    assert configs.alter("", (name, SET, "x")) == (0, None)
    entry = eventually(lambda: configs.describe("").get(name), lambda found: found is not None)
    assert entry == {"value": None, "source": DYNAMIC_DEFAULT, "read_only": True, "sensitive": True,
                     "synonyms": [(name, None, DYNAMIC_DEFAULT)]}


def test_incremental_append_to_a_broker_list_config_starts_from_its_default(configs):
    """APPEND on a list config not set on the resource adds to the config's default (delete)."""
    assert configs.alter("", ("log.cleanup.policy", APPEND, "compact")) == (0, None)
    assert configs.value_when("", "log.cleanup.policy", "delete,compact")["source"] == DYNAMIC_DEFAULT


# --- what is refused -----------------------------------------------------------------------------


def test_invalid_value_is_refused_with_kafkas_message(configs):
    assert configs.alter("", ("message.max.bytes", SET, "abc")) == (
        INVALID_REQUEST, "Invalid value abc for configuration message.max.bytes: Not a number of type INT")


def test_per_broker_config_is_refused_on_the_cluster_default(configs):
    code, message = configs.alter("", ("listeners", SET, "PLAINTEXT://127.0.0.1:9"), validate_only=True)
    assert code == INVALID_REQUEST
    assert message.startswith("Cannot update these configs at default cluster level, broker id must be specified")
    assert "listeners" in message


def test_security_config_is_refused_without_a_listener_prefix(configs):
    code, message = configs.alter(configs.node, ("ssl.keystore.type", SET, "PKCS12"), validate_only=True)
    assert code == INVALID_REQUEST
    assert message.startswith("These security configs can be dynamically updated only per-listener using the "
                              "listener prefix")


def test_validate_only_accepts_a_dynamic_config_and_changes_nothing(configs):
    assert configs.alter("", ("message.max.bytes", SET, "2000000"), validate_only=True) == (0, None)
    time.sleep(1)  # Kafka applies asynchronously: give a wrongly applied change the time to show
    assert "message.max.bytes" not in configs.describe("")
    assert configs.describe(configs.node, "message.max.bytes")["message.max.bytes"]["value"] == "1048588"


# --- what changes without a restart -----------------------------------------------------------------


def _produce_once(bootstrap: str, topic: str, size: int) -> int:
    """Produce one record of `size` bytes; Kafka's error code for it (0 when written)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000, "retries": 0,
                         "compression.type": "none"})
    producer.produce(topic, value=b"x" * size, partition=0, on_delivery=lambda error, message: outcome.append(error))
    producer.flush(15)
    assert outcome, "no delivery report"
    return 0 if outcome[0] is None else outcome[0].code()


def test_message_max_bytes_cluster_default_changes_what_produce_accepts(configs, topic_name):
    """A record over the default message.max.bytes is refused until the cluster default is raised; the
    topic, created before, has no override."""
    topic = settle.create_topic(configs.bootstrap, topic_name, 1)
    assert _produce_once(configs.bootstrap, topic, 1_200_000) == KafkaError.MSG_SIZE_TOO_LARGE
    assert configs.alter("", ("message.max.bytes", SET, "2000000")) == (0, None)
    assert eventually(lambda: _produce_once(configs.bootstrap, topic, 1_200_000), lambda code: code == 0) == 0


def _low_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex[:6]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[0]
    finally:
        consumer.close()


def test_log_retention_ms_cluster_default_deletes_old_segments_of_a_topic_without_override(configs, topic_name):
    """Three segments of records stamped two hours ago (one batch each, segment.ms rolls between them) stay
    under the 7-day default; a cluster default of one hour deletes at least the two older segments."""
    topic = settle.create_topic(configs.bootstrap, topic_name, 1, **{"segment.ms": "100"})
    two_hours_ago = int(time.time() * 1000) - 2 * HOUR_MS
    producer = Producer({"bootstrap.servers": configs.bootstrap, "linger.ms": 0})
    for index in range(3):
        producer.produce(topic, value=b"v%d" % index, partition=0, timestamp=two_hours_ago)
        assert producer.flush(15) == 0
        time.sleep(0.3)  # older than segment.ms: the next append rolls a new segment
    time.sleep(2)  # two retention checks under the default: nothing goes
    assert _low_watermark(configs.bootstrap, topic) == 0
    assert configs.alter("", ("log.retention.ms", SET, str(HOUR_MS))) == (0, None)
    assert eventually(lambda: _low_watermark(configs.bootstrap, topic), lambda low: low >= 2, timeout=30) >= 2


def test_dynamic_configs_survive_a_restart(fresh_broker):
    broker = fresh_broker("restart-configs")
    configs = DynamicConfigs(broker.bootstrap)
    assert configs.alter("", ("message.max.bytes", SET, "2000000")) == (0, None)
    assert configs.alter(configs.node, ("log.retention.ms", SET, "3600000")) == (0, None)
    configs.value_when(configs.node, "log.retention.ms", "3600000")
    configs.value_when(configs.node, "message.max.bytes", "2000000")
    configs.conn.close()
    broker.stop()
    broker.start()
    configs = DynamicConfigs(broker.bootstrap)
    retention = configs.value_when(configs.node, "log.retention.ms", "3600000")
    size = configs.value_when(configs.node, "message.max.bytes", "2000000")
    assert (retention["source"], size["source"]) == (DYNAMIC_BROKER, DYNAMIC_DEFAULT)
    configs.conn.close()


def _api_versions_frame() -> bytes:
    body = b"".join((struct.pack(">hhi", 18, 0, 7), struct.pack(">h", 6), b"compat"))  # ApiVersions v0, id 7
    return struct.pack(">i", len(body)) + body


def _answered(sock: socket.socket, timeout: float) -> bool:
    """Whether the broker's answer to the request already sent starts arriving within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        return len(sock.recv(4)) > 0
    except TimeoutError:
        return False


def test_connection_beyond_max_connections_waits_unanswered_until_the_limit_rises(fresh_broker):
    """max.connections=4: new connections are served until four are open (ours among them, and in ZooKeeper
    mode Kafka's controller's own); the next is accepted by the kernel but not served, as Kafka's acceptor
    blocks, until the limit rises again."""
    broker = fresh_broker("max-connections")
    configs = DynamicConfigs(broker.bootstrap)
    assert configs.alter("", ("max.connections", SET, "4")) == (0, None)
    configs.value_when(configs.node, "max.connections", "4")
    host, port = broker.bootstrap.rsplit(":", 1)
    opened: list[socket.socket] = []
    try:
        while len(opened) < 5:
            opened.append(socket.create_connection((host, int(port)), timeout=10))
            opened[-1].sendall(_api_versions_frame())
            if not _answered(opened[-1], 3):
                break
        assert len(opened) <= 4, "more connections served than max.connections"
        assert configs.alter("", ("max.connections", DELETE, None)) == (0, None)
        assert _answered(opened[-1], 15)
    finally:
        for sock in opened:
            sock.close()
        configs.conn.close()
