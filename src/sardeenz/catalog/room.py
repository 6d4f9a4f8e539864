"""Making room: carry out the eviction policy for a start or a wake that does not fit.

``RoomMaker.run`` tries the start (or wake); while the memory ledger refuses it for
memory, it asks the idle loop for a plan (``eviction.plan_eviction``: whom to put to
sleep, whom to unload), carries it out, and tries again. When no victim may go yet
but one will (a request in flight, just loaded), it waits a tick, up to the max
wait. Every eviction is one log line and one ``catalog`` event on the bus (victim,
action, for which model, memory needed and freed) and counts in
``sardeenz_ondemand_lifecycle_actions{reason="evicted"}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from sardeenz.catalog.eviction import MEMORY_REFUSALS, Step, shortfall
from sardeenz.catalog.metrics import STATS
from sardeenz.config import Settings
from sardeenz.domain import ModelInstance
from sardeenz.errors import SardeenzError
from sardeenz.events import CatalogEvent, EventBus
from sardeenz.units import gib

log = logging.getLogger(__name__)


class Evictor(Protocol):
    """Who may make room (the idle loop knows who is idle)."""

    def eviction_plan(
        self, exclude: str, need: int | None, host_room: int | None
    ) -> tuple[list[Step], bool]: ...

    def busy(self, name: str) -> bool: ...


class Victims(Protocol):
    """What evicting needs of the supervisor."""

    async def sleep(self, instance_id: str, level: int) -> ModelInstance: ...

    async def unload(self, instance_id: str) -> ModelInstance: ...


class RoomMaker:
    """Runs starts and wakes, evicting idle catalog models while memory is short."""

    def __init__(
        self,
        settings: Settings,
        victims: Victims,
        bus: EventBus | None = None,
        host_room: Callable[[], Awaitable[int]] | None = None,
        evictor: Evictor | None = None,
    ) -> None:
        self._victims = victims
        self._bus = bus
        self._host_room = host_room
        self._tick = settings.ondemand_tick_seconds
        self._max_wait = settings.ondemand_max_wait_seconds
        self.evictor = evictor

    async def run(
        self, name: str, attempt: Callable[[], Awaitable[ModelInstance]]
    ) -> ModelInstance:
        """Run ``attempt`` (a load or a wake of ``name``), making room while it is refused
        for memory; raises the last refusal when nothing (more) can be evicted."""
        tried: set[tuple[str, str]] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        while True:
            try:
                return await attempt()
            except SardeenzError as exc:
                evictor = self.evictor
                if exc.code not in MEMORY_REFUSALS or evictor is None:
                    raise
                need = shortfall(exc.code, exc.extra)
                room = await self._host_room() if self._host_room is not None else None
                plan, later = evictor.eviction_plan(exclude=name, need=need, host_room=room)
                # The same step twice would loop: it did not help (or failed) the first time.
                plan = [s for s in plan if (s.victim.instance_id, s.action) not in tried]
                # The last look at in-flight requests: the calls start right after.
                plan = [s for s in plan if not evictor.busy(s.victim.name)]
                if not plan:
                    if later and loop.time() < deadline:
                        await asyncio.sleep(self._tick)
                        continue
                    raise
                for step in plan:
                    tried.add((step.victim.instance_id, step.action))
                    await self._evict(step, name, need, exc.message)

    async def _evict(self, step: Step, for_model: str, need: int | None, why: str) -> None:
        victim = step.victim
        action, level = step.action, step.level
        if action == "sleep":
            try:
                await self._victims.sleep(victim.instance_id, level)
            except SardeenzError as exc:  # engine refused: unloading frees it all anyway
                log.warning(
                    "eviction: could not put %s to sleep (%s); unloading it", victim.name, exc
                )
                action, level = "unload", 0
                step = Step(victim, "unload", 0, victim.unload_frees, f"sleep failed: {exc}")
        if action == "unload":
            try:
                await self._victims.unload(victim.instance_id)
            except SardeenzError as exc:
                log.warning("eviction of %s failed: %s", victim.instance_id, exc.message)
                return
        frees = step.frees
        what = f"put to sleep (level {level})" if action == "sleep" else "unloaded"
        if step.why:
            what += f" ({step.why})"
        needed = gib(need) if need is not None else "unknown"
        freed = gib(frees) if frees is not None else "unknown"
        log.warning(
            "evicting %s (instance %s, was %s): %s to make room for %s; needed %s per GPU, "
            "frees about %s: %s",
            victim.name,
            victim.instance_id,
            victim.status,
            what,
            for_model,
            needed,
            freed,
            why,
        )
        STATS.action(victim.name, action, "evicted")
        if self._bus is not None:
            self._bus.publish(
                CatalogEvent(
                    instance_id=victim.instance_id,
                    model=victim.name,
                    action=action,
                    reason="evicted",
                    message=f"{what} to make room for {for_model} (needed {needed} per GPU, "
                    f"frees about {freed})",
                    details={
                        "forModel": for_model,
                        "level": level,
                        "neededBytes": need,
                        "freedBytes": frees,
                        "cause": why,
                        "why": step.why or None,
                    },
                )
            )
