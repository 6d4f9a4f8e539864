"""The dashboard signs in through an OAuth server with OpenShift's interface, in a browser.

The real OpenShift OAuth server cannot run here: testkit/oauth.py serves its HTTP interface
(``/oauth/authorize``, ``/oauth/token``, PKCE, a confidential client). The browser clicks
"Log in with <OAuth host>", is sent to the authorization endpoint with OpenShift's scopes,
comes back to ``/auth/callback`` with a code, and the dashboard has Sardeenz exchange it
(the browser never holds the client secret). The access token the stand-in issues is an
HS256 JWT of the server's secret, so this tier needs no API server (the review of a real
OpenShift token is the kube tier's: tests/kube/test_kube_tokenreview.py).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import jwt
import pytest
from playwright.sync_api import Browser, expect

from testkit.oauth import OAuthServer
from testkit.servers import ServerProcess
from tests.browser.conftest import (
    Session,
    keep_final_state,
    open_session,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.browser

SECRET = "browser-oauth-hs256-secret-0123456789abcdef"
CLIENT, CLIENT_SECRET = "sardeenz", "browser-oauth-client-secret"


@pytest.fixture(scope="module")
def signed_in_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, OAuthServer]]:
    oauth = OAuthServer(CLIENT, CLIENT_SECRET, redirect_uri="")
    with socket.socket() as closed:  # no API server: this tier's tokens are JWTs
        closed.bind(("127.0.0.1", 0))
        api_server = f"http://127.0.0.1:{closed.getsockname()[1]}"
    srv = start_server(
        tmp_path_factory.mktemp("oauth"),
        env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_TOKEN_REVIEW": "true",
            "SARDEENZ_CLUSTER_MODE": "single",
            "SARDEENZ_KUBE_API_URL": api_server,
            "SARDEENZ_KUBE_SERVICE_ACCOUNT_DIR": str(tmp_path_factory.mktemp("no-sa")),
            "SARDEENZ_OPENSHIFT_OAUTH_URL": oauth.url,
            "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_ID": CLIENT,
            "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET": CLIENT_SECRET,
        },
    )
    oauth.redirect_uri = f"{srv.url}/auth/callback"  # the OAuthClient's redirectURIs
    try:
        yield srv, oauth
    finally:
        stop_server(srv)
        oauth.close()


@pytest.fixture
def oauth_session(
    browser: Browser,
    signed_in_server: tuple[ServerProcess, OAuthServer],
    request: pytest.FixtureRequest,
) -> Iterator[Session]:
    s = open_session(browser, signed_in_server[0].url)
    yield s
    keep_final_state(s, request.node)
    s.page.context.close()
    assert s.unexpected_errors() == [], "console errors"


def test_the_dashboard_signs_in_through_the_oauth_server(
    oauth_session: Session, signed_in_server: tuple[ServerProcess, OAuthServer]
) -> None:
    _, oauth = signed_in_server
    now = int(time.time())
    oauth.user_token = jwt.encode(
        {"sub": "ocp-user", "iat": now, "exp": now + 600, "roles": ["admin"]}, SECRET
    )
    page = oauth_session.page
    oauth_session.goto("/models")  # a deep link: back here after the sign-in
    expect(page.get_by_role("heading", name="Log in to Sardeenz")).to_be_visible()
    host = oauth.url.removeprefix("http://")
    page.get_by_role("button", name=f"Log in with {host}").click()
    expect(page.locator("[data-role]")).to_have_attribute("data-role", "admin")
    expect(page.get_by_role("heading", level=1)).to_have_text("Models")
    assert oauth.last_scope == "user:info user:check-access"
    assert oauth.token_requests == 1  # one exchange, made by Sardeenz with the secret
    assert not oauth.grants  # the code was redeemed
