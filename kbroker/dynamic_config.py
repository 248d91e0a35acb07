"""Dynamic broker configs, as Kafka's DynamicBrokerConfig: set by AlterConfigs and IncrementalAlterConfigs
on a BROKER resource, for this broker (its id) or as the cluster-wide default (the empty name).

Which configs may change, their types, bounds and scopes are Kafka's own (kafka_broker_configs, generated
from a running Kafka): a read-only config, a security config without a listener prefix or a per-broker
config on the cluster default is refused with Kafka's INVALID_REQUEST message; a name Kafka does not know
is stored as it is, as Kafka does. Kafka keeps these in ZooKeeper (/config/brokers/<id> and
/config/brokers/<default>) or its metadata log; a single node keeps them in `kbroker-broker-configs.json`
at the root of the first log dir, under the same two keys, replaced atomically on every change.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from kbroker.config import PROPERTIES, BrokerConfig, ConfigError, property_type
from kbroker.kafka_broker_configs import DYNAMIC, READ_ONLY
from kbroker.log.checkpoints import fsync_dir
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
CONFIGS_FILE = "kbroker-broker-configs.json"
DEFAULT_ENTITY = "<default>"  # the cluster default's key, as ZooKeeper's /config/brokers/<default>
_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")
# listener configs that are one setting for the whole cluster even with a listener prefix (Kafka's list)
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate",
                                             "num.network.threads"})
_THREAD_POOLS = ("num.io.threads", "num.network.threads", "num.replica.fetchers",
                 "num.recovery.threads.per.data.dir", "background.threads")
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_INTEGER_RANGES = {"SHORT": 2**15, "INT": 2**31, "LONG": 2**63}
_MIB = 1024 * 1024


class DynamicConfigError(Exception):
    """A change Kafka refuses: its error code and message."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True)
class DynamicSpec:
    """One dynamic config as Kafka defines it (texts as Kafka prints them)."""

    kind: str
    default: str | None
    scope: str  # cluster-wide, per-broker, or listener (settable only under a listener prefix)
    minimum: str | None = None
    maximum: str | None = None
    choices: tuple[str, ...] | None = None


SPECS: dict[str, DynamicSpec] = {name: DynamicSpec(*row) for name, row in DYNAMIC.items()}


# --- what a name is ------------------------------------------------------------------------


def base_name(name: str) -> str:
    """`listener.name.<listener>.<config>` -> `<config>`; any other name as it is."""
    match = _LISTENER_CONFIG.fullmatch(name)
    return match.group(1) if match else name


def is_dynamic(name: str) -> bool:
    """Kafka's read-only flag is the negation: only the configs it lists as dynamic, by their own name."""
    return name in SPECS


def is_read_only(name: str) -> bool:
    """A broker config Kafka knows and cannot change at run time (AlterConfigs refuses it)."""
    return name not in SPECS and (name in READ_ONLY or name in PROPERTIES)


def config_kind(name: str) -> str | None:
    """Kafka's ConfigDef type of a broker config (a listener-prefixed one has its base's); None if unknown."""
    name = base_name(name)
    if name in SPECS:
        return SPECS[name].kind
    return property_type(name) if name in PROPERTIES else None


def is_sensitive(name: str) -> bool:
    """Kafka hides passwords, and the value of any name it cannot type."""
    return config_kind(name) in (None, "PASSWORD")


def default_text(name: str) -> str | None:
    """The value a broker config has when nothing sets it: kbroker's default for what it reads, else Kafka's."""
    if name in PROPERTIES:
        return kafka_text(PROPERTIES[name].default)
    spec = SPECS.get(name)
    return spec.default if spec else None


# --- values as Kafka's ConfigDef parses and prints them --------------------------------------------


def java_double(value: float) -> str:
    """Java's Double.toString: plain between 10^-3 and 10^7, else d.ddddE<n> (shortest digits, as repr)."""
    if math.isinf(value) or math.isnan(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    exact = Decimal(repr(float(value)))
    digits = "".join(str(d) for d in exact.as_tuple().digits).rstrip("0") or "0"
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exact.adjusted()}"


def kafka_text(value: object) -> str | None:
    """A parsed value as Kafka prints it (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _parse(kind: str, text: str) -> object:
    """ConfigDef.parseType: the value, or ValueError with Kafka's reason."""
    trimmed = text.strip()
    if kind == "BOOLEAN":
        if trimmed.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return trimmed.lower() == "true"
    if kind in _INTEGER_RANGES:
        limit = _INTEGER_RANGES[kind]
        if not _JAVA_INTEGER.fullmatch(trimmed) or not -limit <= int(trimmed) < limit:
            raise ValueError(f"Not a number of type {kind}")
        return int(trimmed)
    if kind == "DOUBLE":
        try:
            if "_" in trimmed:
                raise ValueError
            return float(trimmed)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if kind == "LIST":
        return [item.strip() for item in trimmed.split(",")] if trimmed else []
    return trimmed


def per_ip_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `host:count,...` (Kafka's format); ValueError when malformed."""
    overrides = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not _JAVA_INTEGER.fullmatch(count.strip()):
            raise ValueError(f"Error parsing configuration property 'max.connections.per.ip.overrides': {entry}")
        overrides[host.strip()] = int(count)
    return overrides


def _bound_problem(spec: DynamicSpec, value: object) -> str | None:
    if spec.minimum is not None and value < float(spec.minimum):  # type: ignore[operator]
        return f"Value must be at least {spec.minimum}"
    if spec.maximum is not None and value > float(spec.maximum):  # type: ignore[operator]
        return f"Value must be no more than {spec.maximum}"
    return None


def check_value(name: str, text: str) -> None:
    """Kafka's type and validator check of one value (a listener-prefixed name is checked as its base)."""
    name = base_name(name)
    kind = config_kind(name)
    if kind is None:
        return
    try:
        value = _parse(kind, text)
    except ValueError as error:
        raise _invalid(text, name, str(error)) from None
    if name == "max.connections.per.ip.overrides":
        try:
            per_ip_overrides(text)
        except ValueError as error:
            raise DynamicConfigError(ErrorCode.INVALID_REQUEST, str(error)) from None
    spec = SPECS.get(name)
    if spec is None:
        return
    if spec.choices is not None:
        items = value if isinstance(value, list) else [value]
        if any(item not in spec.choices for item in items):
            raise _invalid(text.strip(), name, f"String must be one of: {', '.join(spec.choices)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        problem = _bound_problem(spec, value)
        if problem:
            raise _invalid(kafka_text(value), name, problem)


def _invalid(shown: str | None, name: str, why: str) -> DynamicConfigError:
    return DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Invalid value {shown} for configuration {name}: {why}")


# --- a request's checks, in Kafka's order ----------------------------------------------------------


def _refuse_names(names: list[str], why: str) -> None:
    if names:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"{why}: [{', '.join(names)}]")


def _per_broker_only(name: str) -> bool:
    spec = SPECS.get(name)
    if spec is not None:
        return spec.scope in ("per-broker", "listener")
    base = base_name(name)
    return base != name and base not in _CLUSTER_LEVEL_LISTENER_CONFIGS


def validate_configs(configs: Mapping[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs: read-only names, security configs without a listener
    prefix, every value's type and bounds, then (on the cluster default) configs that are per broker."""
    _refuse_names([n for n in configs if is_read_only(n)], "Cannot update these configs dynamically")
    _refuse_names([n for n in configs if n in SPECS and SPECS[n].scope == "listener"],
                  "These security configs can be dynamically updated only per-listener using the listener prefix")
    for name, text in configs.items():
        check_value(name, text)
    if not per_broker:
        _refuse_names([n for n in configs if _per_broker_only(n)],
                      "Cannot update these configs at default cluster level, broker id must be specified")


def current_value(config: BrokerConfig, name: str) -> str | None:
    """A config's value in effect: this broker's dynamic value, the cluster default, the static one, the default."""
    for layer in (config.dynamic_broker, config.dynamic_default, config.raw):
        if name in layer:
            return layer[name]
    return default_text(name)


def _number(config: BrokerConfig, name: str) -> float:
    text = current_value(config, name)
    return float(text) if text is not None else 0


def _thread_pool_problem(old: BrokerConfig, new: BrokerConfig) -> str | None:
    """Kafka resizes its thread pools at most to double or half the current size."""
    for name in _THREAD_POOLS:
        before, after = int(_number(old, name)), int(_number(new, name))
        if after == before:
            continue
        prefix = f"Dynamic thread count update validation failed for {name}={after}"
        if after <= 0:
            return f"{prefix}, value should be at least 1"
        if after < before // 2:
            return f"{prefix}, value should be at least half the current value {before}"
        if after > before * 2:
            return f"{prefix}, value should not be greater than double the current value {before}"
    return None


def _cleaner_threads_problem(old: BrokerConfig, new: BrokerConfig) -> str | None:
    """Kafka's LogCleaner restarts with at most double or half its threads."""
    before, after = int(old["log.cleaner.threads"]), int(new["log.cleaner.threads"])  # type: ignore[arg-type]
    if after == before:
        return None
    if after < 1:
        return "Log cleaner threads should be at least 1"
    if after < before // 2:
        return f"Log cleaner threads cannot be reduced to less than half the current value {before}"
    if after > before * 2:
        return f"Log cleaner threads cannot be increased to more than double the current value {before}"
    return None


def _check_cleaner_memory(dynamic: Mapping[str, str], new: BrokerConfig) -> None:
    """Kafka's KafkaConfig requirement on the dedupe buffer, when a dynamic value takes part in it (it
    divides by the thread count first, so 0 threads fails as a division by zero)."""
    if not {"log.cleaner.threads", "log.cleaner.dedupe.buffer.size"} & dynamic.keys():
        return
    threads, dedupe = int(new["log.cleaner.threads"]), int(new["log.cleaner.dedupe.buffer.size"])  # type: ignore[arg-type]
    if threads == 0:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, "/ by zero")
    if dedupe // threads < _MIB:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, "requirement failed: log.cleaner.dedupe.buffer.size "
                                                            "must be at least 1MB per cleaner thread.")


def reconfigured(old: BrokerConfig, cluster_default: Mapping[str, str], this_broker: Mapping[str, str],
                 check: Callable[[BrokerConfig], None] = lambda config: None) -> BrokerConfig:
    """The config in effect under new dynamic layers, refused as Kafka's new KafkaConfig and its
    reconfigurables would refuse it (`check` adds the broker's own checks, such as its logs')."""
    try:
        new = old.with_dynamic(cluster_default, this_broker)
    except ConfigError as error:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, str(error)) from None
    _check_cleaner_memory({**cluster_default, **this_broker}, new)
    try:
        check(new)
    except ValueError as error:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, str(error)) from None
    problem = _thread_pool_problem(old, new) or _cleaner_threads_problem(old, new)
    if problem:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST,
                                 f"Invalid value org.apache.kafka.common.config.ConfigException: {problem} "
                                 "for configuration Invalid dynamic configuration")
    return new


# --- incremental operations -------------------------------------------------------------------------


def list_start(config: BrokerConfig, current: Mapping[str, str], name: str) -> list[str]:
    """Where APPEND/SUBTRACT start: the resource's own value, else the static one, else the default
    (Kafka's controller does not start from the cluster default when altering one broker)."""
    if name in current:
        text = current[name]
    else:
        text = config.raw.get(name, default_text(name))
    return [part for part in (text or "").split(",") if part]


def append_or_subtract(config: BrokerConfig, current: Mapping[str, str], name: str, value: str,
                       append: bool) -> str:
    """The new value of list config `name`; Kafka's INVALID_CONFIG for a name that is not a list."""
    kind = config_kind(name) if base_name(name) == name else None
    what = "append" if append else "subtract"
    if kind is None:
        raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
    if kind != "LIST":
        raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Config value {what} is not allowed for config key: {name}")
    parts = list_start(config, current, name)
    for item in value.split(","):
        if append and item not in parts:
            parts.append(item)
        elif not append and item in parts:
            parts.remove(item)
    return ",".join(parts)


# --- where they are kept ------------------------------------------------------------------------------


class DynamicConfigStore:
    """The dynamic configs of every broker id and of the cluster default, in one JSON file."""

    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / CONFIGS_FILE
        self._entities: dict[str, dict[str, str]] = {}
        if self.path.exists():
            state = json.loads(self.path.read_text(encoding="utf-8"))
            self._entities = {entity: dict(configs) for entity, configs in state["configs"].items()}

    def get(self, entity: str) -> dict[str, str]:
        """`entity`: a broker id as text, or DEFAULT_ENTITY."""
        return dict(self._entities.get(entity, {}))

    def put(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace one entity's configs and write the file (an empty set removes the entity)."""
        entities = {**self._entities, entity: dict(configs)}
        if not configs:
            del entities[entity]
        self._write(entities)
        self._entities = entities

    def _write(self, entities: dict[str, dict[str, str]]) -> None:
        temporary = self.path.with_suffix(".tmp")
        # owner-only: SSL and SASL passwords may be among the values, in plain text as in Kafka's metadata log
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)  # a temporary file left by a crash keeps its mode otherwise
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"version": 1, "configs": entities}, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        fsync_dir(self.path.parent)


def usable(configs: Mapping[str, str], per_broker: bool, what: str) -> dict[str, str]:
    """Stored configs the broker can apply at start, each checked alone; Kafka logs and ignores the rest."""
    kept = {}
    for name, value in configs.items():
        try:
            validate_configs({name: value}, per_broker)
        except DynamicConfigError as error:
            log.error("Dynamic %s config %s=%s will be ignored: %s", what, name, value, error.message)
            continue
        kept[name] = value
    return kept
