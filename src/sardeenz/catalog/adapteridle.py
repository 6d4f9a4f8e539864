"""The idle TTL of LoRA adapters: one that no request used for the TTL is unloaded.

A slot of a full instance is taken back anyway when another adapter needs it (LRU,
``catalog.adapters``); the TTL also frees a quiet instance's slots, so the adapters
a base holds are the ones in use and a later burst finds free slots rather than
paying an unload before each load. Only loaded adapters with no request in flight
are unloaded, on active instances (a sleeping base keeps its adapters); the slot
book marks each for eviction in the same step, so no request can take it while
its unload is under way (``SlotBook.expire``).

The loop belongs to the loader: started with its first loaded adapter, stopped by
its ``close``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

__all__ = ["IdleAdapters"]

MAX_PERIOD_SECONDS = 30.0


class _Unloader(Protocol):
    async def unload_idle(self, ttl: float) -> list[tuple[str, str]]: ...


class IdleAdapters:
    def __init__(self, ttl: float, loader: _Unloader) -> None:
        self.ttl = ttl
        """Seconds; 0: adapters are never unloaded for being idle."""
        self._loader = loader
        self._task: asyncio.Task[None] | None = None

    @property
    def period(self) -> float:
        """How often idle adapters are looked for: a quarter of the TTL (so one is
        unloaded at most a quarter late), at most every 30 s."""
        return min(MAX_PERIOD_SECONDS, max(0.05, self.ttl / 4))

    def start(self) -> None:
        """Start the loop unless it runs (idempotent; nothing when the TTL is 0)."""
        if self.ttl <= 0 or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="sardeenz-adapter-idle"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self._loader.unload_idle(self.ttl)
            except Exception:  # one bad pass must not end the TTL for good
                log.exception("idle LoRA adapters: unload pass failed")
