"""``/api/cluster``: this pod's view of the cluster and the scheduler's verdict.

Answered by every pod (never redirected to the leader): each pod's view can
be read, and every pod holds every heartbeat, so any pod can say where a load
would go (the leader acts on the same computation).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import LoadRequest
from sardeenz.security.policy import READONLY

router = APIRouter(prefix="/api/cluster", tags=["cluster"])


class PodView(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    address: str
    state: str = Field(description="failure detector: healthy | suspect | unavailable")
    isLeader: bool
    gpus: list[dict[str, Any]]
    instances: list[dict[str, Any]] = Field(description="as GET /api/v1/models shows them")


class ClusterStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: str = Field(description="single | static | kubernetes")
    leader: str | None = Field(description="the leader's pod id; null while there is none")
    term: int = Field(
        description="fencing term of the current leadership (Kubernetes: leaseTransitions + 1)"
    )
    pods: list[PodView]
    warnings: list[str] = Field(
        default_factory=list,
        description="problems to fix (Kubernetes mode: an RBAC rule the Role lacks)",
    )


@router.get("/control", dependencies=[READONLY])
async def control_state(services: ServicesDep) -> dict[str, Any]:
    """This pod's copy of the cluster's control state (presets, the catalog's API
    entries, moves): each document with the term and revision it was written in, and
    where it is kept (``store``: ``pods`` in static mode, ``kubernetes``: ConfigMaps).
    Every pod answers with its own copy, so an operator can compare them; ``ready``
    (the leader only) says whether it has adopted the newest copies of its term."""
    return services.control.view()


@router.get("/status", response_model=ClusterStatus, dependencies=[READONLY])
async def cluster_status(services: ServicesDep) -> dict[str, Any]:
    """Mode, leader, term and every pod this one knows (itself first)."""
    status = await services.view.status()
    status["warnings"] = [*status["warnings"], *services.control.warnings()]
    return status


class ScheduleVerdict(BaseModel):
    model_config = ConfigDict(extra="allow")

    strategy: str = Field(description="balanced | maximize-models")
    placed: bool = Field(description="false: no pod can take the load now")
    verdict: str = Field(description="one line for people")
    podId: str | None = None
    gpuIds: list[int] = Field(default_factory=list)
    needBytesPerGpu: int | None = None
    needSource: str | None = Field(None, description="profile | estimate | unknown | booking")
    freeAfterBytes: dict[str, int] = Field(
        default_factory=dict, description="GPU index -> bytes available after the load"
    )
    minFreeAfterBytes: int | None = None
    reasons: dict[str, str] = Field(
        default_factory=dict, description="pod id -> why it cannot take the load"
    )


@router.post("/schedule", response_model=ScheduleVerdict, dependencies=[READONLY])
async def cluster_schedule(body: LoadRequest, services: ServicesDep) -> dict[str, Any]:
    """Dry run: where ``POST /api/v1/models/load`` with this body (no ``podId``) would
    go now, and how much memory the chosen GPUs would keep free; nothing is loaded.
    On a single node the node itself is the only pod."""
    decision = await services.placement.decide(body)
    return decision.as_json()


@router.get("/memory-profiles", dependencies=[READONLY])
async def cluster_memory_profiles(services: ServicesDep) -> dict[str, Any]:
    """The merged memory profiles (one per model, length and GPU type, the newest
    measurement) with ``count`` (measurements of that key) and ``pods``; on a follower,
    the set the leader last pushed to it."""
    return services.profile_sync.merged()
