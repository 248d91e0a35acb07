"""`kbroker-topics.json` is replaced as Kafka replaces its checkpoints: temporary file, fsync,
rename, then fsync of the directory, without which the rename itself may be lost on power loss.

An fsync cannot be seen in the files, so the order of system calls is read with strace on a
real process that creates a topic.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker import config as broker_config
from kbroker.broker import TOPICS_FILE, Broker

CREATE_A_TOPIC = """
import sys
from kbroker import config
from kbroker.broker import Broker
broker = Broker(config.build({"log.dirs": sys.argv[1]}))
broker.create_topic("durable", 1)
broker.close()
"""
_CALL = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+)")


def _traced_calls(tmp_path: Path, data_dir: Path) -> list[tuple[str, str]]:
    """(system call, its arguments with fds shown as paths) for every rename and fsync, in order."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace.txt"
    result = subprocess.run(["strace", "-f", "-qq", "-y", "-o", str(trace),
                             "-e", "trace=rename,renameat,renameat2,fsync,fdatasync",
                             sys.executable, "-c", CREATE_A_TOPIC, str(data_dir)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "ptrace" in result.stderr:
        pytest.skip(f"strace cannot trace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    calls = []
    for line in trace.read_text().splitlines():
        match = _CALL.match(line)
        if match and match.group(3) == "0":
            calls.append((match.group(1), match.group(2)))
    return calls


def test_the_directory_is_fsynced_after_the_topics_file_is_renamed_into_place(tmp_path: Path):
    data_dir = (tmp_path / "data").resolve()
    calls = _traced_calls(tmp_path, data_dir)
    renames = [i for i, (name, args) in enumerate(calls) if name.startswith("rename") and f'{TOPICS_FILE}"' in args]
    assert len(renames) >= 2, "the topics file is written at start and when the topic is created"
    for at in renames:
        next_rename = next((i for i in range(at + 1, len(calls)) if calls[i][0].startswith("rename")), len(calls))
        directory_fsyncs = [args for name, args in calls[at + 1:next_rename]
                            if name == "fsync" and args.endswith(f"<{data_dir}>")]
        assert directory_fsyncs, f"no fsync of {data_dir} between {calls[at]} and the next rename"


def test_the_topics_file_is_replaced_whole_and_no_temporary_file_is_left(tmp_path: Path):
    broker = Broker(broker_config.build({"log.dirs": str(tmp_path)}))
    try:
        broker.create_topic("first", 1)
        broker.create_topic("second", 2)
    finally:
        broker.close()
    saved = json.loads((tmp_path / TOPICS_FILE).read_text())
    assert sorted((t["name"], t["partitions"]) for t in saved["topics"]) == [("first", 1), ("second", 2)]
    assert list(tmp_path.glob("*.tmp")) == []
