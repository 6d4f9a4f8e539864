"""Memory profiles and fit checks: what the API exchanges about them.

The persisted ``MemoryProfile`` lives in ``sardeenz.store.records`` (store
imports no service package); it is re-exported here for the service's callers.
Memory in profiles is GiB (vLLM's log unit); fit verdicts are in bytes, so
nobody has to guess between GB and GiB when comparing against free memory.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from sardeenz.domain import CamelModel, GpuId, StrictCamelModel
from sardeenz.safetext import TEXT_WHITESPACE, first_unsafe
from sardeenz.store.records import MemoryProfile

__all__ = [
    "FitRequest",
    "FitSource",
    "FitVerdict",
    "GpuFit",
    "MemoryBreakdown",
    "MemoryProfile",
    "ProfileCreate",
]

_GIB_MAX = 1_000_000.0  # a petabyte of GPU memory per profile is a typo, not a model

Gib = Annotated[float, Field(ge=0, le=_GIB_MAX)]


class ProfileCreate(StrictCamelModel):
    """Body of ``POST /api/memory/profiles``.

    Three ways to create a profile:

    * ``instanceId``: from that running instance's parsed ``memoryMetrics``
      and its GPU (name and total from the inventory);
    * ``modelPath`` without memory figures: from the newest active instance
      serving that model path (404 ``model_not_loaded`` when there is none);
    * ``modelPath``, ``maxTokens`` and at least ``weightsMemoryGib`` and
      ``kvCacheAvailableGib``: stored as given (e.g. figures measured elsewhere).

    Explicit fields always override what the instance reports.
    """

    instance_id: str | None = Field(None, min_length=1, max_length=64)
    gpu_index: GpuId | None = Field(
        None, description="which of the instance's GPUs names the profile"
    )
    profile_name: str | None = Field(None, min_length=1, max_length=512)
    model_path: str | None = Field(None, min_length=1, max_length=4096)
    max_tokens: int | None = Field(None, ge=1, le=100_000_000)
    total_gpu_memory_gib: Gib | None = None
    weights_memory_gib: Gib | None = None
    cuda_graphs_gib: Gib | None = None
    overhead_memory_gib: Gib | None = None
    kv_cache_available_gib: Gib | None = None
    kv_cache_per_request_mib: Annotated[float, Field(ge=0, le=_GIB_MAX * 1024)] | None = None
    gpu_name: str | None = Field(None, min_length=1, max_length=256)
    gpu_total_memory_gib: Gib | None = None
    comments: str | None = Field(None, max_length=10_000)
    created_by: str | None = Field(None, max_length=256)

    @field_validator("profile_name", "model_path", "gpu_name", "created_by")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        # Printed by `sardeenz profiles ls`, in logs and on the dashboard: an ESC or BEL
        # stored here would drive the terminal of whoever lists profiles.
        bad = first_unsafe(value) if value else None
        if bad is not None:
            raise ValueError(f"contains a control character ({bad})")
        return value

    @field_validator("comments")
    @classmethod
    def _free_text(cls, value: str | None) -> str | None:
        bad = first_unsafe(value, allowed=TEXT_WHITESPACE) if value else None
        if bad is not None:
            raise ValueError(f"contains a control character ({bad}); line breaks and tabs only")
        return value


class FitRequest(StrictCamelModel):
    """Body of ``POST /api/memory/profiles/check``: will this model fit, here, now?"""

    model_path: str = Field(..., min_length=1, max_length=4096)
    max_tokens: int | None = Field(
        None, ge=1, le=100_000_000, description="context length (vLLM --max-model-len)"
    )
    gpu_ids: list[GpuId] | None = Field(None, max_length=64)
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    gpu_memory_limit: float | None = Field(
        None, gt=0, le=4096, description="GB per GPU the load would book, as in a load request"
    )
    kv_cache_dtype: str = Field("auto", min_length=1, max_length=32)
    dtype: str = Field("auto", min_length=1, max_length=32)


FitSource = Literal["profile", "estimate", "unknown"]


class MemoryBreakdown(CamelModel):
    """Bytes per GPU a model needs to start, by part."""

    weights_bytes: int
    kv_cache_bytes: int = Field(description="one request of maxTokens (vLLM's start-up minimum)")
    overhead_bytes: int = Field(
        description="CUDA graphs, activations, other (profile or allowance)"
    )


class GpuFit(CamelModel):
    """One GPU's answer: needed vs free after the per-GPU reserve."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    reserved_bytes: int
    available_bytes: int = Field(description="free - reserve, never negative")
    needed_bytes: int | None
    fits: bool | None


class FitVerdict(CamelModel):
    """The answer of a fit check (API body, and what the load path acts on).

    ``fits`` is None when nothing is known about the model (no profile, and
    ``modelPath`` is not a local directory that can be sized): a caller
    should not refuse a load on that basis.
    """

    model_path: str
    fits: bool | None
    source: FitSource
    reason: str
    profile_id: str | None = None
    profile_name: str | None = None
    max_tokens: int | None = None
    tensor_parallel_size: int = 1
    needed_bytes_per_gpu: int | None = None
    breakdown: MemoryBreakdown | None = None
    reserved_bytes_per_gpu: int
    chosen_gpu_ids: list[int] = Field(default_factory=list)
    gpus: list[GpuFit] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
