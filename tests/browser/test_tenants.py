"""The Tenants page: each tenant's limits, its use of them now, and its tokens over time.

Its own server (the session's has no inference keys, and a tenant is a group of keys):
traffic from the keys of two tenants, one of them refused by its limit, then the page
must show what ``GET /api/v1/usage`` and ``GET /api/v1/tenants`` report.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from testkit.servers import ServerProcess, load_active
from tests.browser.conftest import open_session, start_server, stop_server

pytestmark = pytest.mark.browser

MODEL = "browser-tenants"
KEYS = ("k-web", "k-tight")


def _secret(key_id: str) -> str:
    return f"sk-{key_id}-browser-0123456789"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("tenants")
    keys = root / "keys.txt"
    keys.write_text(
        "".join(f"{hashlib.sha256(_secret(k).encode()).hexdigest()} {k}\n" for k in KEYS)
    )
    server = start_server(root / "data", env={"SARDEENZ_API_KEYS_FILE": str(keys)})
    try:
        with server.client() as api:
            load_active(api, MODEL, "--ttft-ms", "1", "--itl-ms", "1")
        yield server
    finally:
        stop_server(server)


def _chat(srv: ServerProcess, key: str) -> int:
    resp = httpx.post(
        f"{srv.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {_secret(key)}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=30,
    )
    return resp.status_code


def test_tenants_page_shows_limits_use_and_a_chart(browser: Browser, srv: ServerProcess) -> None:
    with srv.client() as api:
        for name, body in (
            ("web-team", {"api_keys": ["k-web"], "limits": {"tokens_per_day": 100000}}),
            ("web-tight", {"api_keys": ["k-tight"], "limits": {"requests_per_minute": 1}}),
        ):
            assert api.put(f"/api/v1/tenants/{name}", json=body).status_code == 200
        assert [_chat(srv, "k-web") for _ in range(3)] == [200, 200, 200]
        assert [_chat(srv, "k-tight") for _ in range(2)] == [200, 429]
        today = api.get("/api/v1/tenants/web-team").json()["usage"]["*"]["tokens_today"]
    assert today > 0

    session = open_session(browser, srv.url)
    try:
        session.goto("/tenants")
        page = session.page
        expect(page.get_by_role("heading", level=1)).to_have_text("Tenants")
        team = page.locator('[data-tenant="web-team"]')
        expect(team.get_by_test_id("tenant-totals")).to_contain_text("3 requests")
        budget = team.get_by_role("progressbar", name="Tokens today")
        expect(budget).to_have_attribute("aria-valuetext", f"{today} of 100000")
        expect(team.locator(".uplot canvas").first).to_be_visible()  # the tokens chart
        tight = page.locator('[data-tenant="web-tight"]')
        expect(tight.get_by_test_id("tenant-totals")).to_contain_text(
            re.compile(r"1 request · .* 1 refused \(requests_per_minute 1\)")
        )
        # Another range asks again: the same requests are in the last 24 hours.
        page.get_by_role("button", name="Last 24 hours").click()
        expect(team.get_by_test_id("tenant-totals")).to_contain_text("3 requests")
        session.shot("tenants-page")
        assert session.unexpected_errors() == [], "console errors"
    finally:
        session.page.context.close()
