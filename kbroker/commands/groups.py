"""`kbroker groups`: list, describe (with lag per partition), reset offsets and delete consumer groups, with
kafka-consumer-groups.sh's flags (--to-earliest/--to-latest/--to-offset/--to-datetime, --dry-run/--execute)."""

from __future__ import annotations

import argparse
from datetime import datetime

from kbroker.commands import _common

ACTIONS = ("list", "describe", "reset", "delete")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset or delete consumer groups")
    parser.add_argument("action", choices=ACTIONS)
    _common.add_connection_flags(parser)
    parser.add_argument("--group", action="append", default=[], help="a group id (repeatable)")
    parser.add_argument("--topic", help="reset: the topic whose offsets to move (default: the group's topics)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--to-datetime", metavar="ISO-8601")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="reset: apply (default is a dry run, as Kafka)")
    mode.add_argument("--dry-run", action="store_true", help="reset: only show the new offsets")
    parser.set_defaults(run=_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    if args.action != "list" and not args.group:
        raise _common.UsageError(f"{args.action} needs --group")
    admin = AdminClient(_common.client_config(args))
    return {"list": _list, "describe": _describe, "reset": _reset, "delete": _delete}[args.action](admin, args)


def _list(admin, args: argparse.Namespace) -> int:
    result = admin.list_consumer_groups().result(timeout=30)
    groups = sorted(({"group": g.group_id, "state": g.state.name if g.state else None} for g in result.valid),
                    key=lambda g: g["group"])
    if args.json:
        _common.print_json(groups)
    else:
        _common.print_table("Consumer groups", ["group", "state"], ([g["group"], g["state"]] for g in groups))
    return 0


def _committed(admin, group: str) -> list:
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return [tp for tp in future.result(timeout=30).topic_partitions if tp.offset >= 0]


def _offsets(admin, partitions: list, spec) -> dict[tuple[str, int], int]:
    """Each partition's offset for an OffsetSpec (earliest, latest, a timestamp)."""
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(tp.topic, tp.partition): spec for tp in partitions})
    return {(tp.topic, tp.partition): info.offset for tp, info in _common.wait_all(futures).items()}


def _describe(admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec

    described = []
    descriptions = _common.wait_all(admin.describe_consumer_groups(args.group))
    for group in args.group:
        owners = {(tp.topic, tp.partition): member.client_id
                  for member in descriptions[group].members for tp in member.assignment.topic_partitions}
        committed = _committed(admin, group)
        ends = _offsets(admin, committed, OffsetSpec.latest())
        described.append({"group": group, "state": descriptions[group].state.name, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "current_offset": tp.offset,
             "log_end_offset": ends[(tp.topic, tp.partition)], "lag": ends[(tp.topic, tp.partition)] - tp.offset,
             "client_id": owners.get((tp.topic, tp.partition))}
            for tp in sorted(committed, key=lambda tp: (tp.topic, tp.partition))]})
    if args.json:
        _common.print_json(described)
    else:
        _common.print_table("Consumer groups", ["group", "state", "topic", "partition", "current offset",
                                                "log end offset", "lag", "client id"],
                            ([g["group"], g["state"], p["topic"], p["partition"], p["current_offset"],
                              p["log_end_offset"], p["lag"], p["client_id"]]
                             for g in described for p in g["partitions"]))
    return 0


def _target_partitions(admin, args: argparse.Namespace, group: str) -> list:
    from confluent_kafka import KafkaException, TopicPartition

    if args.topic is None:
        return _committed(admin, group)
    topic = admin.list_topics(args.topic, timeout=30).topics[args.topic]
    if topic.error is not None:
        raise KafkaException(topic.error)
    return [TopicPartition(args.topic, p) for p in sorted(topic.partitions)]


def _new_offsets(admin, args: argparse.Namespace, partitions: list) -> dict[tuple[str, int], int]:
    from confluent_kafka.admin import OffsetSpec

    if args.to_offset is not None:
        return {(tp.topic, tp.partition): args.to_offset for tp in partitions}
    if args.to_earliest:
        return _offsets(admin, partitions, OffsetSpec.earliest())
    if args.to_latest:
        return _offsets(admin, partitions, OffsetSpec.latest())
    try:
        moment = datetime.fromisoformat(args.to_datetime)
    except ValueError as error:
        raise _common.UsageError(f"--to-datetime: {error}") from None
    found = _offsets(admin, partitions, OffsetSpec.for_timestamp(int(moment.timestamp() * 1000)))
    latest = _offsets(admin, partitions, OffsetSpec.latest())
    return {key: offset if offset >= 0 else latest[key] for key, offset in found.items()}  # none after: the end


def _reset(admin, args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime):
        raise _common.UsageError("reset needs one of --to-earliest, --to-latest, --to-offset, --to-datetime")
    rows = []
    for group in args.group:
        offsets = _new_offsets(admin, args, _target_partitions(admin, args, group))
        if args.execute:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
            _common.wait_all(admin.alter_consumer_group_offsets([request]))
        rows += [{"group": group, "topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(offsets.items())]
    if args.json:
        _common.print_json({"executed": args.execute, "offsets": rows})
    else:
        title = "New offsets" if args.execute else "New offsets (dry run: add --execute to apply)"
        _common.print_table(title, ["group", "topic", "partition", "new offset"],
                            ([r["group"], r["topic"], r["partition"], r["new_offset"]] for r in rows))
    return 0


def _delete(admin, args: argparse.Namespace) -> int:
    _common.wait_all(admin.delete_consumer_groups(args.group))
    if args.json:
        _common.print_json({"deleted": args.group})
    else:
        print(f"Deleted group(s) {', '.join(args.group)}.")
    return 0
