"""`kbroker faults add|list|remove|clear|record|refuse`: the fault injection endpoint of a running `kbroker serve`
(started with `--override kbroker.faults.port=PORT`), from a shell or any test harness. docs/testing.md."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("faults", help="inject faults into a running kbroker (kbroker.faults.port)")
    parser.add_argument("--endpoint", default="127.0.0.1:9192", metavar="HOST:PORT",
                        help="the broker's kbroker.faults.port endpoint; default 127.0.0.1:9192")
    verbs = parser.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="add a fault (prints it as JSON, with its id)")
    add.add_argument("--api", help="API name (Produce, Fetch, JoinGroup...) or key; default any API")
    add.add_argument("--error", help="Kafka error name (NOT_LEADER_OR_FOLLOWER) or code")
    add.add_argument("--count", type=int, help="act on the next N matching requests only")
    add.add_argument("--rate", type=float, help="act on this fraction of the matching requests (0..1)")
    add.add_argument("--delay-ms", type=int, help="delay the answer this long")
    add.add_argument("--throttle-ms", type=int, help="answer with this throttle_time_ms")
    add.add_argument("--action", choices=("close_before", "close_after", "hang", "reset"),
                     help="a connection fault instead of (or beside) an error")
    add.add_argument("--topic")
    add.add_argument("--partition", type=int)
    add.add_argument("--client-id")
    add.add_argument("--group")
    verbs.add_parser("list", help="the faults set, with how often each fired")
    remove = verbs.add_parser("remove", help="remove one fault")
    remove.add_argument("id", type=int)
    verbs.add_parser("clear", help="remove every fault")
    record = verbs.add_parser("record", help="record every request and response to a JSON-lines file")
    record.add_argument("path", nargs="?", help="the file (on the broker's machine); none: keep them in memory")
    verbs.add_parser("recorded", help="print what was recorded in memory, one JSON object a line")
    verbs.add_parser("stop-recording", help="stop recording")
    event = verbs.add_parser("event", help="a cluster event: coordinator-unavailable, leadership-moved, "
                             "leader-epoch-bumped, move-leadership (cluster mode: a real move), force-rebalance, "
                             "expire-session, truncate-log (DATA LOSS)")
    event.add_argument("name")
    event.add_argument("arguments", nargs="?", default="{}", help='its arguments as JSON, e.g. \'{"group": "g"}\'')
    refuse = verbs.add_parser("refuse", help="refuse new connections for a while")
    refuse.add_argument("seconds", type=float)
    parser.set_defaults(run=run)


def _fault_spec(args: argparse.Namespace) -> dict:
    names = ("api", "error", "count", "rate", "delay_ms", "throttle_ms", "action", "topic", "partition",
             "client_id", "group")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _request(args: argparse.Namespace) -> tuple[str, str, object]:
    """(method, path, JSON body) for the verb."""
    verb = args.verb
    if verb == "add":
        return "POST", "/faults", _fault_spec(args)
    if verb == "list":
        return "GET", "/faults", None
    if verb == "remove":
        return "DELETE", f"/faults/{args.id}", None
    if verb == "clear":
        return "DELETE", "/faults", None
    if verb == "record":
        return "POST", "/recording", {"path": args.path}
    if verb == "recorded":
        return "GET", "/recording", None
    if verb == "stop-recording":
        return "DELETE", "/recording", None
    if verb == "event":
        return "POST", f"/events/{args.name}", json.loads(args.arguments)
    return "POST", "/refuse-connections", {"seconds": args.seconds}


def call(endpoint: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    """One request to the endpoint: (HTTP status, decoded JSON)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{endpoint}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # a leadership move waits for the controller
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def run(args: argparse.Namespace) -> int:
    try:
        method, path, body = _request(args)
    except json.JSONDecodeError as error:
        print(f"the event's arguments are not JSON: {error}", file=sys.stderr)
        return 2
    try:
        status, answer = call(args.endpoint, method, path, body)
    except OSError as error:
        print(f"cannot reach the fault endpoint at {args.endpoint} (is kbroker.faults.port set?): {error}",
              file=sys.stderr)
        return 2
    if isinstance(answer, list) and args.verb in ("list", "recorded"):
        for item in answer:
            print(json.dumps(item))
    else:
        print(json.dumps(answer))
    return 0 if status < 400 else 1
