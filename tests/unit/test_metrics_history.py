"""The server-side metrics history: bounded, ordered, filtered by time and pod, and each
model's figures from its own requests' latencies."""

from __future__ import annotations

import asyncio
import time

import pytest

from sardeenz.config import parse_sim_gpus
from sardeenz.gpu.inventory import SimulatedInventory
from sardeenz.metrics_history import GpuPoint, MetricsHistory
from sardeenz.proxy import reqlog
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.reqlog import RequestLog
from sardeenz.proxy.routing import Endpoint
from sardeenz.telemetry.traffic import quantile


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reqlog, "_usage", {})


def _history(
    flights: dict[str | None, dict[str, int]] | None = None, **kw: float
) -> tuple[MetricsHistory, RequestLog, RequestHistory]:
    log = RequestLog(100, pod="pod-a")
    requests = RequestHistory(log)
    history = MetricsHistory(
        SimulatedInventory(parse_sim_gpus("L4:24GiB")),
        requests,
        lambda: flights or {},
        lambda: [GpuPoint(pod="pod-b", index=0, name="L4", used_bytes=1, total_bytes=2)],
        **kw,
    )
    return history, log, requests


def _served(log: RequestLog, model: str, latency: float, status: int = 200) -> None:
    ep = Endpoint(f"{model}-1", model, "127.0.0.1", 9000, "http://127.0.0.1:9000")
    log.finished(model, None, ep, status, latency, 0.0, False, None, b"", b"")


async def test_ring_is_bounded_and_keeps_the_newest() -> None:
    history, _, _ = _history(interval=1, window=3)
    taken = [await history.sample() for _ in range(5)]
    report = history.report()
    assert [s.t for s in report.samples] == [s.t for s in taken[-3:]]
    assert report.samples[0].gpus[0].total_bytes == 24 * 2**30
    assert history.report(since=taken[3].t).samples == [taken[4]]


async def test_each_model_gets_the_quantiles_of_its_own_latencies() -> None:
    """Issue 25: two models between 100 and 250 ms showed the same p50/p95 (one
    histogram bucket, interpolated). Each now gets its requests' own figures."""
    history, log, _ = _history({"pod-a": {"fast": 1}, "pod-b": {"fast": 2}})
    await history.sample()
    for ms in (110, 112, 114, 116, 118):
        _served(log, "fast", ms / 1000)
    for ms in (160, 165, 170, 175, 180):
        _served(log, "slow", ms / 1000)
    _served(log, "slow", 2.0, status=502)  # an error: counted, not in the quantiles
    sample = await history.sample()
    fast, slow = sample.models
    assert (fast.model, fast.requests, fast.errors, fast.in_flight) == ("fast", 5, 0, 3)
    assert fast.p50 == pytest.approx(0.114)
    assert fast.p95 == pytest.approx(0.1176)
    assert (slow.model, slow.requests, slow.errors) == ("slow", 6, 1)
    assert slow.p50 == pytest.approx(0.170)
    assert slow.p95 == pytest.approx(0.179)
    # per pod: this pod ran them all; pod-b has only its in-flight count
    assert {(p.model, p.pod, p.requests, p.in_flight) for p in sample.pods} == {
        ("fast", "pod-a", 5, 1),
        ("slow", "pod-a", 6, 0),
        ("fast", "pod-b", 0, 2),
    }
    # the next interval counts only what ended since
    later = await history.sample()
    assert [(m.model, m.requests, m.p50) for m in later.models] == [("fast", 0, None)]


async def test_refusals_are_not_a_models_traffic_and_pod_filters() -> None:
    history, log, _ = _history()
    await history.sample()
    log.finished("_unknown", "nope", None, 404, 0.001, 0.0, False, None, b"", b"")
    log.finished("m", None, None, 503, 5.0, 0.0, False, None, b"", b"")  # waited, then 503
    sample = await history.sample()
    assert [(m.model, m.requests, m.errors, m.p50) for m in sample.models] == [("m", 1, 1, None)]
    assert {g.pod for g in sample.gpus} == {"pod-a", "pod-b"}
    only_b = history.report(pod="pod-b")
    assert only_b.pod == "pod-b"
    assert [g.pod for g in only_b.samples[-1].gpus] == ["pod-b"]
    assert only_b.samples[-1].models == []
    only_a = history.report(pod="pod-a").samples[-1]
    assert [(m.model, m.pod) for m in only_a.models] == [("m", "pod-a")]


def test_quantile_is_linear_between_ranks() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.95) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)


async def test_one_owned_task_samples_at_the_interval_and_stops() -> None:
    history, _, _ = _history(interval=0.05, window=10)
    history.start()
    history.start()  # idempotent: still one task
    deadline = time.monotonic() + 10
    while len(history.report().samples) < 3:
        assert time.monotonic() < deadline, "the task took no samples"
        await asyncio.sleep(0.02)
    await history.stop()
    n = len(history.report().samples)
    await asyncio.sleep(0.12)
    assert len(history.report().samples) == n, "sampling went on after stop()"
