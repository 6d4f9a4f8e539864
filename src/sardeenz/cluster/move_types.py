"""What a move is, as the API shows it (the leader's MoveService runs them: moves.py)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from sardeenz.domain import CamelModel, GpuId, StrictCamelModel, utcnow


class MoveState(StrEnum):
    PENDING = "pending"
    STARTING_TARGET = "starting-target"
    SWITCHING = "switching"
    DRAINING = "draining"
    UNLOADING_SOURCE = "unloading-source"
    DONE = "done"
    FAILED = "failed"


FINISHED = frozenset({MoveState.DONE, MoveState.FAILED})


class MoveRequest(StrictCamelModel):
    """Body of ``POST /api/cluster/moves``."""

    instance_id: str = Field(..., min_length=1, max_length=64)
    target_pod_id: str = Field(
        ..., min_length=1, max_length=253, description="the pod id (the same pod: a GPU move)"
    )
    gpu_ids: list[GpuId] | None = Field(
        None, max_length=64, description="GPUs on the target pod (default: its ledger picks)"
    )
    drain_seconds: float | None = Field(
        None,
        ge=0,
        le=3600,
        description="how long the source's requests in flight get to finish "
        "(default SARDEENZ_STOP_GRACE_SECONDS); those left are cut",
    )


class MoveStep(CamelModel):
    name: str
    at: datetime
    detail: str | None = None


class Move(CamelModel):
    id: str
    instance_id: str
    model: str = Field(description="the served model name")
    source_pod_id: str
    source_gpu_ids: list[int]
    target_pod_id: str
    target_gpu_ids: list[int] | None = Field(description="as asked; the target's own once known")
    target_instance_id: str | None = None
    state: MoveState = MoveState.PENDING
    steps: list[MoveStep] = Field(default_factory=list)
    reason: str | None = None
    code: str | None = Field(None, description="stable code of the failure")
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    duration_seconds: float | None = None
