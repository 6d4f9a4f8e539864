"""Ending the background tasks that services own."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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
