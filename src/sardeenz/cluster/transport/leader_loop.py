"""A background loop that acts only while this pod leads.

The leader's level-triggered loops (profile reconciliation, the preset
reconcile) share one shape: every ``interval``, if this pod leads, run one
round; if it does not, forget what a leader's term had gathered (a new term
starts from scratch); one failed round is logged and the loop goes on; the
owner cancels it on shutdown. This is that shape, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)


class LeaderLoop:
    def __init__(
        self,
        name: str,
        leads: Callable[[], bool],
        step: Callable[[], Awaitable[None]],
        interval: float,
        *,
        on_follow: Callable[[], None] | None = None,
    ) -> None:
        self._name = name
        self._leads = leads
        self._step = step
        self._interval = interval
        self._on_follow = on_follow
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        while True:
            try:
                if self._leads():
                    await self._step()
                elif self._on_follow is not None:
                    self._on_follow()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the loop
                log.exception("%s: round failed", self._name)
            await asyncio.sleep(self._interval)
