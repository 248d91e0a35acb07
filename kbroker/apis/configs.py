"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topics and the broker.

Topic configs are the ones in kbroker.topic_configs; an unset one takes its value from a broker
property, and DescribeConfigs reports where each value comes from and its synonyms in the order
Kafka's ConfigHelper lists them: the topic override, then the broker property set dynamically for
this broker (DYNAMIC_BROKER_CONFIG), as the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG), in
server.properties (STATIC_BROKER_CONFIG), then its default (DEFAULT_CONFIG).

A BROKER resource is this broker (its id) or the cluster default (the empty name). The configs Kafka
lists as dynamic can be altered on it (kbroker.dynamic_config: Kafka's checks and messages, applied at
once, kept across restarts); the others are read-only. Other resource types (BROKER_LOGGER,
CLIENT_METRICS, GROUP) get INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from kbroker.apis.registry import handles
from kbroker.broker import Broker, TopicError, topic_name_problem
from kbroker.config import PROPERTIES, BrokerConfig
from kbroker.coordinator.hashing import java_string_hash
from kbroker.dynamic_config import (
    DEFAULT_ENTITY,
    SPECS,
    DynamicConfigError,
    append_or_subtract,
    base_name,
    config_kind,
    current_value,
    default_text,
    is_dynamic,
    is_sensitive,
    kafka_text,
    validate_configs,
)
from kbroker.log.config import LONG_MAX, LogConfig
from kbroker.topic_configs import TOPIC_CONFIGS, TopicConfig, validate_topic_configs
from wire import messages
from wire.errors import ErrorCode

TOPIC, BROKER = 2, 4
RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
log = logging.getLogger(__name__)


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigType ids (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(IntEnum):
    """IncrementalAlterConfigs' config_operation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigRequestError(Exception):
    """One resource's failure: Kafka's error code and message for it."""

    def __init__(self, error_code: int, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass
class Entry:
    """One described config, before it is shaped for the response version."""

    name: str
    value: str | None
    source: int
    read_only: bool
    config_type: int
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)
    doc: str | None = None
    sensitive: bool = False


# Broker properties that are one setting in several units, in Kafka's order
# (DynamicBrokerConfig.brokerConfigSynonyms): the finer unit wins.
_UNIT_SYNONYMS: dict[str, tuple[str, ...]] = {}
for _group in (("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
               ("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours")):
    _UNIT_SYNONYMS.update(dict.fromkeys(_group, _group))


def as_text(value: object) -> str | None:
    """A config value as Kafka prints it (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _synonym_names(name: str) -> tuple[str, ...]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the unit variants, or a listener config's base."""
    if base_name(name) != name:
        return (name, base_name(name))
    return _UNIT_SYNONYMS.get(name, (name,))


def broker_synonyms(config: BrokerConfig, name: str) -> list[tuple[str, str | None, int]]:
    """Where broker config `name` gets its value, as Kafka's ConfigHelper.configSynonyms lists it:
    each synonym set dynamically for this broker, then as the cluster default, then in
    server.properties, then every one with a default; the list then starts at the first entry named
    `name` (so log.retention.ms, with no default of its own, lists nothing unless it is set itself,
    exactly as Kafka reports it). A sensitive config's values are hidden."""
    names = _synonym_names(name)
    hidden = is_sensitive(name)
    layers = ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
              (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
              (config.raw, ConfigSource.STATIC_BROKER_CONFIG))
    found = [(n, None if hidden else layer[n], int(source)) for layer, source in layers for n in names if n in layer]
    found += [(n, None if hidden else default_text(n), int(ConfigSource.DEFAULT_CONFIG))
              for n in names if default_text(n) is not None]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def topic_default(broker: Broker, defaults: LogConfig, config: TopicConfig) -> str | None:
    """The value a topic without an override gets, from the broker's properties."""
    if config.log_field is not None:
        value = getattr(defaults, config.log_field)
        if value is None and config.log_field == "flush_interval_ms":
            value = LONG_MAX  # Kafka's "never"
        return as_text(value)
    if config.broker_synonym in broker.config.values:
        return as_text(broker.config.values[config.broker_synonym])
    value = current_value(broker.config, config.broker_synonym) if config.broker_synonym else None
    return config.default if value is None else value


def java_hash_map_order(names: Iterable[str]) -> list[str]:
    """The order a java.util.HashMap filled with `names` iterates them: by bucket (the hash's high half
    folded into its low, masked by a table just large enough for its 0.75 load factor), ties as inserted."""
    listed = list(names)
    capacity = 16
    while len(listed) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(listed, key=bucket)


# Kafka 4 describes a topic's configs in the iteration order of its LogConfig values (a HashMap filled in
# the order LogConfig defines them, which TOPIC_CONFIGS keeps where two share a bucket)
TOPIC_DESCRIBE_ORDER = tuple(java_hash_map_order(TOPIC_CONFIGS))


def topic_entries(broker: Broker, overrides: Mapping[str, str | None]) -> list[Entry]:
    """Every topic config of a topic with `overrides`, its value and where that comes from, in
    TOPIC_DESCRIBE_ORDER."""
    defaults = broker.default_log_config()
    entries = []
    for config in map(TOPIC_CONFIGS.__getitem__, TOPIC_DESCRIBE_ORDER):
        synonyms = broker_synonyms(broker.config, config.broker_synonym) if config.broker_synonym else []
        if config.name in overrides:
            value = overrides[config.name]
            synonyms.insert(0, (config.name, value, int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
        else:
            value = topic_default(broker, defaults, config)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(Entry(config.name, value, source, False, ConfigType[config.config_type], synonyms,
                             config.doc or None))
    return entries


# --- where topic overrides and dynamic broker configs live ---------------------------------------


class Overrides:
    """Topic overrides and dynamic broker configs: the broker's own on a single node. A cluster keeps them in
    ZooKeeper (/config/topics/<t>, /config/brokers/<id> and /config/brokers/<default>, as Kafka 3.9): `load`
    reads the request's entities before it is handled, `save` writes the changed ones after, each with a
    /config/changes notification that the brokers concerned apply (this one too): a topic's every broker hosting it,
    a broker id that broker, the default every broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.member = getattr(broker, "cluster", None)
        self._read: dict[str, dict[str, str] | None] = {}
        self._brokers: dict[str, dict[str, str]] = {}  # broker entity -> its configs in ZooKeeper
        self._changed: dict[tuple[int, str], dict[str, str]] = {}  # (resource type, name) -> the new configs

    async def load(self, resources: Iterable) -> None:
        if self.member is None:
            return
        for resource in resources:
            name = resource.resource_name
            if resource.resource_type == TOPIC and name not in self._read:
                known = not topic_name_problem(name) and self.member.metadata.contains(name)
                self._read[name] = await asyncio.to_thread(self.member.zk.entity_config, "topics", name) \
                    if known else None
            elif resource.resource_type == BROKER:
                entity = DEFAULT_ENTITY if not name else str(self.broker.node_id)
                if entity not in self._brokers:
                    self._brokers[entity] = await asyncio.to_thread(self.member.zk.entity_config, "brokers", entity)

    def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of broker `entity` (its id, or DEFAULT_ENTITY) a change starts from: in a cluster as
        ZooKeeper has them (Kafka's fetchEntityConfig: a change made meanwhile through another broker, or not yet
        applied here, is kept), else as in effect."""
        if self.member is not None:
            return dict(self._brokers.get(entity, {}))
        config = self.broker.config
        return dict(config.dynamic_default if entity == DEFAULT_ENTITY else config.dynamic_broker)

    def get(self, name: str) -> dict[str, str] | None:
        """The topic's overrides; None when there is no such topic."""
        if self.member is not None:
            return self._read.get(name)
        topic = self.broker.topics.get(name)
        return None if topic is None else dict(topic.configs)

    def put(self, name: str, configs: dict[str, str]) -> None:
        if self.member is None:
            self.broker.set_topic_configs(name, configs)
        else:
            self._changed[(TOPIC, name)] = configs

    def put_broker(self, entity: str, configs: dict[str, str]) -> None:
        """A cluster's dynamic configs of broker `entity` (an id, or DEFAULT_ENTITY), written by `save`."""
        self._changed[(BROKER, entity)] = configs

    async def save(self) -> set[tuple[int, str]]:
        """Write the changed entities to ZooKeeper; those whose write failed. The brokers concerned, this one too,
        apply a change from its notification, in the order ZooKeeper gave the notifications."""
        failed = set()
        for (resource_type, name), configs in self._changed.items():
            entity_type = "topics" if resource_type == TOPIC else "brokers"
            try:
                await asyncio.to_thread(self.member.zk.change_entity_config, entity_type, name, configs)
            except Exception:
                log.exception("cannot write the configs of %s %s to ZooKeeper", entity_type, name)
                failed.add((resource_type, name))
        return failed


# --- DescribeConfigs ---------------------------------------------------------------------


def _describe_topic(broker: Broker, overrides: Overrides, name: str) -> list[Entry]:
    problem = topic_name_problem(name)
    if problem:
        raise ConfigRequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    configs = overrides.get(name)
    if configs is None:
        raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)  # Kafka sends no message
    return topic_entries(broker, configs)


def parse_node_id(name: str, what: str = "Broker id") -> int:
    """A resource name as Java's Integer.parseInt reads it, or Kafka's INVALID_REQUEST."""
    if not _JAVA_INT.fullmatch(name) or not -(2**31) <= int(name) < 2**31:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}")
    return int(name)


def _broker_value(config: BrokerConfig, name: str) -> str | None:
    """A broker config's value in effect, as Kafka prints the parsed value."""
    if is_sensitive(name):
        return None
    if name in config.values:
        return kafka_text(config.values[name])
    text = current_value(config, name)
    kind = config_kind(name)
    if text is None or kind in ("STRING", "PASSWORD", "CLASS"):
        return text
    return kafka_text([part.strip() for part in text.split(",")] if kind == "LIST" else _typed(kind, text))


def _typed(kind: str | None, text: str) -> object:
    if kind == "BOOLEAN":
        return text.strip().lower() == "true"
    return float(text) if kind == "DOUBLE" else int(text)


def _broker_entry(config: BrokerConfig, name: str, synonyms: list[tuple[str, str | None, int]],
                  value: str | None) -> Entry:
    kind = config_kind(name)
    source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
    return Entry(name, None if is_sensitive(name) else value, source, not is_dynamic(name),
                 ConfigType[kind] if kind else ConfigType.UNKNOWN, synonyms, sensitive=is_sensitive(name))


def _describe_broker(broker: Broker, name: str) -> list[Entry]:
    """This broker: every config kbroker reads and every dynamic one, in effect; the cluster default
    (empty name): only what is set there, with only that level as its synonym."""
    config = broker.config
    if not name:
        return [_broker_entry(config, n, [s for s in broker_synonyms(config, n)
                                          if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG], v)
                for n, v in config.dynamic_default.items()]
    if parse_node_id(name) != broker.node_id:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id} "
                                                            f"or empty string, but received {name}")
    names = dict.fromkeys([*PROPERTIES, *SPECS, *config.dynamic_default, *config.dynamic_broker])
    return [_broker_entry(config, n, broker_synonyms(config, n), _broker_value(config, n)) for n in names]


def _describe(broker: Broker, overrides: Overrides, resource_type: int, name: str) -> list[Entry]:
    if resource_type == TOPIC:
        return _describe_topic(broker, overrides, name)
    if resource_type == BROKER:
        return _describe_broker(broker, name)
    raise ConfigRequestError(ErrorCode.INVALID_REQUEST,
                             f"Unsupported resource type: {RESOURCE_TYPES.get(resource_type, 'UNKNOWN')}")


def _shape(entry: Entry, version: int, include_synonyms: bool, include_documentation: bool):
    """The entry as the response version carries it (config_type and documentation from v3)."""
    R = messages.DescribeConfigsResponse
    result = R.DescribeConfigsResourceResult(name=entry.name, value=entry.value, read_only=entry.read_only,
                                             config_source=int(entry.source), is_sensitive=entry.sensitive)
    if include_synonyms:
        result.synonyms = [R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in entry.synonyms]
    if version >= 3:
        result.config_type = int(entry.config_type)
        result.documentation = entry.doc if include_documentation else None
    return result


@handles(32)
async def describe_configs(broker: Broker, header, request):
    R = messages.DescribeConfigsResponse
    version = header.request_api_version
    overrides = Overrides(broker)
    await overrides.load(request.resources)
    results = []
    for resource in request.resources:
        result = R.DescribeConfigsResult(error_code=0, error_message=None, resource_type=resource.resource_type,
                                         resource_name=resource.resource_name, configs=[])
        try:
            entries = _describe(broker, overrides, resource.resource_type, resource.resource_name)
        except ConfigRequestError as error:
            result.error_code, result.error_message = error.error_code, error.message
            results.append(result)
            continue
        wanted = resource.configuration_keys
        result.configs = [_shape(e, version, request.include_synonyms, request.include_documentation)
                          for e in entries if not wanted or e.name in wanted]
        results.append(result)
    return R(throttle_time_ms=0, results=results)


# --- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------


def _check_request_shape(resource, null_allowed: Callable[[object], bool]) -> None:
    """Kafka's ConfigAdminManager.preprocess checks, made before anything else."""
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs if c.value is None and not null_allowed(c)]
    if nulls:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def _alter_broker(broker: Broker, overrides: Overrides, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                  validate_only: bool) -> None:
    """Compute the resource's new dynamic config set (this broker's, or the cluster default's for the
    empty name), check it as Kafka does and, unless validate_only, put it in effect and keep it (in a
    cluster: write it to ZooKeeper, and it takes effect from the change notification)."""
    if name:
        node_id = parse_node_id(name, "Node id")
        if node_id != broker.node_id:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST,
                                     f"Unexpected broker id, expected {broker.node_id}, but received {name}")
    entity = str(broker.node_id) if name else DEFAULT_ENTITY
    try:
        new = change(overrides.broker_configs(entity))
        validate_configs(new, per_broker=bool(name))
        if overrides.member is None:
            broker.change_dynamic_configs(entity, new, validate_only)
            return
        broker.check_dynamic_configs(entity, new)
    except DynamicConfigError as error:
        raise ConfigRequestError(error.error_code, error.message) from None
    if not validate_only:
        _check_storable_in_zookeeper(name, new)
        overrides.put_broker(entity, new)


def _check_storable_in_zookeeper(name: str, configs: dict[str, str]) -> None:
    """Kafka 3.9 writes password configs to ZooKeeper only encrypted with password.encoder.secret, which kbroker
    does not implement: refused as Kafka refuses them without that secret (DynamicBrokerConfig.toPersistentProps)."""
    if any(config_kind(n) == "PASSWORD" for n in configs):  # only per broker: validate_configs refused the default
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Invalid config value for resource ConfigResource("
                                                           f"type=BROKER, name='{name}'): Password encoder secret "
                                                           "not configured")


def _alter_topic(overrides: Overrides, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                 validate_only: bool) -> None:
    """Compute, validate (as Kafka's controller does: configs first, then the topic's existence)
    and, unless validate_only, store the topic's new override set."""
    problem = topic_name_problem(name)
    if problem:
        raise ConfigRequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    current = overrides.get(name)
    if current is None and overrides.member is not None:  # ZooKeeper mode checks the topic first (validateTopicConfig)
        raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
    new = change(dict(current) if current is not None else {})
    try:
        validate_topic_configs(new)
    except TopicError as error:
        raise ConfigRequestError(error.error_code, str(error)) from None
    if current is None:
        raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    if not validate_only:
        overrides.put(name, new)


def _duplicated(resources: Iterable) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    twice: set[tuple[int, str]] = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


async def _alter_all(overrides: Overrides, request, response_class, alter_one: Callable[[object], None]):
    """Run `alter_one` per resource; each resource succeeds or fails on its own, as in Kafka."""
    await overrides.load(request.resources)
    duplicated = _duplicated(request.resources)
    responses = []
    for resource in request.resources:
        error_code, message = ErrorCode.NONE, None
        try:
            if (resource.resource_type, resource.resource_name) in duplicated:
                raise ConfigRequestError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            alter_one(resource)
        except ConfigRequestError as error:
            error_code, message = error.error_code, error.message
        responses.append(response_class.AlterConfigsResourceResponse(
            error_code=error_code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    if overrides.member is not None:
        failed = await overrides.save()
        for response in responses:
            entity = response.resource_name or DEFAULT_ENTITY if response.resource_type == BROKER \
                else response.resource_name
            if (response.resource_type, entity) in failed:
                response.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return response_class(throttle_time_ms=0, responses=responses)


def _unknown_type(resource) -> ConfigRequestError:
    return ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")


@handles(33)
async def alter_configs(broker: Broker, header, request):
    """The legacy API: the given configs replace the resource's whole override set."""
    overrides = Overrides(broker)

    def alter_one(resource) -> None:
        _check_request_shape(resource, lambda config: False)
        replacement = {c.name: c.value for c in resource.configs}
        if resource.resource_type == BROKER:
            _alter_broker(broker, overrides, resource.resource_name, lambda current: replacement,
                          request.validate_only)
        elif resource.resource_type == TOPIC:
            _alter_topic(overrides, resource.resource_name, lambda current: replacement, request.validate_only)
        else:
            raise _unknown_type(resource)

    return await _alter_all(overrides, request, messages.AlterConfigsResponse, alter_one)


def _list_parts(value: str | None) -> list[str]:
    return [part for part in (value or "").split(",") if part]


def _apply_ops(broker: Broker, current: dict[str, str], ops) -> dict[str, str]:
    """SET/DELETE/APPEND/SUBTRACT applied in order, as Kafka's ConfigurationControlManager does.
    APPEND/SUBTRACT start from the current value, or the topic's effective default when unset
    (Kafka starts from the topic config's static default; kbroker's honours log.cleanup.policy)."""
    new = dict(current)
    defaults = broker.default_log_config()
    for op in ops:
        if op.config_operation == OpType.SET:
            new[op.name] = op.value
        elif op.config_operation == OpType.DELETE:
            new.pop(op.name, None)
        else:
            kind = OpType(op.config_operation).name
            known = TOPIC_CONFIGS.get(op.name)
            if known is None or known.config_type != "LIST":
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG,
                                         f"Can't {kind} to key {op.name} because its type is not LIST.")
            parts = _list_parts(new[op.name] if op.name in new else topic_default(broker, defaults, known))
            for item in op.value.split(","):
                if op.config_operation == OpType.APPEND and item not in parts:
                    parts.append(item)
                elif op.config_operation == OpType.SUBTRACT and item in parts:
                    parts.remove(item)
            new[op.name] = ",".join(parts)
    return new


def _apply_broker_ops(config: BrokerConfig, current: dict[str, str], ops) -> dict[str, str]:
    """SET/DELETE/APPEND/SUBTRACT on a broker resource's dynamic configs, in order."""
    new = dict(current)
    for op in ops:
        if op.config_operation == OpType.SET:
            new[op.name] = op.value
        elif op.config_operation == OpType.DELETE:
            new.pop(op.name, None)
        else:
            new[op.name] = append_or_subtract(config, new, op.name, op.value, op.config_operation == OpType.APPEND)
    return new


@handles(44)
async def incremental_alter_configs(broker: Broker, header, request):
    """Per-key operations on the resource's override set; keys not named stay as they are."""
    overrides = Overrides(broker)

    def alter_one(resource) -> None:
        _check_request_shape(resource, lambda config: config.config_operation == OpType.DELETE)
        for op in resource.configs:
            if op.config_operation not in set(OpType):
                raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.config_operation}")
        if resource.resource_type == BROKER:
            _alter_broker(broker, overrides, resource.resource_name,
                          lambda current: _apply_broker_ops(broker.config, current, resource.configs),
                          request.validate_only)
        elif resource.resource_type == TOPIC:
            _alter_topic(overrides, resource.resource_name,
                         lambda current: _apply_ops(broker, current, resource.configs), request.validate_only)
        else:
            raise _unknown_type(resource)

    return await _alter_all(overrides, request, messages.IncrementalAlterConfigsResponse, alter_one)
