"""A small benchmark from the form, watched to completion, then two runs compared."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from testkit.servers import ServerProcess, sim_load, wait_for_status
from tests.browser.conftest import Session, has_route

pytestmark = pytest.mark.browser

SCENARIO = {"inputTokens": 16, "outputTokens": 8, "concurrency": 2, "warmupRequests": 1}


@pytest.fixture
def bench_instance(server: ServerProcess) -> Iterator[str]:
    if not has_route(server, "/api/benchmarks"):
        pytest.skip("this server has no benchmark API yet")
    with server.client() as api:
        inst = sim_load(
            api,
            "bench-model",
            "--memory-gib",
            "1",
            "--ttft-ms",
            "20",
            "--itl-ms",
            "5",
            served_model_name="bench-sim",
        )
        wait_for_status(api, inst["id"], "active")
        yield inst["id"]
        api.post(f"/api/v1/models/{inst['id']}/unload")


def finished_run(api: httpx.Client, instance_id: str) -> str:
    body = {
        "name": "api-run",
        "scenarios": [{"instanceId": instance_id, "totalRequests": 20, **SCENARIO}],
    }
    resp = api.post("/api/benchmarks", json=body)
    assert resp.status_code == 201, resp.text
    run_id: str = resp.json()["id"]
    deadline = time.monotonic() + 30
    while api.get(f"/api/benchmarks/{run_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "benchmark did not complete"
        time.sleep(0.2)
    return run_id


def test_run_a_benchmark_and_compare_two(
    session: Session, server: ServerProcess, bench_instance: str
) -> None:
    page = session.page
    session.goto("/benchmarks")
    expect(page.get_by_text("No benchmark runs yet")).to_be_visible()
    page.get_by_role("link", name="New benchmark").click()
    page.get_by_label("Name").fill("ui-run")
    for field, value in {**SCENARIO, "totalRequests": 40}.items():
        label = {
            "inputTokens": "Input tokens",
            "outputTokens": "Output tokens (max_tokens)",
            "concurrency": "Concurrency",
            "warmupRequests": "Warm-up requests",
            "totalRequests": "Measured requests",
        }[field]
        page.get_by_label(label, exact=True).fill(str(value))
    page.get_by_role("button", name="Start benchmark").click()

    # The run page follows the run over SSE until it completes.
    expect(page).to_have_url(re.compile(r"/benchmarks/[0-9a-f-]{36}$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("ui-run")
    expect(page.locator("[data-status]").first).to_have_attribute(
        "data-status", "completed", timeout=30_000
    )
    progress = page.locator("[data-scenario-id]").get_by_role("progressbar")
    expect(progress).to_have_attribute("aria-valuenow", "100")
    expect(page.locator("[data-scenario-id]")).to_contain_text("40 ok, 0 failed")
    results = page.locator('table[aria-label="Benchmark results"]')
    expect(results.locator("tr[data-metric]")).to_have_count(25)
    expect(results).to_contain_text("TTFT p95")
    expect(results).to_contain_text("Goodput %")
    session.shot("benchmark-run")

    # A second run (through the API), then both side by side.
    with server.client() as api:
        finished_run(api, bench_instance)
    page.get_by_role("link", name="All runs").click()
    for name in ("ui-run", "api-run"):
        row = page.locator("tr", has=page.get_by_role("link", name=name, exact=True))
        row.get_by_role("checkbox").check()
    page.get_by_role("button", name="Compare selected").click()
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    comparison = page.locator("table").first
    expect(comparison.locator("tbody tr")).to_have_count(25)
    expect(comparison.locator("[data-verdict]").first).to_be_visible()
