"""Login with a pasted bearer token; a read-only user sees no button that changes anything;
a refused token sends the user back to the login page."""

from __future__ import annotations

import time
from collections.abc import Iterator

import jwt
import pytest
from playwright.sync_api import Browser, Page, expect

from testkit.servers import ServerProcess, sim_load, wait_for_status
from tests.browser.conftest import (
    ROW_MENU,
    Session,
    has_route,
    keep_final_state,
    open_session,
    row_menu_item,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.browser

SECRET = "browser-test-hs256-secret-0123456789abcdef"


def token(role: str, *, exp_in: int = 600) -> str:
    now = int(time.time())
    claims = {"sub": f"{role}-user", "iat": now, "exp": now + exp_in, "roles": [role]}
    return jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("auth"), env={"SARDEENZ_JWT_SECRET": SECRET})
    if not has_route(srv, "/api/auth/me"):
        stop_server(srv)
        pytest.skip("this server has no /api/auth/me yet (auth not implemented)")
    with srv.client() as api:
        api.headers["Authorization"] = f"Bearer {token('admin')}"
        inst = sim_load(
            api,
            "auth-model",
            "--memory-gib",
            "1",
            served_model_name="auth-sim",
            enableSleepMode=True,
        )
        wait_for_status(api, inst["id"], "active")
    yield srv
    stop_server(srv)


@pytest.fixture
def auth_session(
    browser: Browser, auth_server: ServerProcess, request: pytest.FixtureRequest
) -> Iterator[Session]:
    s = open_session(browser, auth_server.url)
    yield s
    keep_final_state(s, request.node)
    s.page.context.close()
    assert s.unexpected_errors() == [], "console errors"


def log_in(page: Page, bearer: str) -> None:
    expect(page.get_by_role("heading", name="Log in to Sardeenz")).to_be_visible()
    page.get_by_label("Bearer token").fill(bearer)
    page.get_by_role("button", name="Log in with token").click()


MUTATING = [
    "Load model",
    "Sleep",
    "Wake",
    "Unload",
    "New benchmark",
    "Create from instance",
    "Check fit",
    "Delete",
]


def assert_no_mutating_buttons(page: Page) -> None:
    for name in MUTATING:
        expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
        expect(page.get_by_role("link", name=name, exact=True)).to_have_count(0)
    # The models table's Sleep, Wake and Unload sit in a row's kebab: there is none.
    expect(page.get_by_role("button", name=ROW_MENU)).to_have_count(0)


def test_read_only_token_shows_no_mutating_buttons(auth_session: Session) -> None:
    page = auth_session.page
    auth_session.goto("/models")  # a deep link: the login page comes first, then this page
    log_in(page, token("admin-readonly"))
    expect(page.locator("[data-role]")).to_have_attribute("data-role", "admin-readonly")
    expect(page.get_by_role("link", name="auth-sim")).to_be_visible()
    # Each page once its data is shown (an empty page would pass vacuously).
    loaded = {
        "Models": "auth-sim",
        "Dashboard": "auth-sim",
        "Benchmarks": "No benchmark runs yet",
        "Memory profiles": "No memory profiles",
        "Audit log": "POST /api/v1/models/load",
    }
    for section, content in loaded.items():
        page.get_by_role("navigation").get_by_role("link", name=section, exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(section)
        expect(page.get_by_role("main").get_by_text(content).first).to_be_visible()
        assert_no_mutating_buttons(page)
    page.get_by_role("link", name="Models").click()
    page.get_by_role("link", name="auth-sim").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("auth-sim")
    assert_no_mutating_buttons(page)


def test_admin_token_sees_the_buttons_and_a_refused_token_goes_back_to_login(
    auth_session: Session,
) -> None:
    page = auth_session.page
    auth_session.allow(r"status of 401")  # the browser logs the refused requests
    auth_session.goto("/")
    log_in(page, "not-a-jwt")
    expect(page.get_by_text("the token is not a JWT")).to_be_visible()
    log_in(page, token("admin"))
    page.get_by_role("link", name="Models").click()
    expect(page.get_by_role("button", name="Load model")).to_be_visible()
    expect(row_menu_item(page.locator("tr[data-instance-id]").first, "Unload")).to_be_visible()
    page.keyboard.press("Escape")
    # The token is swapped for one that has expired: the next request is refused.
    page.evaluate(f"sessionStorage.setItem('sardeenz.token', {token('admin', exp_in=-3600)!r})")
    page.get_by_role("link", name="Dashboard").click()
    expect(page.get_by_role("heading", name="Log in to Sardeenz")).to_be_visible()
    expect(page.get_by_text("log in again")).to_be_visible()
