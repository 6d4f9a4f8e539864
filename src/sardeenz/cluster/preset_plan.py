"""A preset's plan: the steps that take the cluster from what runs to what is declared.

``make_plan`` turns the diff (cluster/presets.py) into ordered steps: unload
the surplus first (it frees memory the loads may need), then place each
missing replica with the scheduler, one at a time, booking each placement
into the snapshot so the next one sees the memory it took. A replica prefers
a pod that runs no replica of its model yet (one pod failure should not take
every replica); when no such pod can take it, any pod may.

A replica no pod can take is an ``unschedulable`` step carrying the
scheduler's reason per pod: the plan shows it, an apply refuses the whole
preset because of it (nothing done), and the reconcile loop does what it can
and reports the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sardeenz.cluster.presets import Observed, PresetModel, diff
from sardeenz.cluster.scheduler import (
    ClusterSnapshot,
    Placement,
    PlacementRequest,
    Refusal,
    Strategy,
    book,
    schedule,
)
from sardeenz.domain import LoadRequest


class Placer(Protocol):
    """What the planner needs of the leader's placement (cluster/placement.py)."""

    @property
    def strategy(self) -> Strategy: ...

    async def snapshot(self) -> ClusterSnapshot: ...

    async def request_for(
        self, req: LoadRequest, snapshot: ClusterSnapshot
    ) -> tuple[PlacementRequest, dict[str, str]]: ...


@dataclass(frozen=True, slots=True)
class Step:
    action: str
    """``load`` | ``unload`` | ``unschedulable``."""
    model: str
    pod_id: str | None = None
    gpu_ids: tuple[int, ...] = ()
    instance_id: str | None = None
    reason: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    """Per pod, why it cannot take the replica (``unschedulable`` only)."""
    load: LoadRequest | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "model": self.model}
        if self.pod_id is not None:
            out["podId"] = self.pod_id
        if self.gpu_ids:
            out["gpuIds"] = list(self.gpu_ids)
        if self.instance_id is not None:
            out["instanceId"] = self.instance_id
        if self.reason:
            out["reason"] = self.reason
        if self.reasons:
            out["reasons"] = self.reasons
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    satisfied: tuple[str, ...]
    counts: dict[str, int]
    strategy: Strategy
    moving: tuple[str, ...] = ()
    """Models left alone while a move of one of their replicas runs."""

    @property
    def unschedulable(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.action == "unschedulable")

    @property
    def nothing_to_do(self) -> bool:
        return not self.steps

    def as_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.value,
            "nothingToDo": self.nothing_to_do,
            "steps": [s.as_json() for s in self.steps],
            "satisfied": list(self.satisfied),
            "replicas": self.counts,
            "moving": list(self.moving),
        }


async def make_plan(
    models: Sequence[PresetModel],
    observed: Sequence[Observed],
    placer: Placer,
    dropped: Sequence[str] = (),
    moving: frozenset[str] = frozenset(),
) -> Plan:
    d = diff(models, observed, dropped, moving)
    steps: list[Step] = [
        Step(
            "unload",
            o.served_model_name,
            pod_id=o.pod_id,
            instance_id=o.instance_id,
            reason="not declared by the preset"
            if o.served_model_name in dropped
            else "more replicas than declared",
        )
        for o in d.surplus
    ]
    snapshot = without(await placer.snapshot(), d.surplus)
    for missing in d.missing:
        hosts = set(missing.pods_with_replica)
        for _ in range(missing.count):
            step, snapshot = await _place_one(missing.model, frozenset(hosts), snapshot, placer)
            steps.append(step)
            if step.pod_id is not None:
                hosts.add(step.pod_id)
    return Plan(tuple(steps), d.satisfied, d.counts, placer.strategy, d.moving)


async def _place_one(
    model: PresetModel, hosts: frozenset[str], snapshot: ClusterSnapshot, placer: Placer
) -> tuple[Step, ClusterSnapshot]:
    load = model.load_request()
    request, _ = await placer.request_for(load, snapshot)
    others = frozenset(p.pod_id for p in snapshot.pods) - hosts
    result: Placement | Refusal = Refusal(())
    if others:
        result = schedule(snapshot, replace(request, pods=others), placer.strategy)
    if not isinstance(result, Placement):
        result = schedule(snapshot, request, placer.strategy)
    if isinstance(result, Refusal):
        return (
            Step(
                "unschedulable",
                model.served_model_name,
                reason=result.message(),
                reasons=result.by_pod,
            ),
            snapshot,
        )
    pinned = load.model_copy(
        update={"pod_id": result.pod_id, "gpu_ids": list(result.gpu_ids) or None}
    )
    step = Step(
        "load",
        model.served_model_name,
        pod_id=result.pod_id,
        gpu_ids=result.gpu_ids,
        reason=result.verdict(),
        load=pinned,
    )
    return step, book(snapshot, result)


def without(snapshot: ClusterSnapshot, leaving: Sequence[Observed]) -> ClusterSnapshot:
    """Pods whose surplus instances the plan unloads first count one instance fewer.

    Their GPU memory is not credited back: a heartbeat shows it free once the
    engine is gone, and the next reconcile pass uses it then. Placing into
    memory that is still taken would make a load fail that a later pass places.
    """
    gone: dict[str, int] = {}
    for o in leaving:
        gone[o.pod_id] = gone.get(o.pod_id, 0) + 1
    return ClusterSnapshot(
        tuple(
            replace(p, instances=max(0, p.instances - gone.get(p.pod_id, 0))) for p in snapshot.pods
        )
    )


__all__ = ["Placer", "Plan", "Step", "make_plan", "without"]
