"""vLLM's Prometheus metrics, as the simulated engine exposes them on ``/metrics``.

The controller scrapes engines for ``vllm:*`` gauges and counters (running, waiting,
KV usage, sleep state, token counts, latency histograms), so the names, help texts,
labels and buckets here are vLLM's. ``sardeenz_sim_*`` counters are the only
additions, and say they are simulated.
"""

from __future__ import annotations

from typing import Final

import prometheus_client as prom

__all__ = ["FINISH_REASONS", "SimMetrics"]

_TTFT_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_E2E_BUCKETS: Final = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
FINISH_REASONS: Final = ("stop", "length", "abort")
_SLEEP_STATES: Final = ("awake", "weights_offloaded", "discard_all")


class SimMetrics:
    """vLLM's metric names and labels (``model_name``, ``engine="0"``) in a private registry.

    A private registry keeps this process's output exactly what vLLM exposes (no
    ``process_*``/``python_*`` defaults) and never collides with other registries.
    """

    def __init__(self, model_name: str) -> None:
        self.registry = prom.CollectorRegistry(auto_describe=True)
        reg = self.registry
        labels = ["model_name", "engine"]
        values = (model_name, "0")
        self.running = prom.Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            registry=reg,
        ).labels(*values)
        self.waiting = prom.Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            registry=reg,
        ).labels(*values)
        self.kv_usage = prom.Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            labels,
            registry=reg,
        ).labels(*values)
        sleep_state = prom.Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            [*labels, "sleep_state"],
            registry=reg,
        )
        self.sleep_state = {s: sleep_state.labels(*values, s) for s in _SLEEP_STATES}
        self.prompt_tokens = prom.Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg
        ).labels(*values)
        self.generation_tokens = prom.Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            labels,
            registry=reg,
        ).labels(*values)
        success = prom.Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {r: success.labels(*values, r) for r in FINISH_REASONS}
        self.ttft = prom.Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=reg,
        ).labels(*values)
        self.e2e = prom.Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=_E2E_BUCKETS,
            registry=reg,
        ).labels(*values)
        self.wakeups = prom.Counter(
            "sardeenz_sim_wakeups",
            "Simulated engine only: completed wake-ups.",
            labels,
            registry=reg,
        ).labels(*values)
        self.slow_after_wake = prom.Counter(
            "sardeenz_sim_slow_after_wake_requests",
            "Simulated engine only: requests that ran slower as the first after a wake-up "
            "(--wake-slowdown).",
            labels,
            registry=reg,
        ).labels(*values)
        self.sleeps = prom.Counter(
            "sardeenz_sim_sleeps",
            "Simulated engine only: times the engine fell asleep.",
            labels,
            registry=reg,
        ).labels(*values)
        self.set_sleep_state(None)

    def set_sleep_state(self, level: int | None) -> None:
        self.sleep_state["awake"].set(1 if level is None else 0)
        self.sleep_state["weights_offloaded"].set(1 if level == 1 else 0)
        self.sleep_state["discard_all"].set(1 if level == 2 else 0)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)
