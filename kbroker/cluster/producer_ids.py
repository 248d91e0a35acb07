"""Producer ids in cluster mode, as Kafka 3.9's RPCProducerIdManager hands them out.

Each broker draws ids from a block the controller allocated to it (AllocateProducerIds, written to
/latest_producer_id_block), so no two brokers, and no restart of one, ever give two producers the same
id: idempotence depends on it. The next block is asked for once 90% of the current one is used, so a
busy broker rarely waits; a producer that finds no block at hand is told COORDINATOR_LOAD_IN_PROGRESS,
which every client retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker.cluster.alter_partition import ControllerChannel
from kbroker.cluster.model import ProducerIdBlock
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS = 67
ALLOCATE_PRODUCER_IDS_VERSION = 0
PREFETCH_FRACTION = 0.9  # Kafka's RPCProducerIdManager asks for the next block at 90% of the current one
RETRY_BACKOFF_S = 0.1
BLOCK_WAIT_S = 2.0  # how long an InitProducerId waits for a block before COORDINATOR_LOAD_IN_PROGRESS


class ProducerIdsUnavailable(Exception):
    """No block is at hand (the controller is unknown, busy or refused): the producer retries."""


class ProducerIdManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], channel: ControllerChannel) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.channel = channel
        self.block: ProducerIdBlock | None = None
        self._next_id = -1
        self._next_block: ProducerIdBlock | None = None
        self._asking: asyncio.Task | None = None

    async def generate(self) -> int:
        """The next producer id; waits up to BLOCK_WAIT_S for a block when none is at hand (one request at a
        time), then raises ProducerIdsUnavailable."""
        if not self._take_next_block_if_used_up():
            # a short wait, not Kafka 3.9's none: the very first producer then gets its id without a retry, and a
            # slow controller still answers well inside the client's request timeout
            await asyncio.wait({self._ask()}, timeout=BLOCK_WAIT_S)
            if not self._take_next_block_if_used_up():
                raise ProducerIdsUnavailable("no producer id block from the controller")
        assert self.block is not None
        producer_id, self._next_id = self._next_id, self._next_id + 1
        used = self._next_id - self.block.first_producer_id
        if self._next_block is None and used >= self.block.size * PREFETCH_FRACTION:
            self._ask()
        return producer_id

    def _take_next_block_if_used_up(self) -> bool:
        """Whether an id is available, moving to the prefetched block once the current one is spent."""
        if self.block is not None and self._next_id <= self.block.last_producer_id:
            return True
        if self._next_block is None:
            return False
        self.block, self._next_block = self._next_block, None
        self._next_id = self.block.first_producer_id
        return True

    def _ask(self) -> asyncio.Task:
        if self._asking is None or self._asking.done():
            self._asking = asyncio.get_running_loop().create_task(self._fetch_block())
        return self._asking

    async def _fetch_block(self) -> None:
        request = messages.AllocateProducerIdsRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch())
        try:
            answer = await self.channel.request(ALLOCATE_PRODUCER_IDS, ALLOCATE_PRODUCER_IDS_VERSION, request)
        except Exception as error:
            log.info("AllocateProducerIds failed: %s", error)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        if answer.error_code != ErrorCode.NONE:
            log.info("AllocateProducerIds answered %s", ErrorCode(answer.error_code).name)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        block = ProducerIdBlock(self.broker_id, answer.producer_id_start, answer.producer_id_len)
        newest = self.block.last_producer_id if self.block is not None else -1
        if block.size <= 0 or block.first_producer_id <= newest:  # as Kafka's sanity check: never reuse an id
            log.error("ignoring producer id block %s (the last id handed out so far is %d)", block, newest)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        self._next_block = block
        log.info("got producer id block %s", block)

    async def stop(self) -> None:
        task, self._asking = self._asking, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
