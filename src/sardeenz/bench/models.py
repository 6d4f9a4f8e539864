"""Benchmark data model of the seed (BenchmarkRun, BenchmarkScenario, BenchmarkMetrics).

Plain pydantic values with camelCase JSON, shared by the API, the runner and
the repository. The caps below bound what one request may ask of this node:
a benchmark is an operator tool, not a way to tie up the server for days or
open a million sockets, so absurd numbers are refused up front (422
``validation_error`` from the schema, 400 ``benchmark_too_large`` for the
run-wide sums) instead of failing half-way through.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import ConfigDict, Field, SecretStr
from pydantic.alias_generators import to_camel

from sardeenz.domain import CamelModel, StrictCamelModel

MAX_TOTAL_REQUESTS: Final = 100_000
"""Measured requests per scenario."""
MAX_WARMUP_REQUESTS: Final = 10_000
MAX_CONCURRENCY: Final = 1024
"""Parallel requests per scenario: one socket each."""
MAX_TOKENS: Final = 1_048_576
"""Input or output tokens per request (no engine serves a longer context today)."""
MAX_SCENARIOS: Final = 64
MAX_RUN_REQUESTS: Final = 1_000_000
"""Warm-up plus measured requests summed over a run's scenarios."""
MAX_RUN_CONCURRENCY: Final = 4096
"""Concurrency summed over scenarios that run at once (contention mode)."""
MAX_SLA_MS: Final = 3_600_000.0


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


class ScenarioSpec(StrictCamelModel):
    """One scenario as a client asks for it (``POST /api/benchmarks``)."""

    instance_id: str = Field(..., min_length=1, max_length=64)
    routing_mode: RoutingMode = RoutingMode.DIRECT
    input_tokens: int = Field(..., ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(..., ge=1, le=MAX_TOKENS)
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY)
    warmup_requests: int = Field(0, ge=0, le=MAX_WARMUP_REQUESTS)
    total_requests: int = Field(..., ge=1, le=MAX_TOTAL_REQUESTS)
    sla_threshold_ms: float | None = Field(
        None, gt=0, le=MAX_SLA_MS, description="end-to-end latency a request must meet to count"
    )


class BenchmarkCreate(StrictCamelModel):
    """Body of ``POST /api/benchmarks``."""

    name: str | None = Field(None, max_length=512)
    mode: RunMode = RunMode.ISOLATED
    scenarios: list[ScenarioSpec] = Field(..., min_length=1, max_length=MAX_SCENARIOS)
    api_key: SecretStr | None = Field(
        None,
        max_length=4096,
        description="inference API key for proxy-mode scenarios when keys are configured; "
        "used for this run only, never stored",
    )


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
