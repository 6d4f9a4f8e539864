"""Per-model traffic figures of one sampling interval, computed from request-log records.

Why from the records and not from the proxy's latency histogram: the histogram's
buckets are wide (0.1 s to 0.25 s is one bucket), and a quantile read from a
bucket is interpolated inside it, so every model whose requests take between
100 and 250 ms showed the same p50 (175 ms) and p95 (243 ms) on the dashboard.
The request log holds each request's own latency: the quantiles here are the
requests' own figures. And in a cluster the records are every pod's, each
request once (the pod it entered records it), where summing the pods'
histograms would count a forwarded request twice.

Pure functions on plain values: the sampler (metrics_history.py) calls them, and so
does each instance's ``ResourceMetrics`` (telemetry/resources.py) for its latencies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sardeenz.proxy.reqlog import Record


def quantile(sorted_values: list[float], q: float) -> float | None:
    """The ``q`` quantile, linear between the two nearest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    frac = pos - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * frac


@dataclass
class Tally:
    """What one interval saw of one model (on one pod, or on all of them)."""

    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)

    def add(self, r: Record) -> None:
        self.requests += 1
        if r.status >= 500:
            self.errors += 1
        elif r.status < 400:
            self.latencies.append(r.latency)

    def quantiles(self) -> tuple[float | None, float | None]:
        """p50 and p95 of the answered requests' latencies (status below 400), seconds."""
        values = sorted(self.latencies)
        return quantile(values, 0.5), quantile(values, 0.95)


def counts(record: Record) -> bool:
    """Does a record count in a model's traffic?

    A request refused before it named a model the node knows (400, 403, 404, a
    client gone before routing) has no instance and a status below 500: it is the
    client's mistake, not the model's traffic. One that waited for a model and got
    a 503 is the model's error.
    """
    return record.instance_id is not None or record.status >= 500


def tally(records: Iterable[Record]) -> tuple[dict[str, Tally], dict[tuple[str, str], Tally]]:
    """Per model (every pod), and per (model, pod)."""
    by_model: dict[str, Tally] = {}
    by_pod: dict[tuple[str, str], Tally] = {}
    for r in records:
        if not counts(r):
            continue
        t = by_model.get(r.model)
        if t is None:
            t = by_model[r.model] = Tally()
        t.add(r)
        if r.pod is not None:
            key = (r.model, r.pod)
            tp = by_pod.get(key)
            if tp is None:
                tp = by_pod[key] = Tally()
            tp.add(r)
    return by_model, by_pod


def by_instance(records: Iterable[Record]) -> dict[str, Tally]:
    """Per instance id: what its requests in ``records`` came to (unrouted ones left out)."""
    out: dict[str, Tally] = {}
    for r in records:
        if r.instance_id is None:
            continue
        t = out.get(r.instance_id)
        if t is None:
            t = out[r.instance_id] = Tally()
        t.add(r)
    return out
