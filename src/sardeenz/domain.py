"""The data model of the seed, as pydantic models with camelCase JSON.

These are plain values: no I/O, no behaviour beyond validation. Services own
the state; routers serialise these with ``by_alias=True``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


def utcnow() -> datetime:
    return datetime.now(UTC)


class CamelModel(BaseModel):
    """Accepts snake_case or camelCase, emits camelCase."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )


class StrictCamelModel(CamelModel):
    """A request body: like CamelModel, and unknown fields are an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class InstanceStatus(StrEnum):
    """Lifecycle states of the seed. An unloaded instance leaves the registry."""

    STARTING = "starting"
    ACTIVE = "active"
    SLEEPING = "sleeping"
    STOPPING = "stopping"
    FAILED = "failed"


LoadPhase = Literal["spawned", "loading weights", "KV cache", "CUDA graphs"]
"""Where a starting engine is, in order: taken from its log (``engines/logparse.py``)."""


class EngineKind(StrEnum):
    VLLM = "vllm"
    SIM = "sim"


class MemoryMetrics(CamelModel):
    """ModelMemoryMetrics of the seed, parsed from the engine's own log lines.

    Every field is optional: the CPU backend, for one, reports no CUDA graphs.
    """

    weights_memory_gib: float | None = Field(None, alias="weightsMemoryGiB")
    cuda_graph_memory_gib: float | None = Field(None, alias="cudaGraphMemoryGiB")
    kv_cache_available_gib: float | None = Field(None, alias="kvCacheAvailableGiB")
    kv_cache_per_request_mib: float | None = Field(None, alias="kvCachePerRequestMiB")
    max_model_len: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    engine_init_seconds: float | None = None
    weights_load_seconds: float | None = None


ExtraArg = Annotated[str, Field(max_length=4096)]

GpuId = Annotated[int, Field(strict=True, ge=0, le=1023)]
"""A GPU index in a request: a JSON integer. Strict, because lax mode turns ``false``
into GPU 0 and ``"1"`` into GPU 1, and a GPU id is never a boolean or a string."""


class LoadRequest(StrictCamelModel):
    """Body of ``POST /api/v1/models/load``."""

    model_path: str = Field(..., min_length=1, max_length=4096)
    engine: EngineKind | None = None
    served_model_name: str | None = Field(None, min_length=1, max_length=512)
    display_name: str | None = Field(None, max_length=512)
    gpu_ids: list[GpuId] | None = Field(None, max_length=64)
    gpu_memory_limit: float | None = Field(None, gt=0, le=4096, description="GB per GPU")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    enable_sleep_mode: bool = False
    extra_args: list[ExtraArg] = Field(default_factory=list, max_length=256)
    pod_id: str | None = Field(
        None,
        max_length=253,
        description="cluster: the pod to load on (an id from GET /api/cluster/status); "
        "default this pod",
    )
    gpu_type: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="cluster placement without podId: only GPUs whose name contains this "
        "(case-insensitive) or matches it as a glob, e.g. `A100` or `*A100*80GB`",
    )
    min_vram_gib: float | None = Field(
        None,
        alias="minVramGiB",  # the unit as written everywhere else, not to_camel's "Gib"
        gt=0,
        le=100_000,
        description="cluster placement without podId: only GPUs with at least this much "
        "memory in total (GiB)",
    )
    force: bool = Field(
        False,
        description="skip memory checks (e.g. the host-memory check of a CPU-build vLLM load); "
        "the engine may then fail to start if memory really is short",
    )


class ManagedBy(CamelModel):
    """What restores an instance after an unload (cluster/stewards.py)."""

    kind: Literal["preset", "catalog"] = Field(
        description="preset: the applied preset declares its served name (the leader "
        "loads it again); catalog: its served name is a catalog entry (the next request "
        "starts it again)"
    )
    name: str = Field(description="the preset's name, or the catalog entry's")


class ModelInstance(CamelModel):
    """ModelInstance of the seed (runtime state), plus what operators need to debug."""

    model_config = ConfigDict(validate_assignment=True)

    id: str
    model_path: str
    served_model_name: str
    display_name: str
    engine: EngineKind
    status: InstanceStatus
    port: int
    process_id: int | None = None
    engine_core_pid: int | None = None
    gpu_memory_limit: float | None = None
    gpu_ids: list[int] = Field(default_factory=list)
    tensor_parallel_size: int = 1
    kvcached_enabled: bool = False
    kvcached_ipc_name: str | None = None
    gpu_memory_utilization: float | None = None
    reserved_bytes_per_gpu: int | None = None
    memory_baseline_by_gpu: dict[int, float] | None = Field(
        None, description="GB per GPU index, measured when the instance turned active"
    )
    memory_baseline_bytes_by_gpu: dict[int, int] | None = Field(
        None, description="the same baseline in exact bytes (what budgets are computed from)"
    )
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    stopped_at: datetime | None = None
    error_message: str | None = None
    load_phase: LoadPhase | None = Field(
        None,
        description="while starting: spawned, loading weights, KV cache or CUDA graphs (from "
        "the engine's log lines); null in every other status",
    )
    memory_metrics: MemoryMetrics | None = None
    sleep_mode_enabled: bool = False
    sleep_level: int | None = None
    slept_at: datetime | None = None
    extra_args: list[str] = Field(default_factory=list)
    log_file: str | None = None
    warnings: list[str] = Field(default_factory=list)
    simulated: bool = False
    engine_device: Literal["cuda", "cpu"] | None = Field(
        None,
        description="where a vLLM engine computes: cuda, or cpu for vLLM's CPU build "
        "(no sleep mode, host memory); None for the simulated engine",
    )
    pod_id: str | None = Field(
        None,
        description="cluster mode: the pod that runs the instance (set in lists and in the "
        "leader's answers about another pod's instance); null on a single node",
    )
    managed_by: ManagedBy | None = Field(
        None,
        description="the applied preset or the catalog entry that brings the instance back "
        "after an unload; null when nothing does (set in the admin API's answers)",
    )
    on_demand: bool = Field(
        False,
        description="started by a request for a catalog model (load on demand), not by an "
        "operator's load or a preset: the cluster leader may reduce surplus on-demand "
        "copies of one model to one (cluster/ondemand_surplus.py)",
    )


class SleepRequest(StrictCamelModel):
    """Body of ``POST /api/v1/models/{id}/sleep`` (``level`` may also be a query parameter)."""

    level: int = Field(1, ge=1, le=2, description="1: offload weights to CPU; 2: discard them")
    force: bool = Field(
        False,
        description="cut the requests still in flight after SARDEENZ_SLEEP_DRAIN_SECONDS "
        "(their clients get an error with code model_sleeping) instead of answering 409 "
        "requests_in_flight",
    )
