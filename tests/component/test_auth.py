"""Authentication and RBAC over every route, HS256 and RS256, plus secret hygiene."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from sardeenz.app import create_app
from sardeenz.config import load_settings
from sardeenz.security.policy import (
    PUBLIC_POSTS,
    QUERY_POSTS,
    is_mutation,
    iter_api_routes,
    policy_of,
)
from sardeenz.tls import client_tls
from testkit.oauth import OidcIssuer
from testkit.servers import ServerPool, ServerProcess, sim_load, wait_for_status

SECRET = "s3cr3t-hs256-key-for-tests-only-0123456789"
ISSUER = "https://issuer.test"
AUDIENCE = "sardeenz"


def token(
    roles: list[str],
    *,
    key: Any = SECRET,
    alg: str = "HS256",
    kid: str | None = None,
    exp_in: float = 300,
    iss: str = ISSUER,
    aud: str = AUDIENCE,
    claim: str = "roles",
) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {
        "sub": "tester",
        "iss": iss,
        "aud": aud,
        "iat": now,
        "exp": now + int(exp_in),
        claim: roles,
    }
    headers = {"kid": kid} if kid else None
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


# --- every route declares a policy ------------------------------------------------


def test_every_api_route_has_a_policy_and_mutations_need_admin(tmp_path: Path) -> None:
    gateway = create_app(load_settings(data_dir=tmp_path))
    checked = 0
    for route in iter_api_routes(gateway.api.routes):
        if not route.path.startswith("/api"):
            continue
        policies = [p for p in (policy_of(d) for d in route.dependencies) if p is not None]
        assert len(policies) == 1, f"{route.methods} {route.path} declares no policy"
        if any(is_mutation(m, route.path) for m in route.methods or ()):
            assert policies == ["admin"], f"{route.methods} {route.path} admits {policies}"
        elif route.path in QUERY_POSTS:
            assert policies == ["admin-readonly"], f"{route.path} is a question: {policies}"
        elif route.path in PUBLIC_POSTS:  # how one signs in: the OAuth code exchange
            assert policies == ["public"], f"{route.path} is a sign-in: {policies}"
        checked += 1
    assert checked >= 12


# --- the matrix over real HTTP -------------------------------------------------------


def _routes(api: httpx.Client) -> list[tuple[str, str, bool]]:
    """(method, concrete path, is_public) for every /api operation in the OpenAPI doc."""
    doc = api.get("/openapi.json").json()
    out = []
    for path, ops in doc["paths"].items():
        if not path.startswith("/api"):
            continue
        concrete = path
        while "{" in concrete:
            start, end = concrete.index("{"), concrete.index("}")
            concrete = concrete[:start] + "nope" + concrete[end + 1 :]
        for method in ops:
            public = (
                path.startswith("/api/health") or path == "/api/auth/config" or path in PUBLIC_POSTS
            )
            out.append((method.upper(), concrete, public))
    # Routes served by the gateway itself, outside FastAPI:
    out.append(("GET", "/api/v1/metrics", False))
    out.append(("POST", "/api/direct/1/v1/completions", False))
    return out


def _call(api: httpx.Client, method: str, path: str, bearer: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    req = api.build_request(method, path, headers=headers, json={} if method != "GET" else None)
    resp = api.send(req, stream=True)  # SSE routes would never end: read the head only
    resp.close()
    return resp


def _code(api: httpx.Client, method: str, path: str, bearer: str | None) -> str | None:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    code: str | None = api.request(method, path, headers=headers).json().get("code")
    return code


def _assert_matrix(srv: ServerProcess, tokens: dict[str, str]) -> int:
    """Every /api operation against every kind of caller, through one client: each new
    ``httpx.Client`` loads the CA bundle (about 20 ms of CPU), and the two matrices make
    over a thousand calls."""
    with httpx.Client(base_url=srv.url, timeout=10, verify=client_tls()) as api:
        return _matrix_cases(api, tokens)


def _matrix_cases(api: httpx.Client, tokens: dict[str, str]) -> int:
    cases = 0
    for method, path, public in _routes(api):
        mutating = is_mutation(method, path)
        anon = _call(api, method, path, None)
        if public:
            assert anon.status_code not in (401, 403), (method, path)
            continue
        assert anon.status_code == 401, (method, path, anon.status_code)
        assert anon.headers["www-authenticate"].startswith("Bearer")
        for bad in ("expired", "bad_signature", "wrong_issuer", "wrong_audience"):
            resp = _call(api, method, path, tokens[bad])
            assert resp.status_code == 401, (bad, method, path, resp.status_code)
        ro = _call(api, method, path, tokens["readonly"])
        if mutating:
            assert ro.status_code == 403, (method, path, ro.status_code)
        else:
            assert ro.status_code not in (401, 403), (method, path, ro.status_code)
        admin = _call(api, method, path, tokens["admin"])
        assert admin.status_code not in (401, 403), (method, path, admin.status_code)
        assert admin.status_code < 500, (method, path, admin.status_code)
        cases += 1
    return cases


HS256_ENV = {
    "SARDEENZ_JWT_SECRET": SECRET,
    "SARDEENZ_JWT_ISSUER": ISSUER,
    "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
}


@pytest.fixture
def hs256_server(server_factory: Any) -> ServerProcess:
    srv: ServerProcess = server_factory(extra_env=HS256_ENV)
    return srv.start()


def test_hs256_matrix_over_every_route(hs256_server: ServerProcess) -> None:
    other_key = "another-secret-another-secret-0123456789"
    tokens = {
        "admin": token(["admin"]),
        "readonly": token(["admin-readonly"]),
        "expired": token(["admin"], exp_in=-3600),
        "bad_signature": token(["admin"], key=other_key),
        "wrong_issuer": token(["admin"], iss="https://evil.test"),
        "wrong_audience": token(["admin"], aud="someone-else"),
    }
    assert _assert_matrix(hs256_server, tokens) >= 12
    with hs256_server.client() as api:
        assert _code(api, "GET", "/api/v1/models", tokens["expired"]) == "token_expired"
        assert _code(api, "GET", "/api/v1/models", tokens["bad_signature"]) == "invalid_signature"
        assert _code(api, "GET", "/api/v1/models", tokens["wrong_issuer"]) == "invalid_issuer"
        assert _code(api, "GET", "/api/v1/models", tokens["wrong_audience"]) == "invalid_audience"
        assert _code(api, "GET", "/api/v1/models", None) == "missing_token"
        assert _code(api, "GET", "/api/v1/models", "not-a-jwt") == "invalid_token"
        none_role = token(["viewer"])
        assert _code(api, "GET", "/api/v1/models", none_role) == "forbidden"
        me = api.get(
            "/api/auth/me", headers={"Authorization": f"Bearer {tokens['readonly']}"}
        ).json()
    assert me == {
        "subject": "tester",
        "role": "admin-readonly",
        "roles": ["admin-readonly"],
        "authEnabled": True,
    }


@pytest.fixture
def rsa_issuer() -> Iterator[tuple[OidcIssuer, Any, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    issuer = OidcIssuer({"keys": [jwk]})
    yield issuer, key, other
    issuer.close()


def test_rs256_matrix_with_oidc_discovery(
    server_factory: Any, rsa_issuer: tuple[OidcIssuer, Any, Any]
) -> None:
    issuer, key, other = rsa_issuer
    srv: ServerProcess = server_factory(
        extra_env={
            "SARDEENZ_OIDC_ISSUER": issuer.url,
            "SARDEENZ_OIDC_CLIENT_ID": "sardeenz-ui",
            "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
            "SARDEENZ_JWT_ROLES_CLAIM": "realm_access.roles",
        }
    ).start()

    def rs(roles: list[str], **kw: Any) -> str:
        now = int(time.time())
        payload = {
            "sub": "rs-user",
            "iss": kw.get("iss", issuer.url),
            "aud": kw.get("aud", AUDIENCE),
            "iat": now,
            "exp": now + int(kw.get("exp_in", 300)),
            "realm_access": {"roles": roles},
        }
        return jwt.encode(payload, kw.get("key", key), algorithm="RS256", headers={"kid": "k1"})

    tokens = {
        "admin": rs(["admin"]),
        "readonly": rs(["admin-readonly"]),
        "expired": rs(["admin"], exp_in=-3600),
        "bad_signature": rs(["admin"], key=other),
        "wrong_issuer": rs(["admin"], iss="https://evil.test"),
        "wrong_audience": rs(["admin"], aud="someone-else"),
    }
    assert _assert_matrix(srv, tokens) >= 12
    with srv.client() as api:
        config = api.get("/api/auth/config").json()
    assert config["authEnabled"] is True
    assert config["oidc"]["authorizationEndpoint"] == f"{issuer.url}/authorize"
    assert config["oidc"]["clientId"] == "sardeenz-ui"


# --- inference API keys, body limits, audit, secret hygiene ------------------------------


def test_secrets_never_leak_and_api_keys_guard_inference(server_factory: Any) -> None:
    api_key = "sk-test-api-key-do-not-leak-42"
    cluster_secret = "cluster-secret-do-not-leak-7"
    srv: ServerProcess = server_factory(
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_API_KEYS": f"other-key,{api_key}",
            "CLUSTER_SECRET": cluster_secret,
        }
    ).start()
    admin = token(["admin"], iss=ISSUER, aud=AUDIENCE)
    seen: list[str] = []
    headers = {"Authorization": f"Bearer {admin}"}
    # ``api`` sends the admin token with every request, ``no_auth`` only what it is given.
    with (
        httpx.Client(base_url=srv.url, headers=headers, timeout=30, verify=client_tls()) as api,
        srv.client() as no_auth,
    ):
        inst = sim_load(api, "guarded", "--ttft-ms", "1")
        inst = wait_for_status(api, inst["id"], "active")
        seen.append(json.dumps(inst))
        # SSE events of the instance, with replay.
        with api.stream(
            "GET", f"/api/v1/models/instances/{inst['id']}/events?replay=true"
        ) as events:
            for line in events.iter_lines():
                seen.append(line)
                if line.startswith("event: status"):
                    break
        # Inference needs the key; the admin token is not an inference key.
        url = f"{srv.url}/v1/completions"
        body = {"model": "guarded", "prompt": "x", "max_tokens": 2}
        denied = no_auth.post(url, json=body)
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        assert no_auth.post(url, json=body, headers=headers).status_code == 401
        ok = no_auth.post(url, json=body, headers={"Authorization": f"Bearer {api_key}"})
        assert ok.status_code == 200
        seen.append(ok.text)
        with no_auth.stream(
            "POST",
            url,
            json={**body, "stream": True},
            headers={"Authorization": f"Bearer {api_key}"},
        ) as stream:
            lines = [ln for ln in stream.iter_lines() if ln]
        assert lines[-1] == "data: [DONE]"
        seen.extend(lines)
        # The engine's environment and command line carry none of the secrets.
        environ = Path(f"/proc/{inst['processId']}/environ").read_bytes().decode()
        cmdline = Path(f"/proc/{inst['processId']}/cmdline").read_bytes().decode()
        for secret in (SECRET, api_key, cluster_secret):
            assert secret not in environ
            assert secret not in cmdline
        seen.append(api.get("/api/v1/models").text)
        seen.append(api.get("/api/audit").text)
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
    srv.stop()
    logs = [srv.log()] + [p.read_text() for p in srv.data_dir.rglob("*.log")]
    for secret in (SECRET, api_key, cluster_secret, admin):
        for text in [*logs, *seen]:
            assert secret not in text


@pytest.fixture(scope="module")
def every_address_server(module_server_factory: ServerPool) -> ServerProcess:
    """HS256 auth on a server bound to every address, which auth makes allowed.

    Not the matrix's server: the matrix's calls would be in the audit trail (its 422
    for ``load`` is an ``error`` too, which the 413 must be on its own).
    """
    srv: ServerProcess = module_server_factory(args=["--host", "0.0.0.0"], extra_env=HS256_ENV)
    return srv.start()


def test_api_body_limit_and_audit_trail(every_address_server: ServerProcess) -> None:
    srv = every_address_server
    admin = {"Authorization": f"Bearer {token(['admin'])}"}
    readonly = {"Authorization": f"Bearer {token(['admin-readonly'])}"}
    big = b'{"modelPath": "' + b"x" * (2 * 2**20) + b'"}'
    with srv.client() as api:
        resp = api.post(
            "/api/v1/models/load",
            content=big,
            headers={**admin, "content-type": "application/json"},
        )
        assert resp.status_code == 413
        assert resp.json()["code"] == "payload_too_large"
        denied = api.post("/api/v1/models/load", json={"modelPath": "x"}, headers=readonly)
        assert denied.status_code == 403
        inst = api.post(
            "/api/v1/models/load",
            json={"modelPath": "audited", "engine": "sim"},
            headers=admin,
        ).json()
        with httpx.Client(
            base_url=srv.url, headers=admin, timeout=30, verify=client_tls()
        ) as as_admin:
            wait_for_status(as_admin, inst["id"], "active")
        api.post(f"/api/v1/models/{inst['id']}/unload", headers=admin).raise_for_status()
        deadline = time.monotonic() + 5
        entries: list[dict[str, Any]] = []
        unload_path = f"/api/v1/models/{inst['id']}/unload"
        while time.monotonic() < deadline and unload_path not in {e["path"] for e in entries}:
            entries = [
                e
                for e in api.get("/api/audit", headers=readonly).json()
                if e["path"].startswith("/api/v1/models")
            ]
            time.sleep(0.1)
    by_path = {(e["method"], e["path"], e["outcome"]) for e in entries}
    assert ("POST", "/api/v1/models/load", "denied") in by_path
    assert ("POST", "/api/v1/models/load", "ok") in by_path
    assert ("POST", "/api/v1/models/load", "error") in by_path  # the 413
    assert ("POST", f"/api/v1/models/{inst['id']}/unload", "ok") in by_path
    # The 413 is refused before authentication; everything else knows who called.
    assert {e["subject"] for e in entries if e["status"] != 413} == {"tester"}
    assert any(e["role"] == "admin" for e in entries)


def test_auth_configured_allows_non_loopback_bind(every_address_server: ServerProcess) -> None:
    assert "authentication: on" in every_address_server.log()
    assert "refusing" not in every_address_server.log()
