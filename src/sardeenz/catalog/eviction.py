"""Which idle models to unload when an on-demand start does not fit: a pure choice.

Only catalog models are candidates (a model an operator loaded by hand is not
ours to remove), and of those only ones that may go: not pinned, no request in
flight, active or asleep, and past the minimum residency (a model that has just
loaded is not thrown out again at once). Least recently used first; on a tie,
one asleep before one awake (it serves nobody now and is cheaper to give up).
When the only candidates are busy or fresh, the start waits for them (up to the
request's max wait) instead of failing: alternating requests for two models that
do not fit together then all succeed, switching at most once per residency time.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _movable(c: Candidate) -> bool:
    return not c.pinned and c.status in ("active", "sleeping")


def order_victims(cands: list[Candidate], min_residency: float) -> list[Candidate]:
    """The candidates that may be evicted, in the order to evict them."""
    eligible = [
        c for c in cands if _movable(c) and c.in_flight == 0 and c.resident_for >= min_residency
    ]
    return sorted(eligible, key=lambda c: (c.last_activity, c.status != "sleeping"))


def free_later(cands: list[Candidate], min_residency: float) -> bool:
    """Some candidate is held back only for now (a request in flight, just loaded):
    worth waiting for, rather than refusing the start."""
    return any(_movable(c) and (c.in_flight > 0 or c.resident_for < min_residency) for c in cands)
