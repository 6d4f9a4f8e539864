"""Issue 25 item 1: each model's p50/p95 on the Dashboard and Charts are its own.

Two sim models with known time to first token (120 ms and 180 ms: both inside the
proxy histogram's 100-250 ms bucket, where both used to read 175/243 ms) get
requests through the official ``openai`` client; the metrics history the Dashboard
and the Charts read (``GET /api/v1/metrics/history``) must give each model figures
from its own requests: at or above its engine's latency, apart from the other's,
and within the range the Requests page (``GET /api/v1/requests``) shows for it. So
must each instance's ``ResourceMetrics`` (``GET /api/v1/models/{id}/metrics``: the
instance page's "Latency p50 / p95"), which read 175 / 242.5 ms for both as well.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from openai import OpenAI

from testkit.servers import ServerProcess, load_active

FAST, SLOW = "latency-fast", "latency-slow"
TTFT = {FAST: 0.120, SLOW: 0.180}
SENT = 8


def _history_until(api: httpx.Client, counted: int) -> list[dict[str, Any]]:
    """Model points of the samples once they count ``counted`` requests per model."""
    deadline = time.monotonic() + 30
    while True:
        samples = api.get("/api/v1/metrics/history").json()["samples"]
        points = [m for s in samples for m in s["models"] if m["model"] in TTFT]
        done = all(sum(p["requests"] for p in points if p["model"] == m) >= counted for m in TTFT)
        if done:
            return points
        assert time.monotonic() < deadline, f"history did not count {counted} requests: {points}"
        time.sleep(0.5)


def test_each_model_has_its_own_latency_quantiles(module_server: ServerProcess) -> None:
    with module_server.client() as api:
        ids = {
            name: load_active(api, name, "--ttft-ms", str(ttft * 1000), "--itl-ms", "0")["id"]
            for name, ttft in TTFT.items()
        }
        client = OpenAI(base_url=f"{module_server.url}/v1", api_key="unused", max_retries=0)
        for _ in range(SENT):
            for name in TTFT:
                client.chat.completions.create(
                    model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=1
                )
        points = _history_until(api, SENT)
        logged = {
            name: [
                e["latencyMs"] / 1000
                for e in api.get("/api/v1/requests", params={"model": name}).json()
            ]
            for name in TTFT
        }
        measured = {name: api.get(f"/api/v1/models/{ids[name]}/metrics").json() for name in TTFT}
    for name, ttft in TTFT.items():
        assert len(logged[name]) == SENT
        assert min(logged[name]) >= ttft, (name, logged[name])
        mine = [p for p in points if p["model"] == name and p["requests"]]
        assert sum(p["requests"] for p in mine) == SENT
        assert all(p["errors"] == 0 for p in mine)
        for p in mine:
            # the requests' own latencies: within what the Requests page shows for them
            assert min(logged[name]) <= p["p50"] <= p["p95"] <= max(logged[name]), (p, logged)
        # the instance page's figures: the same requests' own latencies, in ms
        m = measured[name]
        low, high = min(logged[name]) * 1000, max(logged[name]) * 1000
        assert low <= m["avgResponseTime"] <= m["p95ResponseTime"] <= high, (m, logged[name])
    assert measured[FAST]["p95ResponseTime"] < measured[SLOW]["avgResponseTime"], measured
    # and so the two models are told apart (they used to read the same 175 / 243 ms)
    fast = [p["p50"] for p in points if p["model"] == FAST and p["requests"]]
    slow = [p["p50"] for p in points if p["model"] == SLOW and p["requests"]]
    assert max(fast) < min(slow), (fast, slow)
