"""Admin API request metrics: count and latency by method, route template and status.

The admin API (``/api/*``, FastAPI) is the operator's path, not the hot one: a request
there costs milliseconds, so one dict update and one histogram observation after it is
noise. ``/v1`` never passes through here (gateway.py routes it to the proxy directly).

The ``route`` label is the matched route's template (``/api/v1/models/{instance_id}``),
never the raw path, so ids and names cannot grow the series count; a path no route matched
is ``unmatched``.
"""

from __future__ import annotations

from collections.abc import Iterator
from time import perf_counter

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sardeenz.asgi import ASGIApp, Message, Receive, Scope, Send
from sardeenz.proxy.metrics import REGISTRY, Histogram

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
UNMATCHED = "unmatched"


def route_template(scope: Scope) -> str:
    """The template of the route FastAPI matched for ``scope`` (set while it routed)."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path.startswith("/api/"):
        return path
    return UNMATCHED


class AdminApiStats:
    """Counters per (method, route, status) and a latency histogram per (method, route)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        self.latency: dict[tuple[str, str], Histogram] = {}

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        h = self.latency.get((method, route))
        if h is None:
            h = self.latency[(method, route)] = Histogram(BUCKETS)
        h.observe(seconds)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` (the admin API) with each request counted once it has answered.

        Latency runs to the end of the response: for the SSE endpoints, the stream's life.
        A request that raised before answering counts as 500 (what the client sees).
        """

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            t0 = perf_counter()
            status = 500

            async def send_status(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, send_status)
            finally:
                self.record(scope["method"], route_template(scope), status, perf_counter() - t0)

        return counted


STATS = AdminApiStats()


class _Collector(Collector):
    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sardeenz_api_requests",
            "Admin API (/api/*) requests answered, by method, route template and HTTP status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), n in sorted(STATS.requests.items()):
            requests.add_metric([method, route, str(status)], n)
        yield requests
        latency = HistogramMetricFamily(
            "sardeenz_api_request_duration_seconds",
            "Admin API request latency, received to last byte sent (SSE: the stream's life).",
            labels=["method", "route"],
        )
        for (method, route), h in sorted(STATS.latency.items()):
            latency.add_metric([method, route], h.buckets(), h.total)
        yield latency

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily("sardeenz_api_requests", "", labels=["method", "route", "status"])
        yield HistogramMetricFamily(
            "sardeenz_api_request_duration_seconds", "", labels=["method", "route"]
        )


REGISTRY.register(_Collector())
