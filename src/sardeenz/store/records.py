"""The persisted schemas: what the repositories under ``store/`` read and write.

They live here, below the services, so dependencies point one way: ``store``
imports no service package (memory, bench, runtime, ...), and the services
import their persisted records from here. Request bodies and verdicts that are
never stored stay with their service (``memory.models``, ``bench.models``).

``MemoryProfile`` keeps the seed's JSON names exactly (note the seed spells
them ``...Gib``/``...Mib``: ``totalGpuMemoryGib``, ``kvCachePerRequestMib``);
the benchmark records are the seed's BenchmarkRun, BenchmarkScenario and
BenchmarkMetrics with camelCase JSON.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from sardeenz.domain import CamelModel, EngineKind, StrictCamelModel


class MemoryProfile(CamelModel):
    """MemoryProfile of the seed: what a model took on one GPU at one context length."""

    id: str
    profile_name: str
    model_path: str
    max_tokens: int
    total_gpu_memory_gib: float
    weights_memory_gib: float
    cuda_graphs_gib: float
    overhead_memory_gib: float
    kv_cache_available_gib: float
    kv_cache_per_request_mib: float | None = None
    gpu_name: str | None = None
    gpu_total_memory_gib: float | None = None
    comments: str | None = None
    created_by: str | None = None
    created_at: datetime
    updated_at: datetime | None = None


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.FAILED)


class ScenarioStatus(StrEnum):
    """The seed's scenario states plus ``cancelled`` (a cancelled run's unfinished scenarios)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunMode(StrEnum):
    ISOLATED = "isolated"
    """Scenarios one after another: each measures its instance alone."""
    CONTENTION = "contention"
    """All scenarios at once: instances measured while competing for the node."""


class RoutingMode(StrEnum):
    DIRECT = "direct"
    """Straight to the engine's port: the engine alone."""
    PROXY = "proxy"
    """Through Sardeenz's own ``/v1``: what clients see, proxy included."""


class PromptSource(StrEnum):
    TOKENIZER = "tokenizer"
    """Prompt lengths checked with the engine's ``POST /tokenize``: exact."""
    APPROXIMATE = "approximate"
    """No tokenizer endpoint: one common English word per token, roughly right."""


def _metric_alias(name: str) -> str:
    """camelCase as the seed spells it: ``e2e_p50`` -> ``e2eP50`` (not ``e2EP50``)."""
    return to_camel(name).replace("e2E", "e2e")


class BenchmarkMetrics(CamelModel):
    """BenchmarkMetrics of the seed. Milliseconds for ttft/e2e, tokens per second for tps.

    ``tps*`` is each request's decode rate: output tokens after the first,
    divided by the time from the first to the last token. It is None when no
    successful request produced two or more tokens.
    """

    model_config = ConfigDict(
        alias_generator=_metric_alias, populate_by_name=True, serialize_by_alias=True
    )

    scenario_id: str
    ttft_min: float
    ttft_max: float
    ttft_avg: float
    ttft_p50: float
    ttft_p90: float
    ttft_p95: float
    ttft_p99: float
    tps_min: float | None
    tps_max: float | None
    tps_avg: float | None
    tps_p50: float | None
    tps_p90: float | None
    tps_p95: float | None
    tps_p99: float | None
    e2e_min: float
    e2e_max: float
    e2e_avg: float
    e2e_p50: float
    e2e_p90: float
    e2e_p95: float
    e2e_p99: float
    goodput_count: int
    goodput_percent: float
    requests_per_second: float
    tokens_per_second_total: float


class BenchmarkScenario(CamelModel):
    """BenchmarkScenario of the seed, plus what an operator needs to read the result."""

    id: str
    run_id: str
    instance_id: str
    routing_mode: RoutingMode
    model_path: str
    model_name: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    warmup_requests: int
    total_requests: int
    sla_threshold_ms: float | None = None
    status: ScenarioStatus
    prompt_source: PromptSource | None = None
    successful_requests: int = 0
    failed_requests: int = 0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error_message: str | None = None
    metrics: BenchmarkMetrics | None = None


class BenchmarkRun(CamelModel):
    """BenchmarkRun of the seed, with its scenarios (and their metrics) inline."""

    id: str
    name: str | None = None
    status: RunStatus
    mode: RunMode
    kvcached_enabled: bool
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error_message: str | None = None
    total_requests: int
    successful_requests: int = 0
    failed_requests: int = 0
    duration_seconds: float | None = None
    scenarios: list[BenchmarkScenario] = Field(default_factory=list)


class CatalogEntry(StrictCamelModel):
    """One on-demand model of the catalog (its name, the served model name, is the key).

    The fields a load request also has carry only their types here: their limits
    are the load request's (``catalog.validation`` checks an entry by building the
    ``LoadRequest`` it would start with, then the engine adapter's argument check),
    so an entry is accepted exactly when the load it stands for would be.
    """

    model_path: str = Field(
        "",
        description="what the engine loads (HF id or folder); for engine external, the "
        "model name that server serves (requests are rewritten to it). Required except "
        "for an adapter (adapterOf)",
    )
    engine: EngineKind | Literal["external"] | None = Field(
        None, description="vllm or sim (started here), or external: a server at url"
    )
    url: str | None = Field(
        None,
        max_length=2048,
        description="engine external only: the server's base URL, http://host:port "
        "(optionally with a path and /v1)",
    )
    api_key_env: str | None = Field(
        None,
        max_length=256,
        description="engine external only: environment variable holding the server's API key",
    )
    api_key_file: str | None = Field(
        None,
        max_length=4096,
        description="engine external only: file holding the server's API key",
    )
    aliases: list[str] = Field(default_factory=list, max_length=64)
    extra_args: list[str] = Field(default_factory=list)
    gpu_ids: list[int] | None = None
    gpu_memory_limit: float | None = None
    tensor_parallel_size: int = 1
    sleep_level: Literal[0, 1, 2] = Field(
        0, description="0: never sleep; 1: weights to CPU RAM; 2: discard them"
    )
    idle_sleep_seconds: float | None = Field(
        None, gt=0, description="sleep after this long with no request (needs sleepLevel 1 or 2)"
    )
    idle_unload_seconds: float | None = Field(
        None, gt=0, description="unload after this long with no request"
    )
    pinned: bool = Field(False, description="never slept, unloaded or evicted for idleness")
    warmup: bool = Field(
        False,
        description="after a wake, send the engine a 1-token request before traffic is "
        "released (vLLM's first request after a wake is several times slower); needs "
        "sleepLevel 1 or 2",
    )
    warmup_prompt: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="the warm-up request's prompt (needs warmup: true; default a short one)",
    )
    preload: bool = Field(False, description="start when the server starts")
    lora_slots: int | None = Field(
        None,
        ge=1,
        le=256,
        description="a base model for LoRA adapters: how many adapters an instance holds at "
        "once (vLLM's --max-loras; starts the engine with --enable-lora)",
    )
    max_lora_rank: int | None = Field(
        None,
        description="with loraSlots: the largest adapter rank its instances accept (vLLM's "
        "--max-lora-rank: 1, 8, 16, 32, 64, 128, 256, 320 or 512; default 16)",
    )
    adapter_of: str | None = Field(
        None,
        max_length=512,
        description="this entry is a LoRA adapter of that catalog entry (which has loraSlots); "
        "loaded into one of its instances on the first request",
    )
    adapter_path: str | None = Field(
        None,
        max_length=4096,
        description="with adapterOf: the folder holding the PEFT adapter (adapter_config.json "
        "and its weights), as the engine's host sees it",
    )
