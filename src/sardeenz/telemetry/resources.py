"""The seed's ``ResourceMetrics`` per instance (``GET /api/v1/models/{id}/metrics``).

Seed fields: ``modelId``, ``timestamp``, ``gpuMemoryUsed`` (GB), ``requestCount``,
``activeConnections``, ``avgResponseTime`` (ms; the seed defines it as the p50) and
``p95ResponseTime`` (ms). Where they come from, without any work per ``/v1`` request:

* memory: the node sample (``telemetry.node``), exact bytes kept beside the seed's GB;
* ``activeConnections``: the instance's requests in flight (``proxy.inflight``, exact);
* ``requestCount``: the proxy's counter of the instance's served name
  (``proxy.metrics``), so instances serving the same name share it;
* the latencies: p50 and p95 of the instance's own answered requests still in the
  request log (the node's request book: its newest ``SARDEENZ_REQUEST_LOG_SIZE``
  records of every pod), the figures the Requests page lists. Not the proxy's
  duration histogram: a quantile read from its wide buckets (0.1 to 0.25 s is one)
  is interpolated inside the bucket, so every model between 100 and 250 ms read
  p50 175 ms / p95 243 ms (issue 25 item 1). None before its first answered request.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sardeenz.domain import CamelModel, ModelInstance
from sardeenz.proxy.metrics import ModelMetrics
from sardeenz.telemetry.traffic import Tally

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


def resource_metrics(
    inst: ModelInstance,
    held: dict[int, int],
    at: datetime,
    stats: ModelMetrics | None,
    in_flight: int,
    answered: Tally | None,
) -> ResourceMetrics:
    """Assemble one instance's ``ResourceMetrics`` (pure); ``answered``: its requests in
    the request log (``traffic.by_instance``), None when it has none there."""
    used = sum(held.values())
    p50, p95 = answered.quantiles() if answered is not None else (None, None)
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
