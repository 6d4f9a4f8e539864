"""The dashboard as an operator uses it daily (issue 16 item 4, issue 17 item 6): the
compare page with no or one run, live benchmark counters equal to the API's, charts whose
history survives a reload, failure reasons and load phases in the models table, /docs with
no network, and the catalog page listing and editing an entry."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import Route, expect

from testkit.servers import ServerProcess, sim_load, wait_for_status
from tests.browser.conftest import Session, row_action

pytestmark = pytest.mark.browser

SERVED = "ops-sim"


@pytest.fixture
def created_runs(server: ServerProcess) -> Iterator[list[str]]:
    """Runs a test creates, deleted after it: other modules share the server and expect
    to start with no runs (test_benchmarks.py)."""
    runs: list[str] = []
    yield runs
    with server.client() as api:
        for run_id in runs:
            wait_finished(api, run_id)
            api.delete(f"/api/benchmarks/{run_id}")


@pytest.fixture(scope="module")
def instance(server: ServerProcess) -> Iterator[str]:
    """A slow simulated model: a request takes about 0.35 s, so a run's counters move slowly."""
    with server.client() as api:
        inst = sim_load(
            api, "ops-model", "--memory-gib", "1", "--ttft-ms", "300", served_model_name=SERVED
        )
        wait_for_status(api, inst["id"], "active")
        yield inst["id"]
        api.post(f"/api/v1/models/{inst['id']}/unload")


def run_benchmark(api: httpx.Client, instance_id: str, name: str, total: int) -> str:
    body = {
        "name": name,
        "scenarios": [
            {
                "instanceId": instance_id,
                "inputTokens": 16,
                "outputTokens": 4,
                "concurrency": 1,
                "warmupRequests": 0,
                "totalRequests": total,
                "slaThresholdMs": 500,
            }
        ],
    }
    resp = api.post("/api/benchmarks", json=body)
    assert resp.status_code == 201, resp.text
    run_id: str = resp.json()["id"]
    return run_id


def wait_finished(api: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = api.get(f"/api/benchmarks/{run_id}").json()
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, "benchmark did not finish"
        time.sleep(0.2)


def test_compare_page_with_no_one_or_unknown_runs(
    session: Session, server: ServerProcess, instance: str, created_runs: list[str]
) -> None:
    with server.client() as api:
        run_id = run_benchmark(api, instance, "cmp-a", 2)
        created_runs.append(run_id)
        assert wait_finished(api, run_id)["status"] == "completed"
    page = session.page
    session.goto("/benchmarks/compare")
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    expect(page.get_by_text("Choose two runs")).to_be_visible()
    expect(page.get_by_role("combobox", name="Run A")).to_be_visible()

    session.goto(f"/benchmarks/compare?a={run_id}")
    expect(page.get_by_text("Choose the other run")).to_be_visible()
    expect(page.get_by_role("combobox", name="Run A")).to_have_value(run_id)

    session.allow(r"404")  # the unknown id below is fetched once
    session.goto(f"/benchmarks/compare?a={run_id}&b=no-such-run")
    expect(page.get_by_text("Run B (no-such-run) does not exist")).to_be_visible()
    # Picking B from the list completes the comparison (the same run against itself).
    page.get_by_role("combobox", name="Run B").select_option(run_id)
    expect(page).to_have_url(re.compile(rf"b={run_id}"))
    table = page.locator("table").first
    expect(table.locator("tbody tr")).to_have_count(25)
    # A count is a difference, never a percentage gain.
    goodput = table.locator("tr", has_text="Goodput (requests within SLA)")
    expect(goodput.locator("[data-verdict]")).not_to_contain_text("%")


def test_live_benchmark_counters_equal_the_api(
    session: Session, server: ServerProcess, instance: str, created_runs: list[str]
) -> None:
    page = session.page
    with server.client() as api:
        total = 16
        run_id = run_benchmark(api, instance, "live-counters", total)
        created_runs.append(run_id)
        session.goto(f"/benchmarks/{run_id}")
        requests = page.locator('[data-run-field="requests"]')
        expect(requests).to_contain_text(f"of {total}")
        matches: set[int] = set()
        pattern = re.compile(r"(\d+) ok, (\d+) failed of (\d+)")
        while api.get(f"/api/benchmarks/{run_id}").json()["status"] in ("pending", "running"):
            shown = pattern.search(requests.inner_text())
            assert shown is not None
            ok = int(shown.group(1))
            api_ok = api.get(f"/api/benchmarks/{run_id}").json()["successfulRequests"]
            # A request takes ~0.35 s and the page hears of it within 0.25 s: read twice
            # apart, the page must have caught up with the API at least at some moments.
            if 0 < ok < total and ok == api_ok:
                matches.add(ok)
            time.sleep(0.1)
        assert len(matches) >= 3, f"the page's counters rarely matched the API's: {matches}"
        final = wait_finished(api, run_id)
    expect(requests).to_have_text(f"{final['successfulRequests']} ok, 0 failed of {total}")
    # The per-scenario grid and its latency distributions, SLA drawn on the E2E one.
    card = page.locator("[data-results-for]")
    expect(card.locator("tr[data-grid-row]")).to_have_count(3)
    expect(card.get_by_role("columnheader", name="p99", exact=True)).to_be_visible()
    expect(card.locator('[data-cdf="TTFT"] svg path')).to_have_count(1)
    expect(card.locator('[data-cdf="E2E latency"] [data-sla="500"]')).to_have_count(1)
    card.locator('[data-cdf="E2E latency"]').scroll_into_view_if_needed()
    session.shot("benchmark-run-grid-and-cdf")


def test_charts_keep_their_history_across_a_reload(
    session: Session, server: ServerProcess, instance: str
) -> None:
    page = session.page
    with httpx.Client(base_url=server.url, timeout=30) as client, server.client() as api:
        # Traffic across at least three server samples (every 5 s), so rates exist: a
        # request every 0.2 s (back to back, it cost the server seconds of CPU for nothing).
        deadline = time.monotonic() + 40
        while True:
            resp = client.post(
                "/v1/completions", json={"model": SERVED, "prompt": "hi", "max_tokens": 2}
            )
            assert resp.status_code == 200, resp.text
            samples = api.get("/api/v1/metrics/history").json()["samples"]
            with_model = [s for s in samples if any(m["model"] == SERVED for m in s["models"])]
            if len(with_model) >= 3:
                break
            assert time.monotonic() < deadline, "the server kept no history"
            time.sleep(0.2)
    session.goto("/charts")
    rate_card = page.locator(".pf-v6-c-card", has_text="Requests per second")
    expect(rate_card.locator(".sz-chart canvas")).to_have_count(1)
    expect(rate_card.locator(".u-legend")).to_contain_text(SERVED)
    expect(page.locator(".pf-v6-c-card", has_text="Latency p95 per model")).to_be_visible()
    page.reload()
    # Right after the reload, before the tab could have sampled twice itself (5 s apart),
    # the chart is drawn from the server's history.
    started = time.monotonic()
    expect(rate_card.locator(".sz-chart canvas")).to_have_count(1, timeout=3000)
    assert time.monotonic() - started < 4
    # The legend shows the newest values without hovering.
    expect(rate_card.locator(".u-legend .u-value").last).to_have_text(re.compile(r"\d.* req/s"))


def test_models_table_shows_why_an_instance_failed(session: Session, server: ServerProcess) -> None:
    with server.client() as api:
        inst = sim_load(api, "broken-model", "--memory-gib", "1", "--fail-after-load")
        failed = wait_for_status(api, inst["id"], "failed")
        assert failed["errorMessage"]
        try:
            page = session.page
            session.goto("/models")
            row = page.locator(f'tr[data-instance-id="{inst["id"]}"]')
            expect(row).to_have_attribute("data-status", "failed")
            reason = row.locator("[data-failure-reason]")
            first_line = next(ln for ln in failed["errorMessage"].splitlines() if ln.strip())
            expect(reason).to_contain_text(first_line.strip()[:60])
            expect(page.get_by_role("columnheader", name="GPU memory")).to_be_visible()
            expect(page.get_by_role("columnheader", name="req/s")).to_be_visible()
            session.shot("models-failure-reason")
            row_action(row, "Unload")
            dialog = page.get_by_role("dialog")
            expect(dialog).not_to_contain_text("requests for")
            dialog.get_by_role("button", name="Cancel").click()
        finally:
            api.post(f"/api/v1/models/{inst['id']}/unload")


def test_models_table_shows_the_load_phase_of_a_starting_instance(
    session: Session, server: ServerProcess
) -> None:
    """A starting row says how far and how long it has been loading, from ``loadPhase``."""
    with server.client() as api:
        inst = sim_load(api, "slow-model", "--memory-gib", "1", "--load-seconds", "40")
        try:
            page = session.page
            session.goto("/models")
            row = page.locator(f'tr[data-instance-id="{inst["id"]}"]')
            expect(row).to_have_attribute("data-status", "starting")
            starting = row.locator("[data-starting-for]")
            # The sim opens "loading weights" at 2 s and "KV cache" at 24 s of its 40 s.
            expect(starting).to_have_attribute("data-load-phase", "loading weights")
            expect(starting).to_have_text(re.compile(r"^loading weights · \d+ s$"))
            listed = api.get(f"/api/v1/models/{inst['id']}").json()
            assert (listed["status"], listed["loadPhase"]) == ("starting", "loading weights")
            session.shot("models-starting-phase")
        finally:
            api.post(f"/api/v1/models/{inst['id']}/unload")


def test_docs_render_with_no_network(session: Session) -> None:
    page = session.page
    refused: list[str] = []

    def only_loopback(route: Route) -> None:
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", only_loopback)
    session.goto("/docs")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Sardeenz")
    expect(page.get_by_role("button", name="GET /api/health Health")).to_be_visible()
    assert refused == [], f"/docs reached beyond the node: {refused}"


def test_catalog_page_lists_and_edits_an_entry(session: Session, server: ServerProcess) -> None:
    name = "cat-ui"
    with server.client() as api:
        resp = api.put(
            f"/api/v1/catalog/{name}",
            json={"modelPath": "cat-model", "engine": "sim", "idleUnloadSeconds": 600},
        )
        assert resp.status_code == 200, resp.text
        try:
            page = session.page
            session.goto("/catalog")
            row = page.locator(f'tr[data-catalog-name="{name}"]')
            expect(row).to_have_attribute("data-state", "unloaded")
            expect(row).to_contain_text("cat-model")
            expect(row).to_contain_text("unload after 10m 00s idle")
            session.shot("catalog-list")
            row.get_by_role("button", name="Edit").click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_label("Sleep after idle (s)").fill("30")
            dialog.get_by_role("button", name="Save").click()
            expect(dialog.get_by_text("Needs sleep level 1 or 2.")).to_be_visible()
            # A refusal of the server lands on the field it names.
            dialog.get_by_label("Sleep after idle (s)").fill("")
            dialog.get_by_label("Engine", exact=True).select_option("external")
            dialog.get_by_label("URL (external only)").fill("not a url")
            session.allow(r"400")
            dialog.get_by_role("button", name="Save").click()
            url_help = dialog.locator("#cat-url-help")
            expect(url_help).to_be_visible()
            session.shot("catalog-edit-field-error")
            assert "url" not in url_help.inner_text().lower()[:4], "the field name is not repeated"
            dialog.get_by_label("Engine", exact=True).select_option("sim")
            dialog.get_by_label("URL (external only)").fill("")
            dialog.get_by_label("Sleep level").select_option("1")
            dialog.get_by_label("Sleep after idle (s)").fill("30")
            dialog.get_by_label("Pinned (never slept, unloaded or evicted)").check()
            dialog.get_by_role("button", name="Save").click()
            expect(dialog).to_be_hidden()
            expect(row).to_contain_text("never (pinned)")
            entry = api.get(f"/api/v1/catalog/{name}").json()["entry"]
            saved = (entry["sleepLevel"], entry["idleSleepSeconds"], entry["pinned"])
            assert saved == (1, 30, True)
            row.get_by_role("button", name="Delete").click()
            page.get_by_role("dialog").get_by_role("button", name="Delete").click()
            expect(row).to_have_count(0)
            assert api.get(f"/api/v1/catalog/{name}").status_code == 404
        finally:
            api.delete(f"/api/v1/catalog/{name}")
