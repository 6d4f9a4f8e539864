"""OpenShift-style sign-in against the real kube-apiserver: TokenReview + SubjectAccessReview.

A real ``sardeenz serve`` runs with ``SARDEENZ_TOKEN_REVIEW`` and the ServiceAccount token
of an account granted exactly the ClusterRole of deploy/kubernetes/overlays/openshift
(read from that file). Callers are ServiceAccounts of the API server (their tokens come
from the TokenRequest API, as a kubelet's would), so their groups are real:

- ``alice`` (namespace ``adm``): its group ``system:serviceaccounts:<adm>`` is mapped to
  ``admin`` and to the ``/v1`` role: admin API and inference work;
- ``carol`` (another namespace) is granted ``get services`` in Sardeenz's namespace by a
  Role: the SubjectAccessReview makes her ``admin-readonly``;
- ``bob`` (another namespace, no grant): his token is good, and every role is refused (403);
- a deleted ServiceAccount's token is refused once the accepted review's cache TTL is over;
- the ClusterRole without one of its rules: Sardeenz answers 503 naming the missing grant,
  and works again when it is restored.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml

from sardeenz.tls import client_tls
from testkit.kube import KubeApiServer
from testkit.oauth import OAuthServer
from testkit.servers import HTTP, ServerPool, ServerProcess, load_active

pytestmark = pytest.mark.kube

MANIFEST = (
    Path(__file__).resolve().parents[2] / "deploy/kubernetes/overlays/openshift/auth-delegator.yaml"
)
CACHE_SECONDS = 3
RBAC_PROPAGATION_SECONDS = 20.0
"""The authorizer learns RBAC changes through an informer: under a second on an idle
machine; the bound leaves room for loaded cores."""
MODEL = "kube-review-m"
OAUTH_CLIENT = "sardeenz-dashboard"
OAUTH_SECRET = "oauth-client-secret-for-tests"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
API_SERVER_CACHE_SECONDS = 30.0
"""The API server caches its own token authentications (10 s in 1.20): the bound on when
it refuses a deleted account's token."""
MARGIN_SECONDS = 5.0
"""Polling and a loaded machine, on top of Sardeenz's cache TTL."""


@dataclass
class Setup:
    kube: KubeApiServer
    app_ns: str
    adm_ns: str
    other_ns: str
    srv: ServerProcess
    cluster_role: dict[str, Any]
    oauth: OAuthServer

    def token(self, namespace: str, name: str) -> str:
        return self.kube.service_account_token(namespace, name, expiration_seconds=3600)


def _manifest() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    return docs["ClusterRole"], docs["ClusterRoleBinding"]


def _post(kube: KubeApiServer, path: str, body: dict[str, Any]) -> None:
    with kube.client() as admin:
        resp = admin.post(path, json=body)
    assert resp.status_code in (200, 201), resp.text


RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def setup(
    kube: KubeApiServer,
    module_server_factory: ServerPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    app_ns, adm_ns, other_ns = (kube.create_namespace() for _ in range(3))
    kube.create_service_account(app_ns, "sardeenz")
    role, binding = _manifest()
    role = copy.deepcopy(role)
    role["metadata"]["name"] = f"{app_ns}-auth"  # cluster-wide names: one per test module
    binding = copy.deepcopy(binding)
    binding["metadata"]["name"] = f"{app_ns}-auth"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    binding["subjects"][0]["namespace"] = app_ns
    _post(kube, f"{RBAC}/clusterroles", role)
    _post(kube, f"{RBAC}/clusterrolebindings", binding)
    kube.create_service_account(adm_ns, "alice")
    kube.create_service_account(other_ns, "bob")
    kube.create_service_account(other_ns, "carol")  # granted below, in Sardeenz's namespace
    _post(
        kube,
        f"{RBAC}/namespaces/{app_ns}/roles",
        {
            "metadata": {"name": "viewer"},
            "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}],
        },
    )
    _post(
        kube,
        f"{RBAC}/namespaces/{app_ns}/rolebindings",
        {
            "metadata": {"name": "viewer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "carol", "namespace": other_ns}],
        },
    )
    sa_dir = kube.write_service_account_dir(
        tmp_path_factory.mktemp("sa") / "sa", app_ns, kube.service_account_token(app_ns, "sardeenz")
    )
    admins = f"system:serviceaccounts:{adm_ns}"
    srv = module_server_factory(
        extra_env={
            "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_ID": OAUTH_CLIENT,
            "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET": OAUTH_SECRET,
            "SARDEENZ_CLUSTER_MODE": "single",
            "SARDEENZ_KUBE_API_URL": kube.url,
            "SARDEENZ_KUBE_SERVICE_ACCOUNT_DIR": str(sa_dir),
            "SARDEENZ_TOKEN_REVIEW": "true",
            "SARDEENZ_TOKEN_REVIEW_ROLE_GROUPS": json.dumps(
                {"admin": [admins], "inference": [admins]}
            ),
            # No namespace: the pod's (the ServiceAccount directory's namespace file).
            "SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS": json.dumps(
                {"admin-readonly": {"verb": "get", "resource": "services", "name": "sardeenz"}}
            ),
            "SARDEENZ_TOKEN_REVIEW_CACHE_SECONDS": str(CACHE_SECONDS),
            "SARDEENZ_TOKEN_REVIEW_NEGATIVE_CACHE_SECONDS": "1",
            "SARDEENZ_V1_BEARER_AUTH": "true",
            "SARDEENZ_V1_ROLE": "inference",
            "SARDEENZ_V1_TOKEN_CACHE_SECONDS": str(CACHE_SECONDS),
        }
    )
    # The OAuth server knows the dashboard's callback, as an OAuthClient's redirectURIs do.
    oauth = OAuthServer(OAUTH_CLIENT, OAUTH_SECRET, f"{srv.url}/auth/callback")
    srv.env["SARDEENZ_OPENSHIFT_OAUTH_URL"] = oauth.url
    try:
        srv.start()
        yield Setup(kube, app_ns, adm_ns, other_ns, srv, role, oauth)
    finally:
        oauth.close()
        with kube.client() as admin:  # cluster-scoped: the namespaces do not take them along
            for kind in ("clusterrolebindings", "clusterroles"):
                gone = admin.delete(f"{RBAC}/{kind}/{app_ns}-auth")
                assert gone.status_code in (200, 202, 404), gone.text


def _me(setup: Setup, token: str) -> httpx.Response:
    return HTTP.get(
        f"{setup.srv.url}/api/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _client(setup: Setup, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=setup.srv.url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        verify=client_tls(),
    )


def test_a_service_account_token_is_reviewed_and_mapped_to_a_role(setup: Setup) -> None:
    alice = setup.token(setup.adm_ns, "alice")
    me = _me(setup, alice)
    assert me.status_code == 200, me.text
    assert me.json()["subject"] == f"system:serviceaccount:{setup.adm_ns}:alice"
    assert me.json()["role"] == "admin"
    # Admin: it may change state (load a model), and the model answers on /v1 with the
    # same token (its group also grants the /v1 role).
    with _client(setup, alice) as api:
        load_active(api, MODEL, "--ttft-ms", "5", "--itl-ms", "5")
        chat = api.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert chat.status_code == 200, chat.text
    # The access review: carol may get the Service, so she reads and cannot write.
    carol = setup.token(setup.other_ns, "carol")
    me = _me(setup, carol)
    assert me.status_code == 200, me.text
    assert me.json()["role"] == "admin-readonly"
    with _client(setup, carol) as api:
        assert api.get("/api/v1/tenants").status_code == 200
        put = api.put("/api/v1/tenants/t-carol", json={"limits": {"requests_per_minute": 5}})
    assert put.status_code == 403, put.text
    assert put.json()["code"] == "forbidden"


def test_a_user_without_the_group_is_refused(setup: Setup) -> None:
    bob = setup.token(setup.other_ns, "bob")
    me = _me(setup, bob)
    assert me.status_code == 403, me.text
    assert me.json()["code"] == "forbidden"
    with _client(setup, bob) as api:
        chat = api.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert chat.status_code == 403, chat.text
    assert chat.json()["error"]["code"] == "forbidden"
    # A token the API server does not know: 401 on both sides.
    forged = setup.token(setup.adm_ns, "alice")[:-6] + "AAAAAA"
    me = _me(setup, forged)
    assert me.status_code == 401, me.text
    assert me.json()["code"] == "invalid_token"
    with _client(setup, forged) as api:
        chat = api.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert chat.status_code == 401, chat.text


def test_a_deleted_service_accounts_token_is_refused_after_the_cache_ttl(
    setup: Setup,
) -> None:
    setup.kube.create_service_account(setup.adm_ns, "temp")
    token = setup.token(setup.adm_ns, "temp")
    accepted = _me(setup, token)
    assert accepted.status_code == 200, accepted.text
    accepted_at = time.monotonic()
    with setup.kube.client() as admin:
        gone = admin.delete(f"/api/v1/namespaces/{setup.adm_ns}/serviceaccounts/temp")
    assert gone.status_code == 200, gone.text
    # The API server refuses it once its own token cache (10 s in 1.20) lets go...
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    deadline = time.monotonic() + API_SERVER_CACHE_SECONDS
    while True:
        with setup.kube.client() as admin:
            status = admin.post(TOKEN_REVIEWS, json=review).json()["status"]
        if not status.get("authenticated"):
            break
        assert time.monotonic() < deadline, "the API server still accepts the token"
        time.sleep(0.2)
    api_refused = time.monotonic()
    # ...and Sardeenz at most its own cache TTL later.
    deadline = api_refused + CACHE_SECONDS + MARGIN_SECONDS
    while (resp := _me(setup, token)).status_code == 200:
        assert time.monotonic() < deadline, "a deleted account's token still accepted"
        time.sleep(0.2)
    now = time.monotonic()
    print(
        f"\ndeleted account's token: refused by the API server {api_refused - accepted_at:.1f}s"
        f" and by Sardeenz {now - accepted_at:.1f}s after its first review"
    )
    assert resp.status_code == 401, resp.text
    assert resp.json()["code"] == "invalid_token"


def _without_rule(setup: Setup, resource: str) -> dict[str, Any]:
    reduced = copy.deepcopy(setup.cluster_role)
    reduced["rules"] = [r for r in reduced["rules"] if r["resources"] != [resource]]
    return reduced


def _put_cluster_role(setup: Setup, role: dict[str, Any]) -> None:
    path = f"{RBAC}/clusterroles/{role['metadata']['name']}"
    with setup.kube.client() as admin:
        version = admin.get(path).json()["metadata"]["resourceVersion"]
        body = {**role, "metadata": {**role["metadata"], "resourceVersion": version}}
        resp = admin.put(path, json=body)
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("resource", ["tokenreviews", "subjectaccessreviews"])
def test_each_rule_of_the_cluster_role_is_needed(setup: Setup, resource: str) -> None:
    """Without one rule, a new token gets a 503 naming it (not a 401: the token may be
    good), without a hang; restored, the same token works."""
    assert {r["resources"][0] for r in setup.cluster_role["rules"]} == {
        "tokenreviews",
        "subjectaccessreviews",
    }
    _put_cluster_role(setup, _without_rule(setup, resource))
    try:
        # carol's role needs the access review; a fresh token every try (no cache).
        deadline = time.monotonic() + RBAC_PROPAGATION_SECONDS
        while True:
            t0 = time.monotonic()
            resp = _me(setup, setup.token(setup.other_ns, "carol"))
            took = time.monotonic() - t0
            assert took < 15, f"the review took {took:.1f}s"  # the timeout, never a hang
            if resp.status_code == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert resp.status_code == 503, resp.text
        assert resp.json()["code"] == "token_review_unavailable"
        assert f"may not create {resource}" in resp.json()["detail"]
        assert int(resp.headers["retry-after"]) >= 1
    finally:
        _put_cluster_role(setup, setup.cluster_role)
    deadline = time.monotonic() + RBAC_PROPAGATION_SECONDS + 30  # + the backoff (<= 30 s)
    token = setup.token(setup.other_ns, "carol")
    while (resp := _me(setup, token)).status_code != 200:
        assert resp.status_code == 503, resp.text
        assert time.monotonic() < deadline, "still refused with the ClusterRole restored"
        time.sleep(0.5)
    assert resp.json()["role"] == "admin-readonly"


# --- the dashboard's sign-in through the OAuth server -------------------------------------


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _authorize(setup: Setup, challenge: str) -> tuple[str, str]:
    """What the dashboard's login does (frontend/src/auth/oidc.ts), from /api/auth/config:
    the browser goes to the authorization endpoint and comes back with a code."""
    config = HTTP.get(f"{setup.srv.url}/api/auth/config", timeout=10).json()
    oidc = config["oidc"]
    assert oidc["provider"] == "openshift"
    assert oidc["authorizationEndpoint"] == f"{setup.oauth.url}/oauth/authorize"
    assert oidc["tokenEndpoint"] == "/api/auth/openshift/token"
    assert oidc["clientId"] == OAUTH_CLIENT
    redirect = f"{setup.srv.url}/auth/callback"
    state = secrets.token_urlsafe(8)
    back = HTTP.get(
        oidc["authorizationEndpoint"],
        params={
            "response_type": "code",
            "client_id": oidc["clientId"],
            "redirect_uri": redirect,
            "scope": oidc["scope"],
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
        timeout=10,
    )
    assert back.status_code == 302, back.text
    assert setup.oauth.last_scope == "user:info user:check-access"
    query = parse_qs(urlsplit(back.headers["location"]).query)
    assert query["state"] == [state]
    return query["code"][0], redirect


def _exchange(setup: Setup, **form: str) -> httpx.Response:
    return HTTP.post(
        f"{setup.srv.url}/api/auth/openshift/token",
        data={"grant_type": "authorization_code", "client_id": OAUTH_CLIENT, **form},
        timeout=20,
    )


def test_the_dashboard_signs_in_through_the_oauth_server(setup: Setup) -> None:
    # The user who signs in at the OAuth server: alice (a real token the API server knows).
    setup.oauth.user_token = setup.token(setup.adm_ns, "alice")
    verifier, challenge = _pkce()
    code, redirect = _authorize(setup, challenge)
    # The browser holds no client secret: Sardeenz adds it for the code exchange.
    resp = _exchange(setup, code=code, redirect_uri=redirect, code_verifier=verifier)
    assert resp.status_code == 200, resp.text
    access = resp.json()["access_token"]
    assert resp.json()["token_type"] == "Bearer"
    me = _me(setup, access)
    assert me.status_code == 200, me.text
    assert me.json()["role"] == "admin"
    assert me.json()["subject"] == f"system:serviceaccount:{setup.adm_ns}:alice"
    # A code is good once.
    again = _exchange(setup, code=code, redirect_uri=redirect, code_verifier=verifier)
    assert again.status_code == 400, again.text
    assert again.json()["code"] == "oauth_refused"
    assert "invalid_grant" in again.json()["detail"]


def test_a_bad_exchange_is_a_clear_refusal(setup: Setup) -> None:
    setup.oauth.user_token = setup.token(setup.adm_ns, "alice")
    verifier, challenge = _pkce()
    code, redirect = _authorize(setup, challenge)
    wrong = _exchange(setup, code=code, redirect_uri=redirect, code_verifier=verifier + "x")
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["code"] == "oauth_refused"
    asked = setup.oauth.token_requests
    for form, code_ in (
        ({"code": "c", "redirect_uri": redirect, "client_id": "someone-else"}, "oauth_bad_request"),
        ({"redirect_uri": redirect}, "oauth_bad_request"),
        ({"code": "c", "redirect_uri": redirect, "grant_type": "password"}, "oauth_bad_request"),
    ):
        resp = _exchange(setup, **form)
        assert resp.status_code == 400, resp.text
        assert resp.json()["code"] == code_
    assert setup.oauth.token_requests == asked  # refused here, never sent on
    # Read before any token, so small and declared: a large or chunked body is refused
    # as any anonymous /api body is.
    big = _exchange(setup, code="c" * 9000, redirect_uri=redirect)
    assert big.status_code == 401, big.text
    chunked = HTTP.post(
        f"{setup.srv.url}/api/auth/openshift/token",
        content=iter([b"grant_type=authorization_code"]),
        headers={"content-type": "application/x-www-form-urlencoded"},
        timeout=10,
    )
    assert chunked.status_code == 401, chunked.text
