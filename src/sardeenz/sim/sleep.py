"""vLLM's sleep mode in the simulated engine: ``/sleep``, ``/wake_up``, ``/is_sleeping``.

Served only with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``, as in vLLM.
Falling asleep takes 50 ms, a full wake-up ``--wake-ms`` (default ``load-seconds / 10``,
at most 500 ms; waking one tag of two takes half). Both levels free weights and KV
cache; CUDA graphs stay. Requests queue while asleep (vLLM pauses its scheduler).
The first request admitted after a wake-up runs ``--wake-slowdown`` times slower
(vLLM's first request after a wake is several times slower until its caches are warm
again: the reason for the controller's optional warm-up request).

What happens to the requests in flight is vLLM's ``mode`` query parameter (vLLM's
``EngineCore.sleep`` pauses the scheduler first, ``pause_scheduler(mode)``):
``abort`` (vLLM's default) aborts them, their streams end with ``finish_reason``
``"abort"``; ``wait`` lets them finish first while new ones queue; ``keep`` freezes
them until the wake-up (the only behaviour before vLLM had pause modes, and what made a
sleep with streams in flight hang them). The log lines are vLLM's, because the
controller reads the freed memory from them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final
from urllib.parse import parse_qs

import orjson

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.sim.args import SimConfig
from sardeenz.sim.generation import Scheduler
from sardeenz.sim.logwriter import VllmLog
from sardeenz.sim.memory import MemoryPlan
from sardeenz.sim.metrics import SimMetrics
from sardeenz.sim.wire import RequestError, respond, respond_empty

__all__ = ["SleepControl"]

_SLEEP_SECONDS: Final = 0.05
_MODES: Final = ("abort", "wait", "keep")


class SleepControl:
    """Which memory is asleep, and the endpoints that change it."""

    def __init__(
        self,
        cfg: SimConfig,
        plan: MemoryPlan,
        log: VllmLog,
        metrics: SimMetrics,
        scheduler: Scheduler,
    ) -> None:
        self.cfg = cfg
        self.plan = plan
        self.log = log
        self.metrics = metrics
        self.scheduler = scheduler
        self.awake = scheduler.awake
        self.sleeping_tags: set[str] = set()
        self.sleep_level: int | None = None
        self.sleep_lock = asyncio.Lock()
        self.wakeups = 0

    def current_memory_gib(self) -> float:
        """The simulated footprint now: graphs always, weights and KV unless asleep."""
        mem = self.plan.graphs_gib
        if "weights" not in self.sleeping_tags:
            mem += self.plan.weights_gib
        if "kv_cache" not in self.sleeping_tags:
            mem += self.plan.kv_gib
        return round(mem, 4)

    async def sleep(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /sleep?level=1|2``: free weights and KV cache; requests queue meanwhile."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            level = int(query.get("level", ["1"])[-1])
        except ValueError:
            raise RequestError("level must be 1 or 2", param="level") from None
        if level not in (1, 2):
            raise RequestError("level must be 1 or 2", param="level")
        mode = query.get("mode", ["abort"])[-1]
        if mode not in _MODES:
            raise RequestError("mode must be abort, wait or keep", param="mode")
        async with self.sleep_lock:
            if self.sleeping_tags:
                self.log.core("executor_base.py:206", "Executor is already sleeping.", "WARNING")
            else:
                started = time.perf_counter()
                await self._pause(mode)
                await asyncio.sleep(_SLEEP_SECONDS)
                freed = self.plan.weights_gib + self.plan.kv_gib
                self.sleeping_tags = {"weights", "kv_cache"}
                self.sleep_level = level
                self.metrics.set_sleep_state(level)
                self.metrics.sleeps.inc()
                self.log.core(
                    "gpu_worker.py:117",
                    f"Sleep mode freed {freed:.2f} GiB memory, "
                    f"{self.current_memory_gib():.2f} GiB memory is still in use.",
                )
                self.log.core(
                    "executor_base.py:211",
                    f"It took {time.perf_counter() - started:.6f} seconds to fall asleep.",
                )
        await respond_empty(send)

    async def wake_up(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /wake_up[?tags=weights&tags=kv_cache]``: restore memory, release requests."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        tags: list[str] | None = query.get("tags") or None
        async with self.sleep_lock:
            if not self.sleeping_tags:
                self.log.core("executor_base.py:219", "Executor is not sleeping.", "WARNING")
            elif tags is not None and any(t not in self.sleeping_tags for t in tags):
                bad = next(t for t in tags if t not in self.sleeping_tags)
                self.log.core(
                    "executor_base.py:225",
                    f"Tag {bad} is not in sleeping tags {_set_repr(self.sleeping_tags)}",
                    "WARNING",
                )
            else:
                started = time.perf_counter()
                waking = set(tags) if tags is not None else set(self.sleeping_tags)
                share = len(waking) / len(self.sleeping_tags)
                await asyncio.sleep(self.cfg.wake_s * share)
                shown = repr(tags) if tags is not None else _set_repr(self.sleeping_tags)
                self.sleeping_tags -= waking
                self.log.core(
                    "executor_base.py:232",
                    f"It took {time.perf_counter() - started:.6f} seconds to wake up tags {shown}.",
                )
                if not self.sleeping_tags:
                    self.sleep_level = None
                    self.wakeups += 1
                    self.metrics.wakeups.inc()
                    self.metrics.set_sleep_state(None)
                    self.scheduler.cold = self.cfg.wake_slowdown > 1
                    self.awake.set()
                    self.scheduler.admitting.set()
        await respond_empty(send)

    async def _pause(self, mode: str) -> None:
        """Stop admitting, deal with the requests in flight as ``mode`` says, pause the rest."""
        sched = self.scheduler
        sched.admitting.clear()
        if mode == "abort":
            aborted = sched.abort_all()
            if aborted:
                self.log.core("core.py:420", f"Aborted {aborted} request(s) before sleeping.")
        elif mode == "wait":
            if sched.running:
                self.log.core(
                    "core.py:695", "Waiting for in-flight requests to complete before sleeping..."
                )
            while sched.running:  # noqa: ASYNC110 - rare admin call; a poll is simplest
                await asyncio.sleep(0.01)
        self.awake.clear()

    async def is_sleeping(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps({"is_sleeping": bool(self.sleeping_tags)}))


def _set_repr(tags: set[str]) -> str:
    """A set as Python prints it, in a stable order (logs are compared in tests)."""
    return "{" + ", ".join(repr(t) for t in sorted(tags)) + "}"
