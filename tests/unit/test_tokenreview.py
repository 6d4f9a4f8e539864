"""Token reviews without an API server: roles, the caches, one review per token, backoff.

The reviewer's one way out (``post``) is given the API server's answers as real
``httpx.Response`` objects, so every decision here (401 vs 503, what is cached and for how
long, when the API server is asked again) is exact. The real API server is in
tests/kube/test_kube_tokenreview.py; a real socket that never answers is at the end.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from sardeenz.config import ConfigError, Settings, load_settings
from sardeenz.security import tokenreview
from sardeenz.security.auth import ApiKeys, Authenticator, AuthError, Forbidden
from sardeenz.security.callers import BearerCallers
from sardeenz.security.openshift_oauth import OAuthUnavailable, OpenShiftOAuth
from sardeenz.security.tokenreview import ReviewUnavailable, TokenReviewer
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.spec import Limits, Tenant
from testkit.waiting import within

SECRET = "s3cr3t-hs256-key-for-tests-only-0123456789"
ACCESS = {"namespace": "ai", "verb": "update", "resource": "services", "name": "sardeenz"}


def _settings(**extra: Any) -> Settings:
    base: dict[str, Any] = {
        "token_review": True,
        "token_review_role_groups": {"admin-readonly": ["viewers"]},
        "token_review_role_access": {"admin": ACCESS},
        "token_review_timeout_seconds": 2.0,
    }
    return Settings(**{**base, **extra})


class FakeApiServer:
    """Answers reviews from a table: token -> (user, groups); user -> allowed."""

    def __init__(self) -> None:
        self.users: dict[str, tuple[str, list[str]]] = {}
        self.allowed: set[str] = set()
        self.calls: list[str] = []
        self.fail: int | None = None  # answer this status instead
        self.fail_access: int | None = None  # ... to access reviews only
        self.gate: asyncio.Event | None = None

    async def post(self, path: str, body: dict[str, Any], seconds: float) -> httpx.Response:
        self.calls.append(path.rsplit("/", 1)[-1])
        if self.gate is not None:
            await self.gate.wait()
        request = httpx.Request("POST", f"https://api{path}")
        fail = self.fail if path == tokenreview.TOKEN_REVIEWS else self.fail or self.fail_access
        if fail is not None:
            return httpx.Response(fail, json={"message": "no"}, request=request)
        spec = body["spec"]
        if path == tokenreview.TOKEN_REVIEWS:
            found = self.users.get(spec["token"])
            status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
            if found is not None:
                status = {
                    "authenticated": True,
                    "user": {"username": found[0], "uid": "u1", "groups": found[1]},
                }
        else:
            assert spec["resourceAttributes"] == ACCESS  # its namespace, not the default
            status = {"allowed": spec["user"] in self.allowed}
        return httpx.Response(201, json={"status": status}, request=request)


@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.users = {
        "tok-admin": ("alice", ["system:authenticated"]),
        "tok-viewer": ("bob", ["viewers", "system:authenticated"]),
        "tok-nobody": ("carol", ["system:authenticated"]),
    }
    server.allowed = {"alice"}
    return server


async def test_roles_come_from_groups_and_access_reviews(api: FakeApiServer) -> None:
    reviewer = TokenReviewer(_settings(), api.post)
    admin = await reviewer.review("tok-admin")
    assert (admin.subject, admin.roles) == ("alice", frozenset({"admin"}))
    viewer = await reviewer.review("tok-viewer")
    assert viewer.roles == frozenset({"admin-readonly"})
    assert viewer.groups == frozenset({"viewers", "system:authenticated"})
    nobody = await reviewer.review("tok-nobody")
    assert nobody.roles == frozenset()
    assert api.calls == ["tokenreviews", "subjectaccessreviews"] * 3


async def test_answers_are_cached_both_ways_for_their_ttl(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(tokenreview, "_mono", lambda: clock[0])
    reviewer = TokenReviewer(
        _settings(token_review_cache_seconds=30, token_review_negative_cache_seconds=5),
        api.post,
    )
    await reviewer.review("tok-admin")
    with pytest.raises(AuthError) as refused:
        await reviewer.review("tok-unknown")
    assert (refused.value.status, refused.value.code) == (401, "invalid_token")
    calls = len(api.calls)
    clock[0] += 4.9
    await reviewer.review("tok-admin")
    with pytest.raises(AuthError):
        await reviewer.review("tok-unknown")
    assert len(api.calls) == calls  # both from the cache
    clock[0] += 0.2  # the refusal's 5 s are over, the acceptance's 30 s are not
    with pytest.raises(AuthError):
        await reviewer.review("tok-unknown")
    assert api.calls[calls:] == ["tokenreviews"]
    # The token's owner is deleted: it keeps working until the TTL, then is refused.
    del api.users["tok-admin"]
    clock[0] += 20
    assert (await reviewer.review("tok-admin")).subject == "alice"
    clock[0] += 5
    with pytest.raises(AuthError):
        await reviewer.review("tok-admin")


async def test_the_cache_is_bounded_oldest_first(api: FakeApiServer) -> None:
    api.users.update({f"t{i}": (f"u{i}", []) for i in range(5)})
    reviewer = TokenReviewer(_settings(token_review_cache_size=3), api.post)
    for i in range(5):
        await reviewer.review(f"t{i}")
    assert len(reviewer._cache) == 3
    before = len(api.calls)
    await reviewer.review("t4")
    assert len(api.calls) == before
    await reviewer.review("t0")  # forgotten: asked again
    assert len(api.calls) == before + 2


async def test_concurrent_requests_with_one_token_share_one_review(api: FakeApiServer) -> None:
    api.gate = asyncio.Event()
    reviewer = TokenReviewer(_settings(), api.post)
    waiting = [asyncio.create_task(reviewer.review("tok-viewer")) for _ in range(20)]
    await asyncio.sleep(0)
    api.gate.set()
    principals = await asyncio.gather(*waiting)
    assert {p.subject for p in principals} == {"bob"}
    assert api.calls == ["tokenreviews", "subjectaccessreviews"]


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_a_failing_api_server_is_a_503_then_backoff_without_calls(
    api: FakeApiServer, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.fail = status
    reviewer = TokenReviewer(_settings(token_review_timeout_seconds=0.5), api.post)
    with pytest.raises(ReviewUnavailable) as first:
        await reviewer.review("tok-admin")
    assert first.value.status == 503
    assert first.value.code == "token_review_unavailable"
    assert first.value.retry_after >= 1
    retried = len(api.calls)
    assert retried >= 2  # retried inside the deadline
    # Within the backoff the API server is not asked at all.
    with pytest.raises(ReviewUnavailable):
        await reviewer.review("tok-viewer")
    assert len(api.calls) == retried
    # A failure is never cached as a refusal: once it answers, the token is good.
    api.fail = None
    monkeypatch.setattr(tokenreview, "_mono", lambda: time.monotonic() + 60)
    assert (await reviewer.review("tok-admin")).roles == frozenset({"admin"})
    assert reviewer._backoff == 0.0


async def test_sardeenz_refused_by_rbac_is_a_503_naming_the_grant(api: FakeApiServer) -> None:
    api.fail = 403
    reviewer = TokenReviewer(_settings(), api.post)
    with pytest.raises(ReviewUnavailable) as exc:
        await reviewer.review("tok-admin")
    assert "may not create tokenreviews" in exc.value.message
    assert api.calls == ["tokenreviews"]  # not retried: it will not change by itself


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A real listening socket that accepts and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


async def test_an_api_server_that_never_answers_is_a_503_within_the_timeout(
    silent_port: int, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text("sa-token")
    settings = _settings(
        kube_api_url=f"http://127.0.0.1:{silent_port}",
        kube_service_account_dir=tmp_path,
        token_review_timeout_seconds=0.5,
    )
    reviewer = TokenReviewer(settings)
    await reviewer.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(ReviewUnavailable) as exc:
            await reviewer.review("tok-admin")
        took = time.monotonic() - t0
        assert "no answer within 0.5 s" in exc.value.message
        assert took < 5, f"the review took {took:.1f} s"  # bounded by the deadline, not hung
    finally:
        await reviewer.close()


async def test_a_refused_connection_is_a_503(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        settings = _settings(
            kube_api_url=f"http://127.0.0.1:{port}",
            kube_service_account_dir=tmp_path,
            token_review_timeout_seconds=0.5,
        )
        reviewer = TokenReviewer(settings)
        await reviewer.start()
        try:
            with pytest.raises(ReviewUnavailable) as exc:
                await reviewer.review("tok-admin")
            assert "ConnectError" in exc.value.message
        finally:
            await reviewer.close()


# ------------------------------------------------------------ who reviews what


def test_tokens_of_the_configured_issuers_are_verified_here_others_reviewed() -> None:
    auth = Authenticator(_settings(jwt_secret=SECRET, kube_api_url="https://127.0.0.1:1"))
    hs = jwt.encode({"sub": "x", "exp": time.time() + 60}, SECRET, algorithm="HS256")
    assert auth._verifies(hs)
    assert not auth._verifies("sha256~opaque-openshift-token")
    # A ServiceAccount token: RS256 signed by the API server's key; this node has no JWKS.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa = jwt.encode({"sub": "system:serviceaccount:ai:x"}, key, algorithm="RS256")
    assert not auth._verifies(sa)


def test_role_access_with_a_typo_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="unknown resourceAttributes"):
        _settings(token_review_role_access={"admin": {"verbs": "get", "resource": "x"}})
    with pytest.raises(ValueError, match="needs a 'verb' and a 'resource'"):
        _settings(token_review_role_access={"admin": {"verb": "get"}})


# ----------------------------------------------------------------- /v1 callers


async def test_bearer_callers_map_to_tenants_and_keep_model_scopes() -> None:
    settings = load_settings(
        jwt_secret=SECRET, v1_bearer_auth=True, jwt_models_claim="models", v1_role="inference"
    )
    auth = Authenticator(settings)
    callers = BearerCallers(auth, settings)
    admission = Admission()
    rpm = Limits(requests_per_minute=5)
    admission.configure(
        [
            Tenant(name="team-a", source="api", subjects=["alice"], limits=rpm),
            Tenant(name="team-b", source="api", groups=["ml"], limits=rpm),
        ]
    )
    callers.member_of = admission.member_of_principal
    keys = ApiKeys([])
    keys.tokens = callers

    def bearer(sub: str, **claims: Any) -> bytes:
        payload = {"sub": sub, "exp": int(time.time()) + 60, "roles": ["inference"], **claims}
        return b"Bearer " + jwt.encode(payload, SECRET, algorithm="HS256").encode()

    alice = bearer("alice", models=["m1"])
    assert keys.identify(alice) is None  # not seen yet: the slow way first
    caller = await callers.authenticate(alice)
    assert (caller.id, caller.member) == ("jwt:alice", "sub:alice")
    assert caller.models == frozenset({"m1"})
    assert keys.identify(alice) == caller  # now from memory
    assert admission.tenant_of_key(caller.member) == "team-a"
    assert admission.admit(caller.member, "m1", {}, 10) is not None

    bob = await callers.authenticate(bearer("bob", groups=["zz", "ml"]))
    assert bob.member == "group:ml"
    assert bob.models is None
    assert admission.tenant_of_key(bob.member) == "team-b"
    nobody = await callers.authenticate(bearer("carol"))
    assert admission.admit(nobody.member, "m1", {}, 10) is None  # no tenant: not limited

    with pytest.raises(Forbidden, match="role 'inference' required") as refused:
        await callers.authenticate(
            b"Bearer " + jwt.encode({"sub": "dave", "exp": int(time.time()) + 60}, SECRET).encode()
        )
    assert refused.value.status == 403


def test_bearer_auth_without_a_token_source_is_a_config_error() -> None:
    settings = load_settings(v1_bearer_auth=True)
    with pytest.raises(ConfigError, match="SARDEENZ_V1_BEARER_AUTH needs a token source"):
        BearerCallers(Authenticator(settings), settings)


# ------------------------------------------------------------ OpenShift OAuth exchange


def test_openshift_sign_in_needs_its_client_and_token_review() -> None:
    with pytest.raises(ConfigError, match="CLIENT_ID and SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET"):
        Authenticator(
            load_settings(
                openshift_oauth_url="https://oauth.example",
                token_review=True,
                kube_api_url="https://127.0.0.1:1",
            )
        )
    with pytest.raises(ConfigError, match="needs SARDEENZ_TOKEN_REVIEW=true"):
        Authenticator(
            load_settings(
                openshift_oauth_url="https://oauth.example",
                openshift_oauth_client_id="c",
                openshift_oauth_client_secret="s",
            )
        )


async def test_an_oauth_server_that_does_not_answer_is_a_503() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        oauth = OpenShiftOAuth(
            load_settings(
                openshift_oauth_url=f"http://127.0.0.1:{sock.getsockname()[1]}",
                openshift_oauth_client_id="c",
                openshift_oauth_client_secret="s",
                token_review=True,
            )
        )
        with pytest.raises(OAuthUnavailable) as exc:
            await oauth.exchange(
                {"grant_type": "authorization_code", "code": "x", "redirect_uri": "https://h/cb"}
            )
    assert exc.value.status == 503
    assert exc.value.code == "oauth_unavailable"


async def test_a_caller_that_leaves_does_not_cancel_the_review_of_the_others(
    api: FakeApiServer,
) -> None:
    api.gate = asyncio.Event()
    reviewer = TokenReviewer(_settings(), api.post)
    first = asyncio.create_task(reviewer.review("tok-viewer"))
    second = asyncio.create_task(reviewer.review("tok-viewer"))
    await asyncio.sleep(0)
    first.cancel()  # its client went away
    await asyncio.sleep(0)
    api.gate.set()
    assert (await within(second, 5, "the review of the caller that stayed")).subject == "bob"
    assert first.cancelled()
    assert api.calls == ["tokenreviews", "subjectaccessreviews"]


async def test_an_access_review_without_an_answer_fails_the_review_uncached(
    api: FakeApiServer,
) -> None:
    two = {"admin": ACCESS, "admin-readonly": ACCESS}
    api.fail_access = 503
    reviewer = TokenReviewer(
        _settings(token_review_role_groups={}, token_review_role_access=two,
                  token_review_timeout_seconds=0.3),
        api.post,
    )  # fmt: skip
    with pytest.raises(ReviewUnavailable):
        await reviewer.review("tok-admin")
    assert not reviewer._cache  # neither accepted nor refused: the API server did not say


def test_token_review_without_an_api_server_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="needs the Kubernetes API server"):
        TokenReviewer(_settings())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod: its API server
    TokenReviewer(_settings())
