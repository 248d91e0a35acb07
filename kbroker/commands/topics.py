"""`kbroker topics`: list, describe, create, delete and alter topics as kafka-topics.sh does (AdminClient)."""

from __future__ import annotations

import argparse

from kbroker.commands import _common

ACTIONS = ("list", "describe", "create", "delete", "alter")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="list, describe, create, delete or alter topics")
    parser.add_argument("action", choices=ACTIONS)
    _common.add_connection_flags(parser)
    parser.add_argument("--topic", action="append", default=[], help="a topic name (repeatable)")
    parser.add_argument("--partitions", type=int, help="partitions (create; alter raises the count)")
    parser.add_argument("--replication-factor", type=int, default=-1, help="create: default the broker's")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="create: topic config")
    parser.set_defaults(run=_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_common.client_config(args))
    if args.action in ("create", "delete", "alter") and not args.topic:
        raise _common.UsageError(f"{args.action} needs --topic")
    return {"list": _list, "describe": _describe, "create": _create, "delete": _delete,
            "alter": _alter}[args.action](admin, args)


def _list(admin, args: argparse.Namespace) -> int:
    names = sorted(admin.list_topics(timeout=30).topics)
    if args.json:
        _common.print_json(names)
    else:
        _common.print_table("Topics", ["topic"], ([name] for name in names))
    return 0


def _describe(admin, args: argparse.Namespace) -> int:
    metadata = admin.list_topics(timeout=30)
    names = args.topic or sorted(metadata.topics)
    described = []
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(topic.error if topic else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        described.append({"topic": name, "partitions": [
            {"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
            for p in sorted(topic.partitions.values(), key=lambda p: p.id)]})
    if args.json:
        _common.print_json(described)
    else:
        _common.print_table("Topics", ["topic", "partition", "leader", "replicas", "isr"],
                            ([t["topic"], p["partition"], p["leader"], p["replicas"], p["isr"]]
                             for t in described for p in t["partitions"]))
    return 0


def _create(admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    configs = _common.parse_properties(args.config)
    new_topics = [NewTopic(name, args.partitions or -1, args.replication_factor, config=configs)
                  for name in args.topic]
    _common.wait_all(admin.create_topics(new_topics))
    return _report(args, "created")


def _delete(admin, args: argparse.Namespace) -> int:
    _common.wait_all(admin.delete_topics(args.topic))
    return _report(args, "deleted")


def _alter(admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions

    if args.partitions is None:
        raise _common.UsageError("alter needs --partitions (topic configs: kbroker configs --alter)")
    _common.wait_all(admin.create_partitions([NewPartitions(name, args.partitions) for name in args.topic]))
    return _report(args, "altered")


def _report(args: argparse.Namespace, outcome: str) -> int:
    if args.json:
        _common.print_json({outcome: args.topic})
    else:
        print(f"{outcome.capitalize()} topic(s) {', '.join(args.topic)}.")
    return 0
