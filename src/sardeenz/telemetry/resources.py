"""The seed's ``ResourceMetrics`` per instance (``GET /api/v1/models/{id}/metrics``).

Seed fields: ``modelId``, ``timestamp``, ``gpuMemoryUsed`` (GB), ``requestCount``,
``activeConnections``, ``avgResponseTime`` (ms; the seed defines it as the p50) and
``p95ResponseTime`` (ms). Where they come from, without any work per ``/v1`` request:

* memory: the node sample (``telemetry.node``), exact bytes kept beside the seed's GB;
* ``activeConnections``: the instance's requests in flight (``proxy.inflight``, exact);
* ``requestCount`` and the latencies: the proxy's counters of the instance's served name
  (``proxy.metrics``), so instances serving the same name share them. Latencies are
  estimated from the duration histogram as Prometheus' ``histogram_quantile`` does
  (linear within a bucket); None before the first request.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sardeenz.domain import CamelModel, ModelInstance
from sardeenz.proxy.metrics import Histogram, ModelMetrics

GB = 10**9
"""The seed's GB (decimal), as ``gpuMemoryLimit`` uses it."""


class ResourceMetrics(CamelModel):
    model_id: str = Field(description="the instance's id (the seed's modelId)")
    served_model_name: str
    status: str
    timestamp: datetime
    gpu_memory_used: float = Field(description="GB (10^9 bytes), the seed's unit")
    gpu_memory_used_bytes: int = Field(description="exact bytes, summed over its GPUs")
    gpu_memory_used_bytes_by_gpu: dict[int, int]
    request_count: int = Field(description="requests answered for its served name")
    active_connections: int = Field(description="its requests in flight now")
    avg_response_time: float | None = Field(description="ms, p50 (as the seed defines it)")
    p95_response_time: float | None = Field(description="ms, p95")


def quantile(h: Histogram, q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``h`` in its unit, as ``histogram_quantile`` estimates it.

    Linear interpolation inside the bucket that holds the rank; the lowest bucket starts
    at 0; a rank in the ``+Inf`` bucket answers the highest finite bound. None when empty.
    """
    buckets = h.buckets()
    total = buckets[-1][1]
    if total == 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cumulative in buckets:
        if le == "+Inf":
            return lower
        upper = float(le)
        if cumulative >= rank:
            inside = cumulative - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = upper, cumulative
    return lower


def resource_metrics(
    inst: ModelInstance,
    held: dict[int, int],
    at: datetime,
    stats: ModelMetrics | None,
    in_flight: int,
) -> ResourceMetrics:
    """Assemble one instance's ``ResourceMetrics`` (pure)."""
    used = sum(held.values())
    p50 = quantile(stats.duration, 0.5) if stats is not None else None
    p95 = quantile(stats.duration, 0.95) if stats is not None else None
    return ResourceMetrics(
        model_id=inst.id,
        served_model_name=inst.served_model_name,
        status=inst.status.value,
        timestamp=at,
        gpu_memory_used=round(used / GB, 3),
        gpu_memory_used_bytes=used,
        gpu_memory_used_bytes_by_gpu=dict(sorted(held.items())),
        request_count=sum(stats.requests.values()) if stats is not None else 0,
        active_connections=in_flight,
        avg_response_time=round(p50 * 1000, 3) if p50 is not None else None,
        p95_response_time=round(p95 * 1000, 3) if p95 is not None else None,
    )
