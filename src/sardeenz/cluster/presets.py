"""Presets: a declared desired state of the cluster, and its diff against what runs.

A preset names models and how many replicas of each the cluster should run
(``PUT /api/cluster/presets/{name}``). The leader holds at most one *applied*
preset; its reconcile loop (cluster/preset_service.py) compares it with what
the pods' heartbeats say runs and acts on the difference, level-triggered:
whatever happened meanwhile (a pod died, one came back with its engines, an
operator unloaded a replica), the next pass sees the new state and converges.

This module is the pure part: the preset's schema and :func:`diff`, which says
how many replicas of each model are missing and which instances are surplus.
Where a missing replica goes is the scheduler's business (the planner asks it,
one replica at a time, so each placement sees the memory the previous took).

An instance belongs to a preset model when its served model name is the
model's ``servedModelName``: that is the name clients route by, so it is the
identity that matters. Instances of other names are not the preset's and are
never touched (loaded by hand, by the catalog, by another tool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import Field, model_validator

from sardeenz.domain import (
    EngineKind,
    ExtraArg,
    InstanceStatus,
    LoadRequest,
    StrictCamelModel,
)
from sardeenz.errors import InvalidRequest
from sardeenz.runtime.names import check_load_names

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""Preset names: what fits a URL segment and a log line without escaping."""

COUNTED = frozenset({InstanceStatus.STARTING, InstanceStatus.ACTIVE, InstanceStatus.SLEEPING})
"""States that count as a running replica. A failed instance does not serve (its
replacement is loaded; the failed record stays for the operator to read), and a
stopping one is on its way out."""


class PresetModel(StrictCamelModel):
    """One model of a preset: a load request plus how many replicas and where."""

    model_path: str = Field(..., min_length=1, max_length=4096)
    served_model_name: str = Field(..., min_length=1, max_length=512)
    engine: EngineKind | None = None
    extra_args: list[ExtraArg] = Field(default_factory=list, max_length=256)
    replicas: int = Field(1, ge=0, le=64)
    gpu_type: str | None = Field(None, min_length=1, max_length=256)
    min_vram_gib: float | None = Field(None, gt=0, le=100_000, alias="minVramGiB")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    sleep_level: int = Field(0, ge=0, le=2, description="0: no sleep mode; 1 or 2: enabled")
    pinned: bool = Field(
        False, description="never evicted for memory or put away when idle (docs/cluster.md)"
    )

    def load_request(self) -> LoadRequest:
        """The load one replica is started with (validated as any load request)."""
        return LoadRequest(
            model_path=self.model_path,
            served_model_name=self.served_model_name,
            engine=self.engine,
            extra_args=list(self.extra_args),
            gpu_type=self.gpu_type,
            min_vram_gib=self.min_vram_gib,
            tensor_parallel_size=self.tensor_parallel_size,
            enable_sleep_mode=self.sleep_level > 0,
        )


class PresetBody(StrictCamelModel):
    """Body of ``PUT /api/cluster/presets/{name}``."""

    models: list[PresetModel] = Field(..., max_length=256)

    @model_validator(mode="after")
    def _names_unique(self) -> PresetBody:
        seen: set[str] = set()
        for i, m in enumerate(self.models):
            if m.served_model_name in seen:
                raise ValueError(
                    f"models[{i}].servedModelName {m.served_model_name!r} appears twice: "
                    "one entry per model, with `replicas` for more than one"
                )
            seen.add(m.served_model_name)
        for i, m in enumerate(self.models):
            try:  # the same checks as a load: field limits, then the names as the load does
                check_load_names(m.load_request())
            except InvalidRequest as exc:
                raise ValueError(f"models[{i}].{exc.message}") from None
        return self


@dataclass(frozen=True, slots=True)
class Observed:
    """One instance some pod runs, as the leader knows it from heartbeats."""

    pod_id: str
    instance_id: str
    served_model_name: str
    status: InstanceStatus
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Missing:
    model: PresetModel
    count: int
    pods_with_replica: frozenset[str]
    """Pods that already run one: a new replica prefers another (a pod failure then
    takes one replica, not all)."""


@dataclass(frozen=True, slots=True)
class Diff:
    missing: tuple[Missing, ...] = ()
    surplus: tuple[Observed, ...] = ()
    satisfied: tuple[str, ...] = ()
    """Models that run exactly as declared."""
    counts: dict[str, int] = field(default_factory=dict)
    """Running replicas per preset model."""
    moving: tuple[str, ...] = ()
    """Preset models left alone because a move of one of their replicas is under way."""

    @property
    def converged(self) -> bool:
        return not self.missing and not self.surplus


def diff(
    models: Sequence[PresetModel],
    observed: Sequence[Observed],
    dropped: Sequence[str] = (),
    moving: frozenset[str] = frozenset(),
) -> Diff:
    """What the cluster lacks and has too much of, against ``models``.

    ``moving``: served names with a move under way; they get no step until it ends.

    ``dropped``: served names the previously applied preset declared and this one
    does not; their instances are surplus (the preset owned them). Surplus within
    a model is chosen newest first, so the replicas kept are the longest-running
    (a pod that comes back with the engines it ran re-adopted finds the replicas
    placed meanwhile on the survivors removed, and its own kept), and replicas
    that are not serving yet go before those that are.
    """
    by_name: dict[str, list[Observed]] = {}
    for o in observed:
        if o.status in COUNTED:
            by_name.setdefault(o.served_model_name, []).append(o)
    missing: list[Missing] = []
    surplus: list[Observed] = []
    satisfied: list[str] = []
    counts: dict[str, int] = {}
    for model in models:
        running = by_name.get(model.served_model_name, [])
        counts[model.served_model_name] = len(running)
        if len(running) < model.replicas:
            missing.append(
                Missing(model, model.replicas - len(running), frozenset(o.pod_id for o in running))
            )
        elif len(running) > model.replicas:
            keep_order = sorted(running, key=_keep_first)
            surplus.extend(keep_order[model.replicas :])
        else:
            satisfied.append(model.served_model_name)
    declared = {m.served_model_name for m in models}
    for name in dropped:
        if name not in declared:
            surplus.extend(sorted(by_name.get(name, []), key=_keep_first))
    # A move runs the target next to the source until the source is gone: one replica
    # more, and the newest (the target) would be the surplus. Such models wait.
    held = {m.model.served_model_name for m in missing} | {o.served_model_name for o in surplus}
    held &= moving
    left = tuple(m for m in missing if m.model.served_model_name not in held)
    extra = tuple(o for o in surplus if o.served_model_name not in held)
    return Diff(left, extra, tuple(satisfied), counts, tuple(sorted(held)))


def _keep_first(o: Observed) -> tuple[int, datetime, str]:
    serving = o.status is not InstanceStatus.STARTING
    return (0 if serving else 1, o.created_at, o.instance_id)
