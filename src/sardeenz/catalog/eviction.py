"""Which idle models to unload when an on-demand start does not fit: a pure choice.

Only catalog models are candidates (a model an operator loaded by hand is not
ours to remove), and of those only ones that may go: not pinned, no request in
flight, active or asleep, and past the minimum residency (a model that has just
loaded is not thrown out again at once). Least recently used first; on a tie,
one asleep before one awake (it serves nobody now and is cheaper to give up).
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


def order_victims(cands: list[Candidate], min_residency: float) -> list[Candidate]:
    """The candidates that may be evicted, in the order to evict them."""
    eligible = [
        c
        for c in cands
        if not c.pinned
        and c.in_flight == 0
        and c.status in ("active", "sleeping")
        and c.resident_for >= min_residency
    ]
    return sorted(eligible, key=lambda c: (c.last_activity, c.status != "sleeping"))
