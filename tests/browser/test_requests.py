"""The Requests page lists what GET /api/v1/requests reports, and refreshes live."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from testkit.servers import ServerProcess, load_active
from tests.browser.conftest import Session, has_route

pytestmark = pytest.mark.browser


def _chat(srv: ServerProcess, model: str) -> None:
    resp = httpx.post(
        f"{srv.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


def test_requests_page_shows_the_log_and_refreshes_live(
    session: Session, server: ServerProcess
) -> None:
    if not has_route(server, "/api/v1/requests"):
        pytest.skip("this server has no request log yet")
    with server.client() as api:
        inst = load_active(api, "browser-reqlog", "--ttft-ms", "1")
        try:
            _chat(server, "browser-reqlog")
            entry = api.get("/api/v1/requests", params={"model": "browser-reqlog"}).json()[0]
            session.goto("/requests")
            page = session.page
            expect(page.get_by_role("heading", level=1)).to_have_text("Requests")
            row = page.get_by_test_id("request-row").filter(has_text=entry["requestId"])
            expect(row).to_contain_text("browser-reqlog")
            expect(row).to_contain_text(inst["id"])
            expect(row).to_contain_text("200")
            tokens = f"{entry['promptTokens']} / {entry['completionTokens']}"
            expect(row).to_contain_text(tokens)
            # A request sent while the page is open appears without a reload.
            _chat(server, "browser-reqlog")
            newer = api.get("/api/v1/requests", params={"model": "browser-reqlog"}).json()[0]
            assert newer["id"] > entry["id"]
            expect(page.get_by_test_id("request-row").first).to_contain_text(newer["requestId"])
            # The usage table counts the model.
            expect(page.get_by_role("grid", name="Usage per key and model")).to_contain_text(
                "browser-reqlog"
            )
        finally:
            api.post(f"/api/v1/models/{inst['id']}/unload")
