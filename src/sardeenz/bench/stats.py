"""Benchmark statistics: per-request samples in, the seed's BenchmarkMetrics out.

Percentiles use numpy's default ("linear", type 7 of Hyndman & Fan) method,
computed the same way numpy computes it (virtual index ``(n - 1) * p/100``,
numpy's two-sided lerp), so a number shown here equals what an operator gets
from ``numpy.percentile`` on the same samples. numpy itself is not imported:
it is a test dependency only, and a few hundred thousand floats sort fast
enough in pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sardeenz.store.records import BenchmarkMetrics

PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of already sorted values, as ``numpy.percentile``.

    Raises ValueError for an empty sequence or ``p`` outside [0, 100].
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    virtual = (n - 1) * (p / 100.0)
    lo = math.floor(virtual)
    if lo >= n - 1:
        return float(sorted_values[-1])
    t = virtual - lo
    a, b = float(sorted_values[lo]), float(sorted_values[lo + 1])
    diff = b - a
    # numpy's _lerp: from the nearer end, which keeps the result monotonic in p.
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


@dataclass(frozen=True, slots=True)
class Summary:
    min: float
    max: float
    avg: float
    p50: float
    p90: float
    p95: float
    p99: float


def summarize(values: Iterable[float]) -> Summary | None:
    """min/max/avg and the seed's percentiles; None when there are no values."""
    data = sorted(values)
    if not data:
        return None
    p50, p90, p95, p99 = (percentile(data, p) for p in PERCENTILES)
    return Summary(
        min=data[0],
        max=data[-1],
        avg=math.fsum(data) / len(data),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
    )


@dataclass(slots=True)
class RequestSample:
    """What one benchmark request measured. Times are ``time.perf_counter()`` seconds.

    ``completion_tokens`` and ``prompt_tokens`` come from the engine's ``usage``
    (never from counting chunks: an engine may put several tokens in one chunk).
    """

    started: float
    ended: float
    ok: bool
    first_token_at: float | None = None
    last_token_at: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None

    @property
    def ttft_ms(self) -> float | None:
        if self.first_token_at is None:
            return None
        return (self.first_token_at - self.started) * 1000.0

    @property
    def e2e_ms(self) -> float:
        return (self.ended - self.started) * 1000.0

    @property
    def tps(self) -> float | None:
        """Decode rate after the first token: (tokens - 1) / (last - first token time)."""
        if (
            self.completion_tokens < 2
            or self.first_token_at is None
            or self.last_token_at is None
            or self.last_token_at <= self.first_token_at
        ):
            return None
        return (self.completion_tokens - 1) / (self.last_token_at - self.first_token_at)


def _stats(prefix: str, summary: Summary | None) -> dict[str, float | None]:
    keys = ("min", "max", "avg", "p50", "p90", "p95", "p99")
    if summary is None:
        return {f"{prefix}_{k}": None for k in keys}
    return {f"{prefix}_{k}": getattr(summary, k) for k in keys}


def scenario_metrics(
    scenario_id: str, samples: Sequence[RequestSample], sla_threshold_ms: float | None
) -> BenchmarkMetrics | None:
    """The seed's metrics over a scenario's measured requests (warm-up excluded).

    * ttft/e2e/tps statistics over the successful requests;
    * goodput: successful requests whose end-to-end latency is at most
      ``sla_threshold_ms`` (every successful request when there is no SLA);
      the percentage is of all measured requests, failed ones included;
    * throughput over the measured wall time, from the first request sent to
      the last one finished.

    None when no request succeeded: there is nothing to summarise.
    """
    good = [s for s in samples if s.ok and s.first_token_at is not None]
    if not good:
        return None
    ttft = summarize(s.ttft_ms for s in good if s.ttft_ms is not None)
    e2e = summarize(s.e2e_ms for s in good)
    tps = summarize(t for s in good if (t := s.tps) is not None)
    assert ttft is not None
    assert e2e is not None
    if sla_threshold_ms is None:
        goodput = len(good)
    else:
        goodput = sum(1 for s in good if s.e2e_ms <= sla_threshold_ms)
    wall = max(s.ended for s in samples) - min(s.started for s in samples)
    tokens = sum(s.completion_tokens for s in good)
    return BenchmarkMetrics.model_validate(
        {
            "scenario_id": scenario_id,
            **_stats("ttft", ttft),
            **_stats("tps", tps),
            **_stats("e2e", e2e),
            "goodput_count": goodput,
            "goodput_percent": 100.0 * goodput / len(samples),
            "requests_per_second": len(good) / wall if wall > 0 else 0.0,
            "tokens_per_second_total": tokens / wall if wall > 0 else 0.0,
        }
    )
