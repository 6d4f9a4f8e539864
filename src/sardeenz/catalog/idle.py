"""The idle policy: what to do with one instance of a catalog model, now.

A pure function of plain numbers so that every rule is unit-tested without a
clock or a server; ``reaper`` feeds it and carries out the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class IdleAction(StrEnum):
    KEEP = "keep"
    SLEEP = "sleep"
    UNLOAD = "unload"


@dataclass(frozen=True, slots=True)
class IdleFacts:
    """What the reaper knows of one instance at one tick (seconds, monotonic)."""

    status: str
    """``active`` or ``sleeping`` are candidates; anything else is left alone."""
    in_flight: int
    idle_for: float
    """Since the last request of the model ended (or since the controller first saw it)."""
    resident_for: float
    """Since the controller first saw the instance active."""
    sleep_capable: bool
    """Loaded with sleep mode (the engine can sleep at all)."""


@dataclass(frozen=True, slots=True)
class IdleRules:
    """One catalog entry's lifecycle settings plus the node's minimum residency."""

    sleep_level: int
    idle_sleep_seconds: float | None
    idle_unload_seconds: float | None
    pinned: bool
    min_residency_seconds: float


def decide(facts: IdleFacts, rules: IdleRules) -> IdleAction:
    """Sleep or unload an idle instance; never a pinned one, a busy one or a fresh one."""
    if rules.pinned or facts.in_flight > 0:
        return IdleAction.KEEP
    if facts.status not in ("active", "sleeping"):
        return IdleAction.KEEP
    if facts.resident_for < rules.min_residency_seconds:
        return IdleAction.KEEP
    unload_after = rules.idle_unload_seconds
    if unload_after is not None and facts.idle_for >= unload_after:
        return IdleAction.UNLOAD
    sleep_after = rules.idle_sleep_seconds
    if (
        facts.status == "active"
        and rules.sleep_level > 0
        and facts.sleep_capable
        and sleep_after is not None
        and facts.idle_for >= sleep_after
    ):
        return IdleAction.SLEEP
    return IdleAction.KEEP
