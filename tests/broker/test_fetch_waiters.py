"""Which parked fetches a partition's news wakes: followers read to the log end, consumers to the high
watermark, so an append wakes the first and a HW move the second (kbroker.broker.FetchWaiters)."""

from __future__ import annotations

import asyncio

from kbroker.broker import FetchWaiters

KEY = ("t", 0)


async def parked_pair(waiters: FetchWaiters) -> tuple[asyncio.Future, asyncio.Future]:
    return waiters.park([KEY], follower=True), waiters.park([KEY])


def test_an_append_wakes_the_followers_fetches_and_leaves_the_consumers_waiting() -> None:
    async def scenario() -> None:
        waiters = FetchWaiters()
        follower, consumer = await parked_pair(waiters)
        waiters.wake_followers(*KEY)
        assert (follower.done(), consumer.done()) == (True, False)
        assert waiters.watched() == 1

    asyncio.run(scenario())


def test_a_high_watermark_move_wakes_the_consumers_fetches_and_leaves_the_followers_waiting() -> None:
    async def scenario() -> None:
        waiters = FetchWaiters()
        follower, consumer = await parked_pair(waiters)
        waiters.wake_consumers(*KEY)
        assert (follower.done(), consumer.done()) == (False, True)

    asyncio.run(scenario())


def test_news_of_another_kind_wakes_every_fetch_parked_on_the_partition() -> None:
    async def scenario() -> None:
        waiters = FetchWaiters()
        follower, consumer = await parked_pair(waiters)
        other = waiters.park([("t", 1)])
        waiters.wake(*KEY)
        assert (follower.done(), consumer.done(), other.done()) == (True, True, False)

    asyncio.run(scenario())


def test_an_unparked_fetch_is_no_longer_watched() -> None:
    async def scenario() -> None:
        waiters = FetchWaiters()
        follower, consumer = await parked_pair(waiters)
        waiters.unpark(follower, [KEY], follower=True)
        waiters.unpark(consumer, [KEY])
        assert waiters.watched() == 0

    asyncio.run(scenario())
