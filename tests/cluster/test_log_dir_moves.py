"""A replicated partition's log moved to another log dir of its leader (AlterReplicaLogDirs) goes on being
replicated: the partition's state takes the moved log, so later appends, the follower's fetches and the high
watermark all use it. The broker leads "t"-0 with a follower the test drives (test_pipelined_produce.leader)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_fetch_wakeups import fetch, produce_acks_1
from test_pipelined_produce import FOLLOWER, leader

MOVE_TIMEOUT_S = 10


def test_a_leaders_log_moved_to_another_log_dir_is_the_one_replicated_after_the_move(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"

    async def scenario() -> None:
        async with leader(tmp_path, **{"log.dirs": f"{a},{b}"}) as (broker, server):
            for value in (b"one", b"two"):
                await asyncio.to_thread(produce_acks_1, server.port, value)
            target = b if broker.logs.log_dir_of("t", 0) == a else a
            assert broker.logs.create_future("t", 0, target)
            broker.log_dir_mover.start()
            async with asyncio.timeout(MOVE_TIMEOUT_S):
                while broker.log_dir_mover.completed == 0:
                    await asyncio.sleep(0.01)
            partition, moved = broker.replicas.get("t", 0), broker.logs.get("t", 0)
            assert partition.log is moved and moved.dir == target / "t-0"

            await asyncio.to_thread(produce_acks_1, server.port, b"three")
            _, data = await asyncio.to_thread(fetch, server.port, FOLLOWER, 0)
            assert [v in bytes(data.records) for v in (b"one", b"two", b"three")] == [True] * 3
            assert moved.log_end_offset == 3
            broker.replicas.record_follower_fetch(partition, FOLLOWER, 3, 0, 3)  # the follower has all three
            assert moved.high_watermark == 3

    asyncio.run(scenario())
