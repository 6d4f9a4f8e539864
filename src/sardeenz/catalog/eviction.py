"""Which idle models make room when an on-demand start or wake does not fit: a pure choice.

Only catalog models are candidates (a model an operator loaded by hand is not
ours to remove), and of those only ones that may go: not pinned, no request in
flight, active or asleep, and past the minimum residency (a model that has just
loaded is not thrown out again at once). When the only candidates are busy or
fresh, the start waits for them (up to the request's max wait) instead of
failing: alternating requests for two models that do not fit together then all
succeed, switching at most once per residency time.

What is done to a victim (``plan_eviction``): putting it to sleep frees its
weights and KV cache on the GPU (vLLM keeps the CUDA graphs and the process) and
brings it back in a wake-up, seconds instead of a cold start; so a victim is
slept rather than unloaded when its catalog entry has a sleep level, its engine
was started with sleep mode, and, for level 1 (weights kept in host RAM), the
host has room for its weights. It is unloaded only when sleeping the candidates
cannot free enough. Least recently used first; on a tie, the one cheapest to
bring back first (a level-1 sleep, then a level-2 sleep, then an unload).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

MEMORY_REFUSALS = frozenset(
    {"model_does_not_fit", "insufficient_gpu_memory", "insufficient_host_memory"}
)
"""Codes of the ledger's refusals that freeing memory can cure."""


@dataclass(frozen=True, slots=True)
class Candidate:
    instance_id: str
    name: str
    status: str
    pinned: bool
    in_flight: int
    last_activity: float
    resident_for: float
    sleep_level: int = 0
    """What a sleep of it would be: the entry's level if its engine can sleep, else 0."""
    sleep_frees: int | None = None
    """Bytes per GPU a sleep frees (weights + KV cache); None: unknown."""
    unload_frees: int | None = None
    """Bytes per GPU an unload frees (what it holds now); None: unknown."""
    offload_bytes: int = 0
    """Host RAM a level-1 sleep fills with its weights."""


Action = Literal["sleep", "unload"]


@dataclass(frozen=True, slots=True)
class Step:
    """One victim and what to do to it."""

    victim: Candidate
    action: Action
    level: int
    """The sleep level (0 for an unload)."""
    frees: int | None
    why: str = ""
    """For an unload: why not a sleep."""


def _movable(c: Candidate) -> bool:
    return not c.pinned and c.status in ("active", "sleeping")


def order_victims(cands: list[Candidate], min_residency: float) -> list[Candidate]:
    """The candidates that may be evicted, least recently used first (asleep first on a
    tie: of two unloads, it loses nobody a running model)."""
    eligible = [
        c for c in cands if _movable(c) and c.in_flight == 0 and c.resident_for >= min_residency
    ]
    return sorted(eligible, key=lambda c: (c.last_activity, c.status != "sleeping"))


def free_later(cands: list[Candidate], min_residency: float) -> bool:
    """Some candidate is held back only for now (a request in flight, just loaded):
    worth waiting for, rather than refusing the start."""
    return any(_movable(c) and (c.in_flight > 0 or c.resident_for < min_residency) for c in cands)


def _no_sleep(c: Candidate, host_room: int | None) -> str | None:
    """Why ``c`` cannot be put to sleep now (None: it can)."""
    if c.status != "active":
        return "already asleep"
    if c.sleep_level not in (1, 2):
        return "no sleep (sleepLevel 0 or engine without sleep mode)"
    if c.sleep_level == 1 and host_room is not None and c.offload_bytes > host_room:
        return "not enough host RAM to keep its weights at sleep level 1"
    return None


def _sleep_step(c: Candidate, host_room: int | None) -> Step | None:
    """Sleeping ``c``, if it is awake, can sleep, and (level 1) the host has room."""
    if _no_sleep(c, host_room) is not None:
        return None
    return Step(c, "sleep", c.sleep_level, c.sleep_frees)


def _unload_step(c: Candidate, why: str) -> Step:
    return Step(c, "unload", 0, c.unload_frees, why)


def _cost(step: Step) -> int:
    """How dear the victim is to bring back: a level-1 wake, a level-2 wake, a cold start."""
    return step.level if step.action == "sleep" else 3


def _take(steps: list[Step], need: int | None) -> list[Step] | None:
    """The shortest prefix of ``steps`` that frees ``need`` (one step when the need or a
    step's gain is unknown: act, then ask the ledger again); None when all are not enough."""
    freed = 0
    for i, step in enumerate(steps):
        if need is None or step.frees is None:
            return steps[: i + 1]
        freed += step.frees
        if freed >= need:
            return steps[: i + 1]
    return None


def plan_eviction(
    cands: list[Candidate], min_residency: float, need: int | None, host_room: int | None
) -> list[Step]:
    """The evictions to make room for ``need`` bytes per GPU (None: unknown), in order.

    ``host_room``: bytes of host RAM level-1 sleeps may still fill (None: no limit
    known). Empty when the eligible candidates cannot free enough even all unloaded.
    """
    order = order_victims(cands, min_residency)
    room = host_room
    sleeps: list[Step] = []
    mixed: list[Step] = []
    for c in order:
        step = _sleep_step(c, room)
        if step is not None and step.level == 1 and room is not None:
            room -= c.offload_bytes
        if step is not None:
            sleeps.append(step)
        mixed.append(step or _unload_step(c, _no_sleep(c, room) or ""))
    # Sleep before unload: sleeps alone, if they free enough, LRU first.
    plan = _take(sorted(sleeps, key=lambda s: (s.victim.last_activity, _cost(s))), need)
    if plan is not None:
        return plan
    # Else sleep what may sleep and unload the rest, in LRU order (cheapest on a tie).
    mixed.sort(key=lambda s: (s.victim.last_activity, _cost(s)))
    plan = _take(mixed, need)
    if plan is not None:
        return plan
    # Still short: unload instead of sleeping, least recently used first.
    plan = _take([_unload_step(c, "sleeping would not free enough") for c in order], need)
    return plan or []


def shortfall(code: str, extra: Mapping[str, Any]) -> int | None:
    """Bytes per GPU a refused start or wake lacks, from the refusal's details (None when
    they do not say: the caller then frees one victim at a time)."""
    if code == "insufficient_gpu_memory":
        short = extra.get("shortBytesPerGpu")
        if isinstance(short, int) and short > 0:
            return short
        required = extra.get("requiredBytesPerGpu")
        chosen = extra.get("chosenGpuIds") or []
        gpus = extra.get("gpus") or []
        if not isinstance(required, int) or required <= 0:
            return None
        lacks = [
            required - int(g.get("availableBytes", 0))
            for g in gpus
            if isinstance(g, Mapping) and g.get("index") in chosen
        ]
        return max(lacks) if lacks and max(lacks) > 0 else None
    if code == "model_does_not_fit":
        fit = extra.get("fit")
        if not isinstance(fit, Mapping):
            return None
        lacks = [
            int(g["neededBytes"]) - int(g.get("availableBytes", 0))
            for g in fit.get("gpus") or []
            if isinstance(g, Mapping)
            and g.get("fits") is False
            and isinstance(g.get("neededBytes"), int)
        ]
        # The easiest GPU: a one-GPU model needs room on any one of them.
        return min(lacks) if lacks and min(lacks) > 0 else None
    return None
