"""Prometheus metrics of on-demand models: starts, waits, wakes, sleeps, unloads, warm-ups,
and LoRA adapters (loads, unloads, hits, misses, load time).

Plain counters updated from the event loop (no prometheus_client objects on the
request path, same reasoning as ``proxy.metrics``), turned into metric families
at scrape time by a collector registered once on the proxy's registry. The
``model`` label only takes catalog entry names (never a client's raw string).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sardeenz.proxy.metrics import REGISTRY, Histogram

WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class OnDemandStats:
    """Everything on-demand handling counts, by catalog model."""

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}
        self.start_failures: dict[str, int] = {}
        self.rejected: dict[tuple[str, str], int] = {}
        self.lifecycle: dict[tuple[str, str, str], int] = {}
        self.waiting: dict[str, int] = {}
        self.wait: dict[str, Histogram] = {}
        self.adapter_events: dict[tuple[str, str], int] = {}
        self.adapter_unloads: dict[tuple[str, str], int] = {}
        self.adapter_load_seconds: dict[str, Histogram] = {}

    def started(self, model: str) -> None:
        self.starts[model] = self.starts.get(model, 0) + 1

    def start_failed(self, model: str) -> None:
        self.start_failures[model] = self.start_failures.get(model, 0) + 1

    def reject(self, model: str, reason: str) -> None:
        key = (model, reason)
        self.rejected[key] = self.rejected.get(key, 0) + 1

    def action(self, model: str, action: str, reason: str) -> None:
        key = (model, action, reason)
        self.lifecycle[key] = self.lifecycle.get(key, 0) + 1

    def waited(self, model: str, seconds: float) -> None:
        h = self.wait.get(model)
        if h is None:
            h = self.wait[model] = Histogram(WAIT_BUCKETS)
        h.observe(seconds)

    def adapter(self, model: str, event: str) -> None:
        """``event``: hit, miss, load or load_failed (``catalog.adapters``)."""
        key = (model, event)
        self.adapter_events[key] = self.adapter_events.get(key, 0) + 1

    def adapter_unloaded(self, model: str, reason: str) -> None:
        key = (model, reason)
        self.adapter_unloads[key] = self.adapter_unloads.get(key, 0) + 1

    def adapter_loaded(self, model: str, seconds: float) -> None:
        self.adapter(model, "load")
        h = self.adapter_load_seconds.get(model)
        if h is None:
            h = self.adapter_load_seconds[model] = Histogram(WAIT_BUCKETS)
        h.observe(seconds)


STATS = OnDemandStats()

_ADAPTER_COUNTERS = (
    ("hit", "sardeenz_adapter_hits", "Requests for a LoRA adapter that was loaded already."),
    (
        "miss",
        "sardeenz_adapter_misses",
        "Requests for a LoRA adapter that waited for it to be loaded (or for its base).",
    ),
    ("load", "sardeenz_adapter_loads", "LoRA adapters loaded into an instance of their base."),
    (
        "load_failed",
        "sardeenz_adapter_load_failures",
        "LoRA adapter loads the engine refused (every waiter got its reason).",
    ),
)


class _Collector(Collector):
    def collect(self) -> Iterator[Metric]:
        s = STATS
        starts = CounterMetricFamily(
            "sardeenz_ondemand_starts",
            "Instances started because a request named a catalog model with none running "
            "(or because the entry has preload).",
            labels=["model"],
        )
        for model, n in sorted(s.starts.items()):
            starts.add_metric([model], n)
        yield starts
        failures = CounterMetricFamily(
            "sardeenz_ondemand_start_failures",
            "On-demand starts that were refused or whose engine failed while starting.",
            labels=["model"],
        )
        for model, n in sorted(s.start_failures.items()):
            failures.add_metric([model], n)
        yield failures
        rejected = CounterMetricFamily(
            "sardeenz_ondemand_rejected_requests",
            "Requests for a catalog model answered 503 (queue_full, timeout, start_failed, "
            "wake_failed).",
            labels=["model", "reason"],
        )
        for (model, reason), n in sorted(s.rejected.items()):
            rejected.add_metric([model, reason], n)
        yield rejected
        actions = CounterMetricFamily(
            "sardeenz_ondemand_lifecycle_actions",
            "What on-demand handling did to catalog models: action sleep, unload, wake or "
            "warmup; reason idle (TTL), evicted (to make room for another model), request "
            "(a wake for a waiting request), wake (a warm-up after a wake) or failed.",
            labels=["model", "action", "reason"],
        )
        for (model, action, reason), n in sorted(s.lifecycle.items()):
            actions.add_metric([model, action, reason], n)
        yield actions
        waiting = GaugeMetricFamily(
            "sardeenz_ondemand_waiting_requests",
            "Requests waiting right now for a catalog model to start or wake (queue depth).",
            labels=["model"],
        )
        for model, n in sorted(s.waiting.items()):
            waiting.add_metric([model], n)
        yield waiting
        wait = HistogramMetricFamily(
            "sardeenz_ondemand_wait_seconds",
            "Time a request for a catalog model waited for it to start or wake (any outcome).",
            labels=["model"],
        )
        for model, h in sorted(s.wait.items()):
            wait.add_metric([model], h.buckets(), h.total)
        yield wait
        yield from self._adapters()

    @staticmethod
    def _adapters() -> Iterator[Metric]:
        s = STATS
        for event, name, doc in _ADAPTER_COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["model"])
            for (model, e), n in sorted(s.adapter_events.items()):
                if e == event:
                    family.add_metric([model], n)
            yield family
        unloads = CounterMetricFamily(
            "sardeenz_adapter_unloads",
            "LoRA adapters unloaded: reason lru (a slot was needed for another adapter), "
            "idle (unused for SARDEENZ_ADAPTER_IDLE_TTL_SECONDS), operator (the API's "
            "unload) or base_gone (their base instance was unloaded, failed or moved).",
            labels=["model", "reason"],
        )
        for (model, reason), n in sorted(s.adapter_unloads.items()):
            unloads.add_metric([model, reason], n)
        yield unloads
        seconds = HistogramMetricFamily(
            "sardeenz_adapter_load_seconds",
            "Time to load a LoRA adapter into a running base (eviction included).",
            labels=["model"],
        )
        for model, h in sorted(s.adapter_load_seconds.items()):
            seconds.add_metric([model], h.buckets(), h.total)
        yield seconds

    def describe(self) -> Iterator[Metric]:
        for name in (
            "sardeenz_ondemand_starts",
            "sardeenz_ondemand_start_failures",
        ):
            yield CounterMetricFamily(name, "", labels=["model"])
        yield CounterMetricFamily(
            "sardeenz_ondemand_rejected_requests", "", labels=["model", "reason"]
        )
        yield CounterMetricFamily(
            "sardeenz_ondemand_lifecycle_actions", "", labels=["model", "action", "reason"]
        )
        yield GaugeMetricFamily("sardeenz_ondemand_waiting_requests", "", labels=["model"])
        yield HistogramMetricFamily("sardeenz_ondemand_wait_seconds", "", labels=["model"])
        for _, name, _ in _ADAPTER_COUNTERS:
            yield CounterMetricFamily(name, "", labels=["model"])
        yield CounterMetricFamily("sardeenz_adapter_unloads", "", labels=["model", "reason"])
        yield HistogramMetricFamily("sardeenz_adapter_load_seconds", "", labels=["model"])


REGISTRY.register(_Collector())
