"""``GET /api/cluster/status``: this pod's view of the cluster (answered by every pod)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from sardeenz.api.deps import ServicesDep
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


@router.get("/status", response_model=ClusterStatus, dependencies=[READONLY])
async def cluster_status(services: ServicesDep) -> dict[str, Any]:
    """Mode, leader, term and every pod this one knows (itself first)."""
    return await services.cluster.status()
