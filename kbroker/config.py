"""Broker configuration under Kafka's own property names, with Kafka's defaults.

`server.properties` in, a typed `BrokerConfig` out. Unknown keys only warn (a Kafka
properties file carries many settings kbroker has no use for); a known key with a value of
the wrong type or range fails fast with a message naming the key.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.metadata_versions import DEFAULT_MESSAGE_FORMAT_VERSION, metadata_version_problem

log = logging.getLogger(__name__)

_HOUR_MS = 3_600_000
_PROPERTY_LINE = re.compile(r"\s*([^=:\s]+)\s*[=:]?\s*(.*)")
_LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration value Kafka would reject."""


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def _parse_str(text: str) -> str:
    return text.strip()


def _parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


@dataclass(frozen=True)
class Property:
    name: str
    parse: Callable[[str], object]
    default: object
    check: Callable[[object], bool] = lambda value: True
    expectation: str = ""


def _at_least(minimum: int) -> Callable[[object], bool]:
    return lambda value: isinstance(value, int) and value >= minimum


def _one_of(*choices: str) -> Callable[[object], bool]:
    return lambda value: value in choices


# Every property kbroker reads, with Kafka's default. Times are in the unit Kafka names them.
PROPERTIES: dict[str, Property] = {p.name: p for p in (
    # -1: a single node is broker 0; in cluster mode the id comes from ZooKeeper (broker.id.generation.enable)
    Property("broker.id", _parse_int, -1, _at_least(-1), ">= -1"),
    Property("broker.id.generation.enable", _parse_bool, True),
    Property("reserved.broker.max.id", _parse_int, 1000, _at_least(0), ">= 0"),
    Property("broker.rack", _parse_str, None),
    Property("node.id", _parse_int, None, _at_least(0), ">= 0"),
    Property("cluster.id", _parse_str, None),
    Property("listeners", _parse_list, ["PLAINTEXT://127.0.0.1:9092"]),
    Property("advertised.listeners", _parse_list, None),
    Property("log.dirs", _parse_list, None),
    Property("log.dir", _parse_str, "./kbroker-data"),
    Property("num.partitions", _parse_int, 1, _at_least(1), ">= 1"),
    Property("default.replication.factor", _parse_int, 1, _at_least(1), ">= 1"),
    Property("auto.create.topics.enable", _parse_bool, True),
    Property("delete.topic.enable", _parse_bool, True),
    Property("message.max.bytes", _parse_int, 1_048_588, _at_least(0), ">= 0"),
    Property("socket.request.max.bytes", _parse_int, 104_857_600, _at_least(1), ">= 1"),
    Property("log.segment.bytes", _parse_int, 1_073_741_824, _at_least(14), ">= 14"),
    Property("log.roll.ms", _parse_int, None, _at_least(1), ">= 1"),
    Property("log.roll.hours", _parse_int, 168, _at_least(1), ">= 1"),
    Property("log.index.interval.bytes", _parse_int, 4096, _at_least(0), ">= 0"),
    Property("log.index.size.max.bytes", _parse_int, 10_485_760, _at_least(4), ">= 4"),
    # any negative retention time means "no limit", as in Kafka (retention_ms)
    Property("log.retention.ms", _parse_int, None),
    Property("log.retention.minutes", _parse_int, None),
    Property("log.retention.hours", _parse_int, 168),
    Property("log.retention.bytes", _parse_int, -1, _at_least(-1), ">= -1"),
    Property("log.retention.check.interval.ms", _parse_int, 300_000, _at_least(1), ">= 1"),
    Property("log.flush.interval.messages", _parse_int, _LONG_MAX, _at_least(1), ">= 1"),
    Property("log.flush.interval.ms", _parse_int, None, _at_least(0), ">= 0"),
    Property("log.cleanup.policy", _parse_str, "delete"),
    # the log cleaner (kbroker.log.cleaner); one thread at most, see its docstring
    Property("log.cleaner.enable", _parse_bool, True),
    Property("log.cleaner.threads", _parse_int, 1, _at_least(0), ">= 0"),
    Property("log.cleaner.backoff.ms", _parse_int, 15_000, _at_least(0), ">= 0"),
    Property("log.cleaner.dedupe.buffer.size", _parse_int, 134_217_728, _at_least(0), ">= 0"),
    Property("log.cleaner.io.buffer.size", _parse_int, 524_288, _at_least(0), ">= 0"),
    Property("log.cleaner.io.buffer.load.factor", _parse_float, 0.9,
             lambda value: 0 < value <= 1, "in (0, 1]"),
    Property("log.cleaner.io.max.bytes.per.second", _parse_float, 1.7976931348623157e308,
             lambda value: value > 0, "> 0"),
    Property("log.message.timestamp.type", _parse_str, "CreateTime",
             _one_of("CreateTime", "LogAppendTime"), "CreateTime or LogAppendTime"),
    # how far CreateTime record timestamps may lie from the broker's clock: Kafka 4's defaults
    # (3.9 leaves the future unbounded too); difference.max.ms is 3.9's deprecated single bound
    Property("log.message.timestamp.before.max.ms", _parse_int, _LONG_MAX, _at_least(0), ">= 0"),
    Property("log.message.timestamp.after.max.ms", _parse_int, _HOUR_MS, _at_least(0), ">= 0"),
    Property("log.message.timestamp.difference.max.ms", _parse_int, _LONG_MAX, _at_least(0), ">= 0"),
    # deprecated in Kafka 3 and gone in 4: accepted and reported as 3.9 does, without effect
    Property("log.message.format.version", _parse_str, DEFAULT_MESSAGE_FORMAT_VERSION,
             lambda value: metadata_version_problem(str(value)) is None, "a Kafka version such as 2.8 or 3.0-IV1"),
    Property("log.message.downconversion.enable", _parse_bool, True),
    Property("offsets.topic.num.partitions", _parse_int, 50, _at_least(1), ">= 1"),
    Property("offsets.topic.replication.factor", _parse_int, 3, _at_least(1), ">= 1"),
    Property("offsets.commit.timeout.ms", _parse_int, 5000, _at_least(1), ">= 1"),
    Property("group.initial.rebalance.delay.ms", _parse_int, 3000, _at_least(0), ">= 0"),
    Property("group.max.size", _parse_int, 2_147_483_647, _at_least(1), ">= 1"),
    Property("group.min.session.timeout.ms", _parse_int, 6000, _at_least(0), ">= 0"),
    Property("group.max.session.timeout.ms", _parse_int, 1_800_000, _at_least(0), ">= 0"),
    Property("group.consumer.heartbeat.interval.ms", _parse_int, 5000, _at_least(1), ">= 1"),
    Property("group.consumer.min.heartbeat.interval.ms", _parse_int, 5000, _at_least(1), ">= 1"),
    Property("group.consumer.max.heartbeat.interval.ms", _parse_int, 15000, _at_least(1), ">= 1"),
    Property("group.consumer.session.timeout.ms", _parse_int, 45000, _at_least(1), ">= 1"),
    Property("group.consumer.min.session.timeout.ms", _parse_int, 45000, _at_least(1), ">= 1"),
    Property("group.consumer.max.session.timeout.ms", _parse_int, 60000, _at_least(1), ">= 1"),
    Property("group.consumer.assignors", _parse_list, ["uniform", "range"],
             lambda names: bool(names) and set(names) <= {"uniform", "range", "roundrobin", "sticky",
                                                          "cooperative-sticky"},
             "a non-empty list of uniform, range, roundrobin, sticky, cooperative-sticky"),
    Property("group.coordinator.rebalance.protocols", _parse_list, ["classic", "consumer"],
             lambda names: "classic" in names and set(names) <= {"classic", "consumer"},
             "a list of classic and consumer that includes classic"),
    Property("min.insync.replicas", _parse_int, 1, _at_least(1), ">= 1"),
    # broker-wide defaults of topic configs, reported by DescribeConfigs as their synonyms
    Property("compression.type", _parse_str, "producer",
             _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
             "uncompressed, zstd, lz4, snappy, gzip or producer"),
    Property("log.cleaner.delete.retention.ms", _parse_int, 86_400_000, _at_least(0), ">= 0"),
    Property("log.cleaner.min.cleanable.ratio", _parse_float, 0.5,
             lambda value: 0 <= value <= 1, "in [0, 1]"),
    Property("log.cleaner.min.compaction.lag.ms", _parse_int, 0, _at_least(0), ">= 0"),
    Property("log.cleaner.max.compaction.lag.ms", _parse_int, _LONG_MAX, _at_least(1), ">= 1"),
    Property("log.segment.delete.delay.ms", _parse_int, 60_000, _at_least(0), ">= 0"),
    Property("producer.id.expiration.ms", _parse_int, 86_400_000, _at_least(1), ">= 1"),
    Property("unclean.leader.election.enable", _parse_bool, False),
    Property("transaction.state.log.replication.factor", _parse_int, 3, _at_least(1), ">= 1"),
    Property("transaction.state.log.num.partitions", _parse_int, 50, _at_least(1), ">= 1"),
    Property("transaction.state.log.min.isr", _parse_int, 2, _at_least(1), ">= 1"),
    Property("transaction.state.log.segment.bytes", _parse_int, 104_857_600, _at_least(1), ">= 1"),
    Property("transaction.max.timeout.ms", _parse_int, 900_000, _at_least(1), ">= 1"),
    Property("request.timeout.ms", _parse_int, 30_000, _at_least(0), ">= 0"),
    Property("transaction.partition.verification.enable", _parse_bool, True),
    Property("transactional.id.expiration.ms", _parse_int, 604_800_000, _at_least(1), ">= 1"),
    Property("transaction.abort.timed.out.transaction.cleanup.interval.ms", _parse_int, 10_000, _at_least(1),
             ">= 1"),
    Property("transaction.remove.expired.transaction.cleanup.interval.ms", _parse_int, 3_600_000, _at_least(1),
             ">= 1"),
    # cluster mode (ZooKeeper, as Kafka 3.9): without zookeeper.connect the broker is a single node
    Property("zookeeper.connect", _parse_str, None),
    Property("zookeeper.session.timeout.ms", _parse_int, 18_000),
    Property("zookeeper.connection.timeout.ms", _parse_int, None),  # None: zookeeper.session.timeout.ms
    Property("inter.broker.listener.name", _parse_str, None),
    Property("controller.socket.timeout.ms", _parse_int, 30_000),
    Property("replica.lag.time.max.ms", _parse_int, 30_000),
    Property("replica.socket.timeout.ms", _parse_int, 30_000),
    Property("replica.fetch.min.bytes", _parse_int, 1),
    Property("replica.fetch.max.bytes", _parse_int, 1_048_576, _at_least(0), ">= 0"),
    Property("replica.fetch.wait.max.ms", _parse_int, 500),
    Property("replica.fetch.backoff.ms", _parse_int, 1000, _at_least(0), ">= 0"),
    Property("replica.fetch.response.max.bytes", _parse_int, 10_485_760, _at_least(0), ">= 0"),
    Property("num.replica.fetchers", _parse_int, 1, _at_least(1), ">= 1"),
    Property("controlled.shutdown.enable", _parse_bool, True),
    Property("controlled.shutdown.max.retries", _parse_int, 3),
    Property("controlled.shutdown.retry.backoff.ms", _parse_int, 5000),
    Property("auto.leader.rebalance.enable", _parse_bool, True),
    Property("leader.imbalance.per.broker.percentage", _parse_int, 10),
    Property("leader.imbalance.check.interval.seconds", _parse_int, 300, _at_least(1), ">= 1"),
    # connection limits (kbroker.net.quotas), dynamic as in Kafka
    Property("max.connections", _parse_int, 2_147_483_647, _at_least(0), ">= 0"),
    Property("max.connections.per.ip", _parse_int, 2_147_483_647, _at_least(0), ">= 0"),
)}

# kbroker's own settings, not Kafka's: read like the above, but DescribeConfigs never reports them
KBROKER_PROPERTIES: dict[str, Property] = {p.name: p for p in (
    Property("prometheus.port", _parse_int, None, lambda port: 0 <= port <= 65535, "a port number (0: any free one)"),
    Property("prometheus.host", _parse_str, None),  # None: the first listener's host, else 127.0.0.1
    Property("kbroker.faults.port", _parse_int, None, lambda port: 0 <= port <= 65535,
             "a port number (0: any free one)"),  # the fault injection endpoint (docs/testing.md)
)}

# Properties whose Kafka ConfigDef type is LONG; the other integers are INT. DescribeConfigs
# reports the type (v3+), and clients such as kafka-configs use it to format values.
LONG_PROPERTIES = frozenset({
    "log.roll.ms", "log.retention.ms", "log.retention.bytes", "log.retention.check.interval.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.cleaner.delete.retention.ms",
    "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms", "producer.id.expiration.ms",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms", "replica.lag.time.max.ms", "controlled.shutdown.retry.backoff.ms",
    "leader.imbalance.check.interval.seconds",
})
SHORT_PROPERTIES = frozenset({"offsets.topic.replication.factor", "transaction.state.log.replication.factor"})


def property_type(name: str) -> str:
    """Kafka's ConfigDef type name for a property: BOOLEAN, INT, LONG, DOUBLE, LIST or STRING."""
    parse = PROPERTIES[name].parse
    if parse is _parse_bool:
        return "BOOLEAN"
    if parse is _parse_int:
        return "LONG" if name in LONG_PROPERTIES else "SHORT" if name in SHORT_PROPERTIES else "INT"
    if parse is _parse_float:
        return "DOUBLE"
    return "LIST" if parse is _parse_list else "STRING"


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", text)
        if match is None:
            raise ConfigError(f"listener {text!r} is not of the form NAME://host:port")
        name, host, port = match.groups()
        return cls(name.upper(), host.strip("[]"), int(port))


@dataclass(frozen=True)
class BrokerConfig:
    """The configuration in effect. `values` holds every property kbroker reads: server.properties and
    `--override` (static), overridden by the dynamic cluster defaults, then by this broker's own dynamic
    configs (Kafka's precedence). The layers stay apart for DescribeConfigs' sources and synonyms."""

    values: Mapping[str, object] = field(default_factory=dict)
    # the keys given in server.properties or as overrides (DescribeConfigs reports these as
    # STATIC_BROKER_CONFIG, the rest as DEFAULT_CONFIG)
    explicit: frozenset[str] = frozenset()
    raw: Mapping[str, str] = field(default_factory=dict)  # every static key as given, kbroker's or not
    dynamic_default: Mapping[str, str] = field(default_factory=dict)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)   # DYNAMIC_BROKER_CONFIG

    def with_dynamic(self, cluster_default: Mapping[str, str], this_broker: Mapping[str, str]) -> BrokerConfig:
        """This static config under the given dynamic layers (raises ConfigError as `build` does)."""
        merged = {**self.raw, **cluster_default, **this_broker}
        effective = build(merged, warn_unknown=False)
        return BrokerConfig(effective.values, self.explicit, self.raw, dict(cluster_default), dict(this_broker))

    def __getitem__(self, name: str) -> object:
        return self.values[name]

    @property
    def cluster_mode(self) -> bool:
        """True with zookeeper.connect: a broker of a ZooKeeper-mode cluster; else the single node."""
        return bool(self.values["zookeeper.connect"])

    @property
    def broker_id(self) -> int:
        """node.id, else broker.id. Left at -1, a single node is broker 0, and a cluster broker gets -1: its
        id is still to be generated from ZooKeeper (reserved.broker.max.id + /brokers/seqid), as Kafka does."""
        node_id = self.values["node.id"]
        if node_id is not None:
            return int(node_id)  # type: ignore[call-overload]
        broker_id = int(self.values["broker.id"])  # type: ignore[call-overload]
        return broker_id if broker_id >= 0 or self.cluster_mode else 0

    @property
    def inter_broker_listener(self) -> str:
        """The listener brokers talk to each other on: inter.broker.listener.name, else PLAINTEXT (Kafka's
        security.inter.broker.protocol default)."""
        return str(self.values["inter.broker.listener.name"] or "PLAINTEXT").upper()

    @property
    def listeners(self) -> list[Listener]:
        return [Listener.parse(item) for item in self.values["listeners"]]  # type: ignore[union-attr]

    @property
    def advertised_listeners(self) -> list[Listener]:
        advertised = self.values["advertised.listeners"]
        if not advertised:
            return self.listeners
        return [Listener.parse(item) for item in advertised]  # type: ignore[union-attr]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(str(d)) for d in dirs]  # type: ignore[union-attr]

    @property
    def retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms, then .minutes, then .hours; any negative value is -1 (no limit)."""
        if self.values["log.retention.ms"] is not None:
            millis = int(self.values["log.retention.ms"])  # type: ignore[arg-type]
        elif self.values["log.retention.minutes"] is not None:
            millis = int(self.values["log.retention.minutes"]) * 60_000  # type: ignore[arg-type]
        else:
            millis = int(self.values["log.retention.hours"]) * _HOUR_MS  # type: ignore[arg-type]
        return max(millis, -1)

    @property
    def roll_ms(self) -> int:
        if self.values["log.roll.ms"] is not None:
            return int(self.values["log.roll.ms"])  # type: ignore[arg-type]
        return int(self.values["log.roll.hours"]) * _HOUR_MS  # type: ignore[arg-type]


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties, the subset Kafka files use: `key=value` or `key: value`, # and ! comments,
    backslash line continuations."""
    entries: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = _PROPERTY_LINE.match(logical)
        if match:
            entries[match.group(1)] = match.group(2).strip()
        logical = ""
    return entries


ENV_PREFIX = "KBROKER_"


def env_var_property(variable: str) -> str | None:
    """The property a `KBROKER_*` variable names (docs/deploy.md): drop the prefix, lower-case, then `___` -> `-`,
    `__` -> `_`, `_` -> `.`; so KBROKER_LOG_DIRS is log.dirs and KBROKER_NUM_IO__THREADS would be num.io_threads.
    None for any other variable."""
    if not variable.startswith(ENV_PREFIX) or len(variable) == len(ENV_PREFIX):
        return None
    words = variable[len(ENV_PREFIX):].lower()
    return words.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")


def environment_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """Properties set through `KBROKER_*` variables. Only names of properties kbroker knows are taken, so the
    project's other variables (KBROKER_LOG_FORMAT, KBROKER_UVLOOP, ...) never turn into stray settings."""
    known = PROPERTIES.keys() | KBROKER_PROPERTIES.keys()
    found = {}
    for variable, value in environ.items():
        name = env_var_property(variable)
        if name in known:
            found[name] = value.strip()
    return found


def load(path: Path | None = None, overrides: Iterable[str] = (),
         environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """Read a properties file (optional), then `KBROKER_*` environment variables, then `key=value` overrides, as
    `kafka-server-start.sh server.properties --override key=value` does; later sources win."""
    raw: dict[str, str] = {}
    if path is not None:
        raw.update(parse_properties(path.read_text(encoding="utf-8")))
    raw.update(environment_overrides(os.environ if environ is None else environ))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value")
        raw[key.strip()] = value.strip()
    return build(raw)


# (name, relation, other): Kafka's GroupCoordinatorConfig refuses to start when one does not hold.
_BOUNDS = (
    ("group.consumer.heartbeat.interval.ms", ">=", "group.consumer.min.heartbeat.interval.ms"),
    ("group.consumer.heartbeat.interval.ms", "<=", "group.consumer.max.heartbeat.interval.ms"),
    ("group.consumer.session.timeout.ms", ">=", "group.consumer.min.session.timeout.ms"),
    ("group.consumer.session.timeout.ms", "<=", "group.consumer.max.session.timeout.ms"),
    ("group.consumer.heartbeat.interval.ms", "<", "group.consumer.session.timeout.ms"),
)
_RELATIONS = {">=": ("greater than or equal to", int.__ge__), "<=": ("less than or equal to", int.__le__),
              "<": ("less than", int.__lt__)}


def _check_bounds(values: Mapping[str, object]) -> None:
    for name, relation, other in _BOUNDS:
        words, holds = _RELATIONS[relation]
        if not holds(values[name], values[other]):
            raise ConfigError(f"{name} must be {words} {other}")
    _check_replication(values)


def _check_replication(values: Mapping[str, object]) -> None:
    """What Kafka's KafkaConfig requires of the replica fetcher and, in ZooKeeper mode, of broker.id."""
    wait = int(values["replica.fetch.wait.max.ms"])  # type: ignore[call-overload]
    if wait > int(values["replica.socket.timeout.ms"]):  # type: ignore[call-overload]
        raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to "
                          "prevent unnecessary socket timeouts")
    if wait > int(values["replica.lag.time.max.ms"]):  # type: ignore[call-overload]
        raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms"
                          " to prevent frequent changes in ISR")
    if not values["zookeeper.connect"]:
        return
    broker_id = int(values["broker.id"])  # type: ignore[call-overload]
    if not values["broker.id.generation.enable"]:
        if broker_id < 0:
            raise ConfigError("broker.id must be greater than or equal to 0")
    elif broker_id > int(values["reserved.broker.max.id"]):  # type: ignore[call-overload]
        raise ConfigError("broker.id must be greater than or equal to -1 and not greater than reserved.broker.max.id")


def build(raw: Mapping[str, str], warn_unknown: bool = True) -> BrokerConfig:
    values = {name: prop.default for name, prop in (*PROPERTIES.items(), *KBROKER_PROPERTIES.items())}
    for key, text in raw.items():
        prop = PROPERTIES.get(key) or KBROKER_PROPERTIES.get(key)
        if prop is None:
            if warn_unknown:
                log.warning("ignoring unknown configuration %s", key)
            continue
        try:
            value = prop.parse(text)
        except ValueError as error:
            raise ConfigError(f"invalid value {text!r} for configuration {key}: {error}") from None
        if not prop.check(value):
            raise ConfigError(f"invalid value {text!r} for configuration {key}: must be {prop.expectation}")
        values[key] = value
    _check_bounds(values)
    config = BrokerConfig(values, frozenset(key for key in raw if key in PROPERTIES), dict(raw))
    config.listeners  # noqa: B018 - validate listener syntax now rather than at bind time
    advertised = dict.fromkeys(listener.name for listener in config.advertised_listeners)  # Kafka's order
    if config.cluster_mode and config.inter_broker_listener not in advertised:
        raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. The "
                          f"valid options based on currently configured listeners are {','.join(advertised)}")
    return config
