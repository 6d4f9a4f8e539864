"""Ending the background tasks that services own, and waiting with a bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a task its owner started and wait until it has ended (None: nothing to stop).

    Every long-lived loop (routing updater, idle reaper, external health checks, the
    cluster driver) stops this way on shutdown, so none outlives its owner.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def await_within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``asyncio.wait_for`` that never loses a cancellation; ``TimeoutError`` when the
    ``seconds`` (None: no bound) run out.

    Python 3.11's ``wait_for`` returns the awaitable's result when the caller is
    cancelled in the same step as the awaitable completes (fixed in 3.12): a loop
    that waits on an event, cancelled by ``stop_task`` just as the event fires, then
    runs on until its next timeout, and a shutdown waited on it (up to a minute, for
    kvcached limits). ``asyncio.timeout`` re-raises that cancellation.
    """
    async with asyncio.timeout(seconds):
        return await awaitable
