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


@pytest.fixture(autouse=True)
def new_runs_deleted(server: ServerProcess) -> Iterator[None]:
    """The runs a test makes are deleted after it: the folder's modules share the server,
    and each starts with no runs (tests/browser/conftest.py's ``server`` checks it)."""
    with server.client() as api:
        before = {r["id"] for r in api.get("/api/benchmarks").json()}
    yield
    with server.client() as api:
        for run in api.get("/api/benchmarks").json():
            if run["id"] not in before:
                resp = api.delete(f"/api/benchmarks/{run['id']}")
                assert resp.status_code in (200, 204), resp.text


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


def finished_run(
    api: httpx.Client, instance_id: str, name: str = "api-run", concurrency: int = 2
) -> str:
    scenario = {**SCENARIO, "concurrency": concurrency}
    body = {
        "name": name,
        "scenarios": [{"instanceId": instance_id, "totalRequests": 20, **scenario}],
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


def test_compare_a_concurrency_sweep_side_by_side(
    session: Session, server: ServerProcess, bench_instance: str
) -> None:
    """c=4 against c=8 of the same model: numbers side by side, not "Only run A has it"."""
    with server.client() as api:
        run_a = finished_run(api, bench_instance, "sweep-c4", concurrency=4)
        run_b = finished_run(api, bench_instance, "sweep-c8", concurrency=8)
    page = session.page
    session.goto(f"/benchmarks/compare?a={run_a}&b={run_b}")
    card = page.locator("[data-pair]")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-pair", re.compile(r"c4 \(A\) vs c8 \(B\)$"))
    expect(card.get_by_test_id("pair-note")).to_contain_text("c=4 in A and c=8 in B")
    expect(card).not_to_contain_text("Only run")
    rows = card.locator("tbody tr")
    expect(rows).to_have_count(25)
    expect(card.locator("[data-verdict]").first).to_be_visible()
    session.shot("benchmark-compare-sweep")


# Where the browser draws a select's text and where its arrow is. The text starts at
# the left of the select's content box and is cut (with the select's ellipsis) at the
# right of it, so its visible right edge is the start plus the narrower of the text's
# measured width and the box's width.
PICKER_GEOMETRY = """sel => {
  const cs = getComputedStyle(sel);
  const box = sel.getBoundingClientRect();
  const contentLeft = box.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft);
  const contentRight = box.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight);
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = cs.font;
  const text = sel.options[sel.selectedIndex].text;
  const textWidth = ctx.measureText(text).width;
  const arrow = sel.closest('.pf-v6-c-form-control')
    .querySelector('.pf-v6-c-form-control__toggle-icon').getBoundingClientRect();
  return {
    text,
    title: sel.title,
    textWidth,
    contentWidth: contentRight - contentLeft,
    textRight: contentLeft + Math.min(textWidth, contentRight - contentLeft),
    arrowLeft: arrow.left,
    selectRight: box.right,
    overflow: cs.textOverflow,
    viewport: document.documentElement.clientWidth,
  };
}"""

ARROW_CLEARANCE_PX = 4


def test_compare_pickers_cut_long_run_names_clear_of_the_arrow(
    session: Session, server: ServerProcess, bench_instance: str
) -> None:
    """Issue 25 item 9: a picker's label never runs into its arrow, at any width."""
    stem = "nightly-llama-70b-throughput-sweep-with-a-rather-long-descriptive-name"
    with server.client() as api:
        runs = [finished_run(api, bench_instance, f"{stem}-{x}") for x in ("a", "b")]
    try:
        page = session.page
        for width in (1280, 700):
            page.set_viewport_size({"width": width, "height": 800})
            session.goto(f"/benchmarks/compare?a={runs[0]}&b={runs[1]}")
            expect(page.locator("[data-pair]")).to_have_count(1)
            for which, run_id in zip("AB", runs, strict=True):
                picker = page.get_by_role("combobox", name=f"Run {which}")
                expect(picker).to_have_value(run_id)
                g = picker.evaluate(PICKER_GEOMETRY)
                name = f"{stem}-{which.lower()}"
                assert g["text"].startswith(f"{name} · completed · "), g
                # The whole label is the tooltip; the box is too narrow for it, so the
                # browser cuts it with an ellipsis.
                assert g["title"] == g["text"], g
                assert g["textWidth"] > g["contentWidth"], (
                    f"the name must be longer than the picker at {width} px to test the cut: {g}"
                )
                assert g["overflow"] == "ellipsis", g
                assert g["textRight"] <= g["arrowLeft"] - ARROW_CLEARANCE_PX, (
                    f"at {width} px, run {which}'s text ends at {g['textRight']:.1f}, "
                    f"not clear of the arrow at {g['arrowLeft']:.1f}: {g}"
                )
                assert g["selectRight"] <= g["viewport"], f"the picker leaves the page: {g}"
            session.shot(f"benchmark-compare-long-names-{width}")
    finally:
        with server.client() as api:
            for run_id in runs:
                api.delete(f"/api/benchmarks/{run_id}")
