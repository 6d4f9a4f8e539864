"""The idle loop: one owned background task that sleeps, then unloads, idle catalog models.

Every ``ondemand_tick_seconds`` it looks at each instance whose served name is a
catalog entry, asks the pure policy (``idle.decide``) and carries out the answer
through the supervisor. Activity comes from the proxy's per-model counters
(``proxy.metrics``: requests in flight and requests finished), sampled here:
a request that started or ended since the last tick restarts the idle clock.
So the hot path pays nothing beyond the integer updates it already makes, and
TTLs are as precise as the tick.

Clocks live in this process only: a restarted controller re-adopts its engines
and starts every idle clock (and the minimum residency) afresh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from sardeenz.catalog.eviction import Candidate, Step, free_later, plan_eviction
from sardeenz.catalog.idle import IdleAction, IdleFacts, IdleRules, decide
from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.registry import Catalog
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.errors import SardeenzError
from sardeenz.events import CatalogEvent, EventBus
from sardeenz.memory.ledger import offload_bytes
from sardeenz.proxy import metrics
from sardeenz.tasks import stop_task
from sardeenz.units import gib

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 30.0
"""Seconds before an idle action that failed (engine refused to sleep) is tried again."""


class Lifecycle(Protocol):
    """What the idle loop needs of the supervisor."""

    def list_instances(self) -> list[ModelInstance]: ...

    async def sleep(self, instance_id: str, level: int) -> ModelInstance: ...

    async def unload(self, instance_id: str) -> ModelInstance: ...


Activity = Callable[[str], tuple[int, int]]
"""``activity(served_name) -> (in flight now, requests finished so far)``."""


def proxy_activity(name: str) -> tuple[int, int]:
    """The proxy's counters for ``name`` (both the express path and the forwarder keep them)."""
    mm = metrics.for_model(name)
    return mm.in_flight, sum(mm.requests.values())


@dataclass(slots=True)
class _Clock:
    last_activity: float
    finished_seen: int
    active_since: float | None = None
    """Since when the instance is active this time (a wake starts it again)."""
    last_status: InstanceStatus | None = None
    retry_at: float = 0.0
    no_room_said: bool = False
    """The 'no host RAM for a level-1 sleep' warning was logged (once per episode)."""


class IdleReaper:
    """Owns the idle loop task: ``start()`` on serve, ``stop()`` on shutdown."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        lifecycle: Lifecycle,
        activity: Activity = proxy_activity,
        clock: Callable[[], float] = time.monotonic,
        bus: EventBus | None = None,
        host_room: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        """``host_room``: bytes of host RAM a level-1 sleep may still fill (the memory
        ledger's ``host_room``); without it, level-1 sleeps are not checked."""
        self._catalog = catalog
        self._bus = bus
        self._lifecycle = lifecycle
        self._activity = activity
        self._clock = clock
        self._host_room = host_room
        self._tick = settings.ondemand_tick_seconds
        self._min_residency = settings.ondemand_min_residency_seconds
        self._clocks: dict[str, _Clock] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="sardeenz-idle-reaper"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            try:
                await self.tick()
            except Exception:  # one bad tick must not end idle handling for good
                log.exception("idle loop tick failed")

    async def tick(self) -> None:
        """One pass over every catalog model's instances."""
        now = self._clock()
        seen: set[str] = set()
        for inst in self._lifecycle.list_instances():
            name = inst.served_model_name
            entry = self._catalog.entry(name)
            if entry is None:
                continue
            seen.add(inst.id)
            in_flight, clock = self._observe(inst, now)
            if now < clock.retry_at:
                continue
            facts = IdleFacts(
                status=inst.status.value,
                in_flight=in_flight,
                idle_for=now - clock.last_activity,
                resident_for=now - clock.active_since if clock.active_since is not None else 0.0,
                sleep_capable=inst.sleep_mode_enabled,
            )
            rules = IdleRules(
                sleep_level=entry.sleep_level,
                idle_sleep_seconds=entry.idle_sleep_seconds,
                idle_unload_seconds=entry.idle_unload_seconds,
                pinned=entry.pinned,
                min_residency_seconds=self._min_residency,
            )
            action = decide(facts, rules)
            if action is not IdleAction.KEEP:
                await self._apply(action, inst, entry.sleep_level, facts.idle_for, clock)
        for gone in set(self._clocks) - seen:
            del self._clocks[gone]

    def _observe(self, inst: ModelInstance, now: float) -> tuple[int, _Clock]:
        """Sample the model's activity into the instance's clock: (in flight, clock)."""
        in_flight, finished = self._model_activity(inst.served_model_name)
        clock = self._clocks.get(inst.id)
        if clock is None:  # first sight (new load or re-adopted): the clock starts now
            clock = self._clocks[inst.id] = _Clock(last_activity=now, finished_seen=finished)
        if in_flight > 0 or finished != clock.finished_seen:
            clock.last_activity = now
            clock.finished_seen = finished
        if inst.status is InstanceStatus.ACTIVE and (
            clock.active_since is None or clock.last_status is not InstanceStatus.ACTIVE
        ):  # loaded, or woken: the minimum residency counts from now
            clock.active_since = now
        clock.last_status = inst.status
        return in_flight, clock

    def _candidates(self, exclude: str) -> list[Candidate]:
        """Every instance of another catalog model, as the eviction policy sees it."""
        now = self._clock()
        cands: list[Candidate] = []
        for inst in self._lifecycle.list_instances():
            entry = self._catalog.entry(inst.served_model_name)
            if entry is None or inst.served_model_name == exclude:
                continue
            in_flight, clock = self._observe(inst, now)
            sleep_frees, unload_frees = _frees(inst)
            cands.append(
                Candidate(
                    instance_id=inst.id,
                    name=inst.served_model_name,
                    status=inst.status.value,
                    pinned=entry.pinned,
                    in_flight=in_flight,
                    last_activity=clock.last_activity,
                    resident_for=now - clock.active_since if clock.active_since is not None else 0,
                    sleep_level=entry.sleep_level if inst.sleep_mode_enabled else 0,
                    sleep_frees=sleep_frees,
                    unload_frees=unload_frees,
                    offload_bytes=offload_bytes(inst),
                )
            )
        return cands

    def eviction_plan(
        self, exclude: str, need: int | None, host_room: int | None
    ) -> tuple[list[Step], bool]:
        """What to sleep or unload to free ``need`` bytes per GPU for ``exclude``
        (``eviction.plan_eviction``), and whether busy or fresh candidates could be later."""
        cands = self._candidates(exclude)
        steps = plan_eviction(cands, self._min_residency, need, host_room)
        return steps, free_later(cands, self._min_residency)

    async def _host_has_room(self, inst: ModelInstance, clock: _Clock) -> bool:
        """A level-1 sleep moves the weights to host RAM: only when the host has room for
        them (the check evictions make). Otherwise the model stays awake (its idle unload,
        or an eviction that needs its memory, still applies) and is looked at again later."""
        if self._host_room is None:
            return True
        need, room = offload_bytes(inst), await self._host_room()
        if need <= room:
            clock.no_room_said = False
            return True
        clock.retry_at = self._clock() + RETRY_AFTER_FAILURE
        if not clock.no_room_said:
            clock.no_room_said = True
            log.warning(
                "idle: not putting %s (instance %s) to sleep at level 1: its weights need "
                "%s of host RAM, %s is available; it stays awake",
                inst.served_model_name,
                inst.id,
                gib(need),
                gib(room),
            )
        return False

    def idle_seconds(self, instance_ids: list[str]) -> float | None:
        """Seconds since any of these instances last had a request, as of the last tick
        (what the idle TTLs count); None when the loop has not seen any of them."""
        now = self._clock()
        seen = [now - c.last_activity for i in instance_ids if (c := self._clocks.get(i))]
        return max(0.0, min(seen)) if seen else None

    def busy(self, name: str) -> bool:
        """A request for ``name`` is in flight right now."""
        return self._model_activity(name)[0] > 0

    def _model_activity(self, name: str) -> tuple[int, int]:
        """The activity of ``name`` and of its LoRA adapters: a request for an adapter
        runs in the base's instance and keeps it awake like one for the base."""
        in_flight, finished = self._activity(name)
        for adapter in self._catalog.adapters_of(name):
            more, done = self._activity(adapter)
            in_flight += more
            finished += done
        return in_flight, finished

    async def _apply(
        self, action: IdleAction, inst: ModelInstance, level: int, idle_for: float, clock: _Clock
    ) -> None:
        name = inst.served_model_name
        # Re-read right before acting: a request may have arrived during an earlier await
        # of this tick (the call below starts synchronously, so none can slip in after).
        if self._model_activity(name)[0] > 0:
            return
        if action is IdleAction.SLEEP and level == 1 and not await self._host_has_room(inst, clock):
            return
        log.info(
            "idle: %s %s (instance %s) after %.0f s without requests",
            f"putting to sleep (level {level})" if action is IdleAction.SLEEP else "unloading",
            name,
            inst.id,
            idle_for,
        )
        try:
            if action is IdleAction.SLEEP:
                await self._lifecycle.sleep(inst.id, level)
            else:
                await self._lifecycle.unload(inst.id)
        except (SardeenzError, OSError) as exc:
            clock.retry_at = self._clock() + RETRY_AFTER_FAILURE
            log.warning("idle: could not %s %s (%s): %s", action.value, name, inst.id, exc)
            return
        STATS.action(name, action.value, "idle")
        if self._bus is not None:
            what = f"slept at level {level}" if action is IdleAction.SLEEP else "unloaded"
            self._bus.publish(
                CatalogEvent(
                    instance_id=inst.id,
                    model=name,
                    action=action.value,
                    reason="idle",
                    message=f"{what} after {idle_for:.0f} s without requests",
                    details={"idleSeconds": round(idle_for, 1), "level": level},
                )
            )


GIB = 2**30


def _frees(inst: ModelInstance) -> tuple[int | None, int | None]:
    """Bytes per GPU a sleep and an unload of ``inst`` would free now (None: unknown).

    A sleep frees the weights and the KV cache (vLLM keeps its CUDA graphs), as the
    engine's own start-up lines reported them; an unload frees all it was given, less
    what an earlier sleep already gave back.
    """
    m = inst.memory_metrics
    sleep: int | None = None
    if m is not None and m.weights_memory_gib is not None and m.kv_cache_available_gib is not None:
        sleep = int((m.weights_memory_gib + m.kv_cache_available_gib) * GIB)
    total = inst.reserved_bytes_per_gpu
    if inst.status is InstanceStatus.SLEEPING:
        return None, (max(0, total - sleep) if total is not None and sleep is not None else None)
    return sleep, total
