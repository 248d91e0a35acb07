"""`kbroker dump-log`: Kafka's kafka-dump-log.sh (DumpLogSegments) over a partition's files, with Kafka's flags
and, byte for byte, Kafka's output (kbroker/log/dump.py); no broker needed."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kbroker.commands import _common

if TYPE_CHECKING:
    from kbroker.log.dump import FileDump, Problems

_INT32_MAX = 2**31 - 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dump-log", help="print .log, .index, .timeindex, .snapshot and .txnindex files "
                                                    "as kafka-dump-log.sh does")
    parser.add_argument("paths", nargs="*", metavar="FILE", help="files to dump (as --files)")
    parser.add_argument("--files", default="", metavar="FILE1,FILE2,...",
                        help="the comma-separated list of data and index files to dump")
    parser.add_argument("--print-data-log", action="store_true", help="print each record's key and value")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only the check a broker runs on an index at startup")
    parser.add_argument("--max-message-size", type=_int32, default=5 * 1024 * 1024, metavar="SIZE",
                        help="size of the largest batch (index checks); default 5242880")
    parser.add_argument("--max-bytes", type=_int32, default=_INT32_MAX, metavar="SIZE",
                        help="read at most SIZE bytes of each .log file")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets' (implies --print-data-log; wins over the next)")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode records as __transaction_state's (implies --print-data-log)")
    parser.add_argument("--skip-record-metadata", action="store_true", help="print no metadata for each record")
    parser.add_argument("--json", action="store_true", help="one JSON object per file, then one of the problems")
    parser.set_defaults(run=_common.guarded(run))


def _int32(text: str) -> int:
    value = int(text)
    if not 0 <= value <= _INT32_MAX:
        raise argparse.ArgumentTypeError(f"{text} is not a positive Java int")
    return value


def run(args: argparse.Namespace) -> int:
    from kbroker.log import dump

    paths = [*(name for name in args.files.split(",") if args.files), *args.paths]
    if not paths:
        raise _common.UsageError("Missing required argument \"[files]\"")
    decoder = (dump.OFFSETS if args.offsets_decoder else
               dump.TRANSACTION_LOG if args.transaction_log_decoder else dump.STRING)
    options = dump.DumpOptions(
        print_data_log=args.print_data_log, deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
        max_message_size=args.max_message_size, max_bytes=args.max_bytes, decoder=decoder,
        skip_record_metadata=args.skip_record_metadata)
    dumps, problems = dump.dump_files(paths, options)
    for file_dump in dumps:
        _print(file_dump, problems, args.json)
        if file_dump.error is not None:  # where Kafka's tool dies with an exception: no problems printed
            sys.stdout.flush()
            print(f"kbroker dump-log: {file_dump.error}", file=sys.stderr)
            return 1
    if args.json:
        _common.print_json({"problems": problems.to_json()})
    else:
        _print_problems(problems.lines())
    return 0


def _print(file_dump: FileDump, problems: Problems, as_json: bool) -> None:
    """A file's dump as it is done; stderr lines the tool prints at once (an unknown file) go out now too."""
    if as_json:
        _common.print_json(file_dump.to_json())
    else:
        sys.stdout.write("".join(line + "\n" for line in file_dump.lines))
    if file_dump.kind == "unknown" and not as_json:
        sys.stdout.flush()
        print(problems.errors.pop(), file=sys.stderr)


def _print_problems(lines: list[str]) -> None:
    sys.stdout.flush()
    for line in lines:
        print(line, file=sys.stderr)
