"""The server-side metrics history: bounded, ordered, filtered by time, raw counters."""

from __future__ import annotations

import asyncio

from sardeenz.config import parse_sim_gpus
from sardeenz.gpu.inventory import SimulatedInventory
from sardeenz.metrics_history import MetricsHistory
from sardeenz.proxy import metrics


async def test_ring_is_bounded_and_keeps_the_newest() -> None:
    history = MetricsHistory(SimulatedInventory(parse_sim_gpus("L4:24GiB")), interval=1, window=3)
    taken = [await history.sample() for _ in range(5)]
    report = history.report()
    assert [s.t for s in report.samples] == [s.t for s in taken[-3:]]
    assert report.samples[0].gpus[0].total_bytes == 24 * 2**30
    assert history.report(since=taken[3].t).samples == [taken[4]]


async def test_samples_carry_cumulative_duration_buckets() -> None:
    m = metrics.for_model("history-test-model")
    m.count(200)
    m.count(503)
    m.duration.observe(0.02)
    m.duration.observe(1000.0)  # past the last bound: only in +Inf
    history = MetricsHistory(SimulatedInventory(parse_sim_gpus("L4:24GiB")))
    sample = await history.sample()
    point = next(p for p in sample.models if p.model == "history-test-model")
    assert (point.requests, point.errors) == (2, 1)
    report = history.report()
    assert len(point.duration) == len(report.duration_bounds) + 1
    assert point.duration[report.duration_bounds.index(0.025)] == 1
    assert point.duration[-2:] == [1, 2]


async def test_one_owned_task_samples_at_the_interval_and_stops() -> None:
    history = MetricsHistory(
        SimulatedInventory(parse_sim_gpus("L4:24GiB")), interval=0.05, window=10
    )
    history.start()
    history.start()  # idempotent: still one task
    await asyncio.sleep(0.28)
    await history.stop()
    n = len(history.report().samples)
    assert 4 <= n <= 7, n
    await asyncio.sleep(0.12)
    assert len(history.report().samples) == n, "sampling went on after stop()"
