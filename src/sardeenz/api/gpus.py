"""GPU inventory, per-GPU memory budget, and kvcached segments."""

from __future__ import annotations

from fastapi import APIRouter

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import CamelModel
from sardeenz.gpu.budget import GpuBudget
from sardeenz.gpu.inventory import GpuInfo
from sardeenz.gpu.kvcached import KvctlError, scan_segment_files
from sardeenz.security.policy import READONLY

router = APIRouter(prefix="/api/v1", tags=["gpus"])


class GpuReport(CamelModel):
    available: bool
    simulated: bool
    reason: str | None
    gpus: list[GpuInfo]
    budgets: list[GpuBudget]


class SegmentView(CamelModel):
    ipc: str
    limit_bytes: int
    used_bytes: int
    owned_by_this_node: bool


class SegmentReport(CamelModel):
    source: str
    segments: list[SegmentView]
    error: str | None = None


@router.get("/gpus", response_model=GpuReport, dependencies=[READONLY])
async def list_gpus(services: ServicesDep) -> GpuReport:
    """Every GPU with its processes, and the budget: baselines, others, KV cache total.

    KV cache total = GPU total - model baselines - other processes (seed).
    """
    inv = services.inventory
    gpus = await inv.snapshot()
    budgets = services.budgets.of(gpus)
    return GpuReport(
        available=inv.available,
        simulated=inv.simulated,
        reason=inv.reason,
        gpus=gpus,
        budgets=budgets,
    )


@router.get("/kvcached/segments", response_model=SegmentReport, dependencies=[READONLY])
async def kvcached_segments(services: ServicesDep) -> SegmentReport:
    """kvcached IPC segments (``kvctl list --json``; /dev/shm files when kvctl is absent)."""
    kvctl = services.kvctl
    error = None
    try:
        found = await kvctl.list_segments()
        source = "kvctl" if kvctl.available() else "shm"
    except KvctlError as exc:
        found, source, error = scan_segment_files(), "shm", str(exc)
    segments = [
        SegmentView(
            ipc=s.ipc,
            limit_bytes=s.limit_bytes,
            used_bytes=s.used_bytes,
            owned_by_this_node=services.segments.owns(s.ipc),
        )
        for s in found
    ]
    return SegmentReport(source=source, segments=segments, error=error)
