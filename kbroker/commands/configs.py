"""`kbroker configs`: describe and alter topic and broker configs with kafka-configs.sh's flags (--entity-type,
--entity-name, --describe, --alter, --add-config, --delete-config), as incremental alters."""

from __future__ import annotations

import argparse

from kbroker.commands import _common

ENTITY_TYPES = {"topics": "TOPIC", "brokers": "BROKER"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("configs", help="describe or alter topic and broker configs")
    _common.add_connection_flags(parser)
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), required=True)
    parser.add_argument("--entity-name", required=True, help="a topic name or a broker id")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    parser.add_argument("--add-config", default="", metavar="K1=V1,K2=V2", help="alter: set these")
    parser.add_argument("--delete-config", default="", metavar="K1,K2", help="alter: back to their defaults")
    parser.add_argument("--all", action="store_true", help="describe: defaults too, not only overrides")
    parser.set_defaults(run=_common.guarded(run))


def _resource(args: argparse.Namespace):
    from confluent_kafka.admin import ConfigResource, ResourceType

    return ConfigResource(getattr(ResourceType, ENTITY_TYPES[args.entity_type]), args.entity_name)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_common.client_config(args))
    return _alter(admin, args) if args.alter else _describe(admin, args)


def _describe(admin, args: argparse.Namespace) -> int:
    entries = _common.wait_all(admin.describe_configs([_resource(args)]))
    configs = {name: entry for result in entries.values() for name, entry in result.items()
               if args.all or not entry.is_default}
    document = {name: {"value": None if entry.is_sensitive else entry.value, "source": entry.source and
                       _source_name(entry.source), "read_only": entry.is_read_only}
                for name, entry in sorted(configs.items())}
    if args.json:
        _common.print_json(document)
    else:
        _common.print_table(f"Configs of {args.entity_type} {args.entity_name}", ["name", "value", "source"],
                            ([name, c["value"], c["source"]] for name, c in document.items()))
    return 0


def _source_name(source: int) -> str:
    from confluent_kafka.admin import ConfigSource

    return ConfigSource(source).name


def _alter(admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    to_set = _common.parse_properties(filter(None, args.add_config.split(",")))
    to_delete = [name.strip() for name in args.delete_config.split(",") if name.strip()]
    if not to_set and not to_delete:
        raise _common.UsageError("--alter needs --add-config or --delete-config")
    resource = _resource(args)
    for name, value in to_set.items():
        resource.add_incremental_config(ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET))
    for name in to_delete:
        resource.add_incremental_config(ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE))
    _common.wait_all(admin.incremental_alter_configs([resource]))
    if args.json:
        _common.print_json({"set": to_set, "deleted": to_delete})
    else:
        print(f"Completed updating config for {args.entity_type} {args.entity_name}.")
    return 0
