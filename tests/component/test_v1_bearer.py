"""JWT callers on ``/v1`` (``SARDEENZ_V1_BEARER_AUTH``) on one real node.

One server for the module: HS256 admin auth, one inference API key, bearer tokens on
``/v1`` with a models claim and a required role, one simulated model. A JWT caller is
served like a key (the official client, streams), limited to the models of its token,
named ``jwt:<subject>`` in the request log, and limited by the tenant of its subject or
of its group; bad tokens get OpenAI-shaped refusals before any body byte is read, and the
API key works exactly as before.
"""

from __future__ import annotations

import hashlib
import socket
import time
from typing import Any

import httpx
import jwt
import openai
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from tests.component.test_auth import AUDIENCE, ISSUER, SECRET, token

MODEL = "bearer-m"
OTHER = "bearer-other"
KEY = "sk-bearer-key-0123456789"


def v1_token(
    sub: str,
    *,
    roles: list[str] | None = None,
    models: list[str] | None = None,
    groups: list[str] | None = None,
    exp_in: float = 300,
) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {
        "sub": sub,
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + int(exp_in),
        "roles": ["inference"] if roles is None else roles,
    }
    if models is not None:
        payload["models"] = models
    if groups is not None:
        payload["groups"] = groups
    return jwt.encode(payload, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} team-key\n")
    server: ServerProcess = module_server_factory(
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_JWT_ISSUER": ISSUER,
            "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
            "SARDEENZ_API_KEYS_FILE": str(keys),
            "SARDEENZ_V1_BEARER_AUTH": "true",
            "SARDEENZ_V1_ROLE": "inference",
            "SARDEENZ_JWT_MODELS_CLAIM": "models",
        }
    ).start()
    with _admin(server) as api:
        load_active(api, MODEL, "--ttft-ms", "5", "--itl-ms", "5")
        load_active(api, OTHER, "--ttft-ms", "5", "--itl-ms", "5")
    return server


def _admin(srv: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {token(['admin'])}"}, timeout=30
    )


def _chat(srv: ServerProcess, bearer: str, model: str = MODEL) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=30,
    )


def test_a_jwt_caller_uses_v1_with_the_official_client(srv: ServerProcess) -> None:
    bearer = v1_token("alice-client")
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=bearer, max_retries=0)
    messages: Any = [{"role": "user", "content": "hello"}]
    for _ in range(3):  # the first verifies the token, the next find it in memory
        reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
        assert reply.choices[0].message.content
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3, stream=True)
    )
    assert chunks
    with _admin(srv) as api:
        log = api.get("/api/v1/requests", params={"key": "jwt:alice-client"}).json()
    assert len(log) == 4
    assert {e["status"] for e in log} == {200}
    # The API key works as it did.
    assert _chat(srv, KEY).status_code == 200


def test_a_tokens_models_claim_scopes_it_like_a_key(srv: ServerProcess) -> None:
    bearer = v1_token("scoped", models=[MODEL])
    assert _chat(srv, bearer).status_code == 200
    refused = _chat(srv, bearer, OTHER)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "model_not_allowed"
    listed = httpx.get(
        f"{srv.url}/v1/models", headers={"Authorization": f"Bearer {bearer}"}, timeout=10
    )
    assert [m["id"] for m in listed.json()["data"]] == [MODEL]
    unscoped = v1_token("unscoped")
    assert _chat(srv, unscoped, OTHER).status_code == 200


def test_tenants_limit_jwt_callers_by_subject_and_by_group(srv: ServerProcess) -> None:
    with _admin(srv) as api:
        for name, body in (
            ("by-subject", {"subjects": ["rpm-sub"], "limits": {"requests_per_minute": 2}}),
            ("by-group", {"groups": ["ml-batch"], "limits": {"requests_per_minute": 1}}),
        ):
            resp = api.put(f"/api/v1/tenants/{name}", json=body)
            assert resp.status_code == 200, resp.text
    sub = v1_token("rpm-sub")
    assert [_chat(srv, sub).status_code for _ in range(2)] == [200, 200]
    over = _chat(srv, sub)
    assert over.status_code == 429, over.text
    assert over.json()["error"]["code"] == "rate_limit_exceeded"
    assert "tenant 'by-subject'" in over.json()["error"]["message"]
    assert int(over.headers["retry-after"]) in (29, 30)
    # Two callers of one group share the group's tenant.
    first = v1_token("g-one", groups=["ml-batch", "zz-other"])
    second = v1_token("g-two", groups=["ml-batch"])
    assert _chat(srv, first).status_code == 200
    over = _chat(srv, second)
    assert over.status_code == 429, over.text
    assert "tenant 'by-group'" in over.json()["error"]["message"]
    # A caller of no tenant is not limited.
    free = v1_token("free-caller", groups=["nobody"])
    assert all(_chat(srv, free).status_code == 200 for _ in range(3))


@pytest.mark.parametrize(
    ("bearer", "status", "code"),
    [
        (lambda: v1_token("late", exp_in=-120), 401, "token_expired"),
        (lambda: v1_token("no-role", roles=["admin-readonly"]), 403, "forbidden"),
        (lambda: "not-a-key-nor-a-jwt", 401, "invalid_token"),
        (lambda: jwt.encode({"sub": "x", "exp": time.time() + 60}, "w" * 40), 401, None),
    ],
    ids=["expired", "without-the-role", "garbage", "foreign-signature"],
)
def test_bad_tokens_are_openai_shaped_refusals(
    srv: ServerProcess, bearer: Any, status: int, code: str | None
) -> None:
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=bearer(), max_retries=0)
    error = openai.AuthenticationError if status == 401 else openai.PermissionDeniedError
    with pytest.raises(error) as exc:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    assert exc.value.status_code == status
    if code is not None:
        assert exc.value.code == code
    assert exc.value.response.json()["error"]["type"] == "invalid_request_error"


def test_admin_tokens_pass_and_no_token_is_the_key_refusal(srv: ServerProcess) -> None:
    assert _chat(srv, token(["admin"])).status_code == 200
    resp = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": MODEL}, timeout=10)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "invalid_api_key"


def test_a_refused_token_never_has_its_body_read(srv: ServerProcess) -> None:
    """A large declared body with a bad token: the refusal comes at once, with the body
    unsent, and the connection is closed."""
    host, port = srv.url.removeprefix("http://").split(":")
    bad = v1_token("late", exp_in=-120)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {bad}\r\n"
        "content-type: application/json\r\ncontent-length: 50000000\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"closed without an answer: {received!r}"
            received += chunk
    assert received.startswith(b"HTTP/1.1 401"), received[:200]
    assert b"connection: close" in received.lower()
