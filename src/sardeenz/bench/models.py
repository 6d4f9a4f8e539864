"""What a client asks of the benchmark runner, and how much it may ask.

The persisted records (BenchmarkRun, BenchmarkScenario, BenchmarkMetrics and
their enums) live in ``sardeenz.store.records`` (store imports no service
package) and are re-exported here for the runner's callers.

The caps below bound what one request may ask of this node: a benchmark is
an operator tool, not a way to tie up the server for days or open a million
sockets, so absurd numbers are refused up front (422
``validation_error`` from the schema, 400 ``benchmark_too_large`` for the
run-wide sums) instead of failing half-way through.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field, SecretStr

from sardeenz.domain import StrictCamelModel
from sardeenz.store.records import (
    BenchmarkMetrics,
    BenchmarkRun,
    BenchmarkScenario,
    PromptSource,
    RoutingMode,
    RunMode,
    RunStatus,
    ScenarioStatus,
)

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_RUN_CONCURRENCY",
    "MAX_RUN_REQUESTS",
    "MAX_SCENARIOS",
    "MAX_SLA_MS",
    "MAX_TOKENS",
    "MAX_TOTAL_REQUESTS",
    "MAX_WARMUP_REQUESTS",
    "BenchmarkCreate",
    "BenchmarkMetrics",
    "BenchmarkRun",
    "BenchmarkScenario",
    "PromptSource",
    "RoutingMode",
    "RunMode",
    "RunStatus",
    "ScenarioSpec",
    "ScenarioStatus",
]

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
