"""The sim engine's ``/metrics`` text is exactly what ``prometheus_client`` writes.

The sim writes its exposition itself (``sardeenz.sim.metrics``: importing
prometheus_client was a seventh of an engine start's CPU). Here the same metrics are
declared through prometheus_client as the engine declared them before, with
``_created`` series disabled as vLLM runs it, the same operations are applied to both,
and the bytes must be equal: names, help texts, label order and escaping, bucket
bounds, float formatting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import prometheus_client as prom
import pytest
from prometheus_client.utils import floatToGoString

from sardeenz.sim import metrics as simmetrics
from sardeenz.sim.metrics import CONTENT_TYPE, FINISH_REASONS, SimMetrics, go_float


class ReferenceMetrics:
    """The engine's metrics as declared through prometheus_client before (same attributes)."""

    def __init__(self, model_name: str) -> None:
        self.registry = prom.CollectorRegistry(auto_describe=True)
        reg = self.registry
        labels = ["model_name", "engine"]
        values = (model_name, "0")

        def one(kind: Any, name: str, doc: str, **kw: Any) -> Any:
            return kind(name, doc, labels, registry=reg, **kw).labels(*values)

        self.running = one(
            prom.Gauge,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
        )
        self.waiting = one(
            prom.Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = one(
            prom.Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        sleep_state = prom.Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            [*labels, "sleep_state"],
            registry=reg,
        )
        self.sleep_state = {
            s: sleep_state.labels(*values, s) for s in ("awake", "weights_offloaded", "discard_all")
        }
        self.prompt_tokens = one(
            prom.Counter, "vllm:prompt_tokens", "Number of prefill tokens processed."
        )
        self.generation_tokens = one(
            prom.Counter, "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = prom.Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {r: success.labels(*values, r) for r in FINISH_REASONS}
        self.ttft = one(
            prom.Histogram,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            buckets=simmetrics._TTFT_BUCKETS,
        )
        self.e2e = one(
            prom.Histogram,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            buckets=simmetrics._E2E_BUCKETS,
        )
        self.wakeups = one(
            prom.Counter, "sardeenz_sim_wakeups", "Simulated engine only: completed wake-ups."
        )
        self.slow_after_wake = one(
            prom.Counter,
            "sardeenz_sim_slow_after_wake_requests",
            "Simulated engine only: requests that ran slower as the first after a wake-up "
            "(--wake-slowdown).",
        )
        self.sleeps = one(
            prom.Counter,
            "sardeenz_sim_sleeps",
            "Simulated engine only: times the engine fell asleep.",
        )
        self.set_sleep_state(None)

    def set_sleep_state(self, level: int | None) -> None:
        self.sleep_state["awake"].set(1 if level is None else 0)
        self.sleep_state["weights_offloaded"].set(1 if level == 1 else 0)
        self.sleep_state["discard_all"].set(1 if level == 2 else 0)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


@contextmanager
def created_series_disabled() -> Iterator[None]:
    """As the engine ran prometheus_client (and vLLM does); restored for the other tests."""
    prom.disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        prom.enable_created_metrics()  # type: ignore[no-untyped-call]


def traffic(m: Any) -> None:
    """What a busy engine does to its metrics: admissions, tokens, latencies, sleeps."""
    m.waiting.set(3)
    m.running.set(2)
    m.kv_usage.set(1 / 3)
    m.prompt_tokens.inc(17)
    m.generation_tokens.inc(1234567)
    m.generation_tokens.inc(0.5)
    for reason in FINISH_REASONS:
        m.success[reason].inc()
    m.success["stop"].inc(2)
    # on a bound, between bounds, below the first, above the last (+Inf)
    for seconds in (0.001, 0.0015, 0.25, 0.0001, 3000.0, 1e-9, 7680.0, 10000.0):
        m.ttft.observe(seconds)
        m.e2e.observe(seconds)
    m.e2e.observe(0.123456789)
    m.slow_after_wake.inc()
    m.set_sleep_state(1)
    m.sleeps.inc()
    m.set_sleep_state(2)
    m.sleeps.inc()
    m.set_sleep_state(None)
    m.wakeups.inc()
    m.waiting.set(0)
    m.kv_usage.set(12345678.9)


MODEL_NAMES = [
    "tiny-a",
    "org/Model-7B:instruct",
    'quote " back\\slash \n newline',
    "ünï 模型 ✓",
    "",
]


@pytest.mark.parametrize("model_name", MODEL_NAMES)
@pytest.mark.parametrize("act", [lambda m: None, traffic], ids=["fresh", "after-traffic"])
def test_same_bytes_as_prometheus_client(model_name: str, act: Callable[[Any], None]) -> None:
    with created_series_disabled():
        reference = ReferenceMetrics(model_name)
        ours = SimMetrics(model_name)
        act(reference)
        act(ours)
        assert ours.render() == reference.render()


def test_a_counter_refuses_a_negative_increment_like_prometheus_client() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        SimMetrics("m").prompt_tokens.inc(-1)


@pytest.mark.parametrize(
    "value",
    [
        *(0.0, -0.0, 1.0, 0.5, 1 / 3, 1e-9, 123456.0, 1234567.0, 1e6, 12345678.9, 1e22, -1e7),
        *(math.inf, -math.inf, math.nan, 7680.0, 2560.0),
    ],
)
def test_float_text_as_prometheus_client(value: float) -> None:
    assert go_float(value) == floatToGoString(value)  # type: ignore[no-untyped-call]


def test_content_type_is_prometheus_clients() -> None:
    assert CONTENT_TYPE == prom.CONTENT_TYPE_LATEST
