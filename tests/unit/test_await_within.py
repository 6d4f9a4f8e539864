"""``await_within`` (sardeenz.tasks): ``asyncio.wait_for`` without Python 3.11's lost
cancellation, which held a server's shutdown for up to a minute."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from sardeenz.tasks import await_within, stop_task


async def _wait_loop(event: asyncio.Event, laps: list[int]) -> None:
    """A service loop: wait for news or a resync interval, do a pass, again."""
    while True:
        event.clear()
        with contextlib.suppress(TimeoutError):
            await await_within(event.wait(), 60)
        laps.append(1)


async def test_a_loop_cancelled_as_its_event_fires_ends() -> None:
    """The event and the cancellation land in the same step: ``wait_for`` (3.11) would
    return and the loop wait another 60 s; the task must end at once instead."""
    event = asyncio.Event()
    laps: list[int] = []
    task = asyncio.create_task(_wait_loop(event, laps))
    await asyncio.sleep(0)  # the loop is waiting
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, "the cancelled loop still runs: the cancellation was lost"
    assert task.cancelled()
    assert laps == []
    await stop_task(task)


async def test_the_result_or_a_timeout() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await await_within(answer(), 5) == 42
    assert await await_within(answer(), None) == 42
    with pytest.raises(TimeoutError):
        await await_within(asyncio.Event().wait(), 0.01)
