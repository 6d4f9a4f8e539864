"""Prometheus metrics of the proxy, in a registry this module owns.

``REGISTRY`` is the process's registry for Sardeenz metrics (other services
may register their own collectors on it, process/platform/GC collectors are
already there); ``render_metrics()`` is what the app serves at ``/metrics``
and ``/api/v1/metrics``.

Why not plain ``prometheus_client`` Counter/Histogram objects: on the hot path
they cost 2-7 us per update on this class of machine (a lock, label checks, a
Python loop over buckets), about 30 us per request for the five updates a
request makes. Here each model has a ``ModelMetrics`` of plain ints and lists,
updated lock-free from the event loop thread (a histogram observation is one
``bisect`` and two additions), and a custom collector turns them into metric
families at scrape time. A scrape from another thread may see a histogram a
few observations apart from its count; Prometheus tolerates that, and it
never loses an update.

The ``model`` label only ever takes served names the routing table knows
(plus the fixed values below), so a client sending random model names cannot
blow up the series count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sardeenz.domain import InstanceStatus
from sardeenz.proxy.routing import InstanceView

UNKNOWN_MODEL = "_unknown"
"""``model`` label of requests that named no model the table knows (400/404)."""
DIRECT_MODEL = "_direct"
"""``model`` label of ``/api/direct/{port}/...`` requests."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TTFB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
OVERHEAD_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)

_STATUSES = tuple(s.value for s in InstanceStatus)


_LE_CACHE: dict[tuple[float, ...], tuple[str, ...]] = {}


def _le_labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    labels = _LE_CACHE.get(bounds)
    if labels is None:
        labels = _LE_CACHE[bounds] = tuple(
            floatToGoString(b)  # type: ignore[no-untyped-call]
            for b in bounds
        )
    return labels


class Histogram:
    """A lock-free histogram: bucket counts (non-cumulative) and a sum."""

    __slots__ = ("_bounds", "_labels", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._labels = _le_labels(bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last, as Prometheus wants them."""
        out: list[tuple[str, float]] = []
        acc = 0
        counts = list(self.counts)
        for label, n in zip(self._labels, counts, strict=False):
            acc += n
            out.append((label, acc))
        out.append(("+Inf", acc + counts[-1]))
        return out


class ModelMetrics:
    """Everything the proxy records for one ``model`` label value."""

    __slots__ = ("duration", "in_flight", "model", "overhead", "requests", "ttfb")

    def __init__(self, model: str) -> None:
        self.model = model
        self.duration = Histogram(DURATION_BUCKETS)
        self.ttfb = Histogram(TTFB_BUCKETS)
        self.overhead = Histogram(OVERHEAD_BUCKETS)
        self.in_flight = 0
        self.requests: dict[int, int] = {}

    def count(self, status: int) -> None:
        requests = self.requests
        requests[status] = requests.get(status, 0) + 1


class LaneCounters:
    """Connections seen by the fast lane (proxy/fastlane.py), how many it handed
    over, and requests the express path (proxy/express.py) answered."""

    __slots__ = ("accepted", "express", "handed_over")

    def __init__(self) -> None:
        self.accepted = 0
        self.handed_over = 0
        self.express = 0


LANE = LaneCounters()

_by_model: dict[str, ModelMetrics] = {}
_instances: dict[str, tuple[str, str]] = {}
"""instance id -> (served name, status) for ``sardeenz_instance_status``."""


def for_model(model: str) -> ModelMetrics:
    """The metrics of ``model`` (created on first use).

    Callers must pass a served name the routing table knows, or one of the
    fixed ``UNKNOWN_MODEL`` / ``DIRECT_MODEL`` values.
    """
    m = _by_model.get(model)
    if m is None:
        m = _by_model[model] = ModelMetrics(model)
    return m


def peek(model: str) -> ModelMetrics | None:
    """The metrics of ``model`` if any request named it (never creates a series)."""
    return _by_model.get(model)


def model_counters() -> list[tuple[str, int, int, int, list[int]]]:
    """Per ``model`` label: requests, 5xx answers, in flight, cumulative duration buckets
    (one per ``DURATION_BUCKETS`` bound, then ``+Inf``). What the metrics history samples."""
    out: list[tuple[str, int, int, int, list[int]]] = []
    for m in list(_by_model.values()):
        requests = dict(m.requests)
        errors = sum(n for status, n in requests.items() if status >= 500)
        cumulative: list[int] = []
        acc = 0
        for n in list(m.duration.counts):
            acc += n
            cumulative.append(acc)
        out.append((m.model, sum(requests.values()), errors, m.in_flight, cumulative))
    return out


def observe_instance(old: InstanceView | None, new: InstanceView | None) -> None:
    """Routing-table listener keeping ``sardeenz_instance_status`` current."""
    if new is None:
        if old is not None:
            _instances.pop(old.instance_id, None)
        return
    _instances[new.instance_id] = (new.served_name, new.status.value)


class _ProxyCollector(Collector):
    """Turns the plain counters above into metric families at scrape time."""

    def collect(self) -> Iterator[Metric]:
        models = list(_by_model.values())
        requests = CounterMetricFamily(
            "sardeenz_proxy_requests",
            "Inference requests answered by the proxy, by served model and HTTP status "
            "(499: the client went away first).",
            labels=["model", "status"],
        )
        for m in models:
            for status, n in sorted(m.requests.items()):
                requests.add_metric([m.model, str(status)], n)
        yield requests
        yield from self._histograms(models)
        in_flight = GaugeMetricFamily(
            "sardeenz_proxy_requests_in_flight",
            "Requests the proxy is handling right now (including ones waiting for a model).",
            labels=["model"],
        )
        for m in models:
            in_flight.add_metric([m.model], m.in_flight)
        yield in_flight
        family = GaugeMetricFamily(
            "sardeenz_instance_status",
            "1 for the instance's current status, 0 for the others.",
            labels=["instance_id", "model", "status"],
        )
        for iid, (name, current) in sorted(_instances.items()):
            for s in _STATUSES:
                family.add_metric([iid, name, s], 1 if s == current else 0)
        yield family
        yield CounterMetricFamily(
            "sardeenz_http_connections",
            "Client connections accepted by the fast lane (all of them when it is on).",
            value=LANE.accepted,
        )
        yield CounterMetricFamily(
            "sardeenz_http_connections_handed_over",
            "Connections the fast lane gave to uvicorn (a request other than a plain /v1 one).",
            value=LANE.handed_over,
        )
        yield CounterMetricFamily(
            "sardeenz_proxy_express_requests",
            "Requests relayed by the express path (the rest of sardeenz_proxy_requests_total "
            "took the general handler: errors, waits, wake-ups, retries).",
            value=LANE.express,
        )

    @staticmethod
    def _histograms(models: Iterable[ModelMetrics]) -> Iterator[Metric]:
        specs = (
            (
                "sardeenz_proxy_request_duration_seconds",
                "Time from request received to the last response byte sent.",
                "duration",
            ),
            (
                "sardeenz_proxy_time_to_first_byte_seconds",
                "Time from request received to the first response body byte sent "
                "(for streams: about the time to first token).",
                "ttfb",
            ),
            (
                "sardeenz_proxy_overhead_seconds",
                "Latency the proxy adds: request received -> upstream request sent, plus "
                "upstream headers received -> client headers sent.",
                "overhead",
            ),
        )
        models = list(models)
        for name, doc, attr in specs:
            family = HistogramMetricFamily(name, doc, labels=["model"])
            for m in models:
                h: Histogram = getattr(m, attr)
                family.add_metric([m.model], h.buckets(), h.total)
            yield family

    def describe(self) -> Iterator[Metric]:
        # Names only (lets the registry detect duplicates); no samples needed.
        yield CounterMetricFamily("sardeenz_proxy_requests", "", labels=["model", "status"])
        for name in (
            "sardeenz_proxy_request_duration_seconds",
            "sardeenz_proxy_time_to_first_byte_seconds",
            "sardeenz_proxy_overhead_seconds",
        ):
            yield HistogramMetricFamily(name, "", labels=["model"])
        yield GaugeMetricFamily("sardeenz_proxy_requests_in_flight", "", labels=["model"])
        yield GaugeMetricFamily(
            "sardeenz_instance_status", "", labels=["instance_id", "model", "status"]
        )
        yield CounterMetricFamily("sardeenz_http_connections", "", value=0)
        yield CounterMetricFamily("sardeenz_http_connections_handed_over", "", value=0)
        yield CounterMetricFamily("sardeenz_proxy_express_requests", "", value=0)


REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
REGISTRY.register(_ProxyCollector())


def render_metrics() -> tuple[bytes, str]:
    """The exposition text of ``REGISTRY`` and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
