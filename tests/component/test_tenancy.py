"""Tenants on one real node: each limit at its edge, the 429s, the API's refusals, restarts.

One server for the module: JWT admin auth, inference keys in a keys file, one
simulated model. Each test defines its own tenant through the API around its own
key, so the tests do not share counters. Token counts come from the ``usage`` the
engine put in its own responses; the up-front estimate from the documented formula
(request body bytes / 4, rounded up, + ``max_tokens``).
"""

from __future__ import annotations

import hashlib
import json
import math
import signal
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import orjson
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from testkit.waiting import wait_until
from tests.component.test_auth import AUDIENCE, ISSUER, SECRET, token

MODEL = "tenancy-m"
KEYS = ("k-rpm", "k-tpm", "k-conc", "k-budget", "k-free", "k-api", "k-api2", "k-cfg", "k-model")
JWT_ENV = {
    "SARDEENZ_JWT_SECRET": SECRET,
    "SARDEENZ_JWT_ISSUER": ISSUER,
    "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
}


def _secret(key_id: str) -> str:
    return f"sk-{key_id}-0123456789"


def _keys_file(pool_dir: Any) -> str:
    path = pool_dir / "keys.txt"
    path.write_text(
        "".join(f"{hashlib.sha256(_secret(k).encode()).hexdigest()} {k}\n" for k in KEYS)
    )
    return str(path)


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    keys = _keys_file(tmp_path_factory.mktemp("keys"))
    server: ServerProcess = module_server_factory(
        extra_env={**JWT_ENV, "SARDEENZ_API_KEYS_FILE": keys}
    ).start()
    with _admin(server) as api:
        load_active(api, MODEL, "--ttft-ms", "5", "--itl-ms", "5")
    return server


def _admin(srv: ServerProcess, role: str = "admin") -> httpx.Client:
    return httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {token([role])}"}, timeout=30
    )


def _v1(srv: ServerProcess, key_id: str) -> httpx.Client:
    return httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {_secret(key_id)}"}, timeout=30
    )


def _body(max_tokens: int = 4, **extra: Any) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "how many tokens is this prompt"}],
            "max_tokens": max_tokens,
            **extra,
        }
    )


def _estimate(body: bytes, max_tokens: int) -> int:
    return math.ceil(len(body) / 4) + max_tokens


def _chat(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )


def _used(resp: httpx.Response) -> int:
    """Prompt + completion tokens the engine reported (JSON body or the stream's usage)."""
    if resp.headers["content-type"].startswith("text/event-stream"):
        usage = None
        for line in resp.text.splitlines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
        assert usage is not None, resp.text
    else:
        usage = resp.json()["usage"]
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


def _put_tenant(srv: ServerProcess, name: str, body: dict[str, Any]) -> dict[str, Any]:
    with _admin(srv) as api:
        resp = api.put(f"/api/v1/tenants/{name}", json=body)
    assert resp.status_code == 200, resp.text
    doc: dict[str, Any] = resp.json()
    return doc


def _assert_429(resp: httpx.Response, limit_words: str) -> int:
    assert resp.status_code == 429, resp.text
    error = resp.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert limit_words in error["message"], error["message"]
    return int(resp.headers["retry-after"])


def _rejections(srv: ServerProcess, tenant: str, reason: str) -> float:
    with _admin(srv) as api:
        text = api.get("/api/v1/metrics").text
    line = f'sardeenz_tenant_rejected_requests_total{{reason="{reason}",tenant="{tenant}"}} '
    found = [ln for ln in text.splitlines() if ln.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


def test_requests_per_minute_edge(srv: ServerProcess) -> None:
    _put_tenant(srv, "rpm", {"api_keys": ["k-rpm"], "limits": {"requests_per_minute": 3}})
    with _v1(srv, "k-rpm") as v1:
        for n in range(3):
            assert _chat(v1, _body()).status_code == 200, n
        wait = _assert_429(_chat(v1, _body()), "requests per minute limit of 3")
    assert wait in (19, 20)  # one request every 20 s, less what refilled since
    assert _rejections(srv, "rpm", "requests_per_minute") == 1
    with _v1(srv, "k-free") as free:  # a key of no tenant is not limited
        assert all(_chat(free, _body()).status_code == 200 for _ in range(5))


def test_the_official_client_sees_a_rate_limit_error(srv: ServerProcess) -> None:
    _put_tenant(srv, "rpm-openai", {"api_keys": ["k-api2"], "limits": {"requests_per_minute": 1}})
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=_secret("k-api2"), max_retries=0)
    messages: Any = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert exc.value.code == "rate_limit_exceeded"
    assert exc.value.response.headers["retry-after"] in ("59", "60")


def test_a_models_limit_holds_in_addition_to_the_tenants(
    srv: ServerProcess,
) -> None:
    _put_tenant(
        srv,
        "per-model",
        {
            "api_keys": ["k-model"],
            "limits": {"requests_per_minute": 3},
            "models": {MODEL: {"requests_per_minute": 1}},
        },
    )
    other = orjson.dumps({"model": "no-such-model", "messages": [], "max_tokens": 1})
    with _v1(srv, "k-model") as v1:
        assert _chat(v1, _body()).status_code == 200
        wait = _assert_429(_chat(v1, _body()), f"for the model '{MODEL}'")
        assert wait in (59, 60)
        # an unknown model is a 404 before any limit is asked
        assert _chat(v1, other).status_code == 404
    usage = _usage(srv, "per-model")
    assert usage["*"]["concurrent_requests"] == 0
    assert set(usage) == {"*", MODEL}


def test_tokens_per_minute_edge_reconciled_from_stream_usage(srv: ServerProcess) -> None:
    """Streams that ask for usage: the estimate is charged, then replaced by the usage."""
    max_tokens = 4
    body = _body(max_tokens, stream=True, stream_options={"include_usage": True})
    estimate = _estimate(body, max_tokens)
    with _v1(srv, "k-free") as free:
        actual = _used(_chat(free, body))
    assert actual < estimate  # else the edge below is not the reconciliation's
    # Two requests and a third that needs exactly what is left; the fourth is short
    # of `actual` tokens (less what refilled: capacity/60 per second).
    capacity = 2 * actual + estimate
    _put_tenant(srv, "tpm", {"api_keys": ["k-tpm"], "limits": {"tokens_per_minute": capacity}})
    with _v1(srv, "k-tpm") as v1:
        for n in range(3):
            resp = _chat(v1, body)
            assert resp.status_code == 200, (n, resp.text)
            assert _used(resp) == actual
        wait = _assert_429(_chat(v1, body), f"tokens per minute limit of {capacity}")
    expected = math.ceil(60 * actual / capacity)
    assert expected - 2 <= wait <= expected
    assert _rejections(srv, "tpm", "tokens_per_minute") == 1


def test_concurrent_requests_edge(srv: ServerProcess) -> None:
    _put_tenant(srv, "conc", {"api_keys": ["k-conc"], "limits": {"concurrent_requests": 2}})
    long = _body(2000, stream=True)  # 2000 tokens at 5 ms: 10 s unless cut
    with _v1(srv, "k-conc") as v1, _v1(srv, "k-conc") as v2, _v1(srv, "k-conc") as v3:
        with v1.stream("POST", "/v1/chat/completions", content=long) as first:
            assert first.status_code == 200
            reading = first.iter_bytes()  # kept: a dropped iterator closes the stream
            next(reading)  # in flight
            with v2.stream("POST", "/v1/chat/completions", content=long) as second:
                assert second.status_code == 200
                reading_too = second.iter_bytes()
                next(reading_too)
                wait = _assert_429(_chat(v3, _body()), "concurrent requests limit of 2")
                assert wait == 1
        # both streams closed by the client: the engine was cut off, the slots freed
        wait_until(
            lambda: _usage(srv, "conc")["*"]["concurrent_requests"] == 0,
            "both cut streams' slots freed in conc's usage",
            10,
        )
        assert _chat(v3, _body()).status_code == 200


def test_day_budget_edge(srv: ServerProcess) -> None:
    body = _body(3)
    with _v1(srv, "k-free") as free:
        actual = _used(_chat(free, body))
    _put_tenant(srv, "budget", {"api_keys": ["k-budget"], "limits": {"tokens_per_day": 2 * actual}})
    with _v1(srv, "k-budget") as v1:
        assert _chat(v1, body).status_code == 200
        assert _chat(v1, body).status_code == 200
        wait = _assert_429(_chat(v1, body), f"tokens per day limit of {2 * actual}")
    assert abs(wait - _seconds_to_midnight()) <= 3
    assert _usage(srv, "budget")["*"]["tokens_today"] == 2 * actual


def _seconds_to_midnight() -> int:
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp() + 86400
    return math.ceil(midnight - now.timestamp())


def _usage(srv: ServerProcess, name: str) -> dict[str, Any]:
    with _admin(srv, "admin-readonly") as api:
        resp = api.get(f"/api/v1/tenants/{name}")
    assert resp.status_code == 200, resp.text
    usage: dict[str, Any] = resp.json()["usage"]
    return usage


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"requests_per_minute": 0}, "limits.requests_per_minute"),
        ({"tokens_per_minute": -5}, "limits.tokens_per_minute"),
        ({"tokens_per_day": 10**13}, "limits.tokens_per_day"),
        ({"concurrent_requests": "ten"}, "limits.concurrent_requests"),
        ({"concurrent_requests": "10"}, "limits.concurrent_requests"),
        ({"tokens_per_month": 2.5}, "limits.tokens_per_month"),
        ({"requests_per_hour": 5}, "limits.requests_per_hour"),
    ],
)
def test_bad_limits_are_422s_naming_the_field(
    srv: ServerProcess, limits: dict[str, Any], field: str
) -> None:
    with _admin(srv) as api:
        resp = api.put("/api/v1/tenants/bad", json={"api_keys": ["k-api"], "limits": limits})
        assert resp.status_code == 422, resp.text
        assert resp.json()["code"] == "validation_error"
        assert field in [e["field"] for e in resp.json()["errors"]]
        assert api.get("/api/v1/tenants/bad").status_code == 404  # nothing stored


def test_membership_conflicts_and_unknown_names(srv: ServerProcess) -> None:
    with _admin(srv) as api:
        # a tenant of this test's own that must outlive api-a's deletion (no other test's)
        kept = api.put("/api/v1/tenants/api-kept", json={"groups": ["ml-kept"]})
        assert kept.status_code == 200, kept.text
        ok = api.put("/api/v1/tenants/api-a", json={"api_keys": ["k-api"], "groups": ["ml"]})
        assert ok.status_code == 200, ok.text
        for body, code in (
            ({"api_keys": ["k-api"]}, "key_in_two_tenants"),
            ({"groups": ["ml"]}, "group_in_two_tenants"),
            ({"api_keys": ["no-such-key"]}, "unknown_api_key"),
            ({"api_keys": ["k-free", "k-free"]}, "duplicate_member"),
        ):
            resp = api.put("/api/v1/tenants/api-b", json=body)
            assert (resp.status_code, resp.json()["code"]) == (422, code), resp.text
        assert api.get("/api/v1/tenants/api-b").json()["code"] == "tenant_not_found"
        assert api.delete("/api/v1/tenants/api-b").status_code == 404
        assert api.put("/api/v1/tenants/Not%20A%20Name", json={}).status_code == 422
        assert api.delete("/api/v1/tenants/api-a").status_code == 200
        listed = [t["name"] for t in api.get("/api/v1/tenants").json()]
        assert "api-a" not in listed
        assert "api-kept" in listed
        assert api.delete("/api/v1/tenants/api-kept").status_code == 200
    with _admin(srv, "admin-readonly") as ro:
        assert ro.put("/api/v1/tenants/api-c", json={}).status_code == 403
        trail = ro.get("/api/audit").json()
    assert any(e["path"] == "/api/v1/tenants/api-a" and e["method"] == "DELETE" for e in trail)


@pytest.fixture
def restartable(server_factory: ServerPool, tmp_path: Any) -> ServerProcess:
    keys = _keys_file(tmp_path)
    tenants = {"cfg": {"api_keys": ["k-cfg"], "limits": {"tokens_per_day": 1}}}
    return server_factory(
        extra_env={
            **JWT_ENV,
            "SARDEENZ_API_KEYS_FILE": keys,
            "SARDEENZ_TENANTS": json.dumps(tenants),
            "SARDEENZ_PROXY_FAST_LANE": "false",  # the handler admits and settles
        }
    )


def test_a_spent_budget_survives_a_restart_and_config_tenants_are_read_only(
    restartable: ServerProcess,
) -> None:
    """A config-file tenant, served by the ASGI handler (the other tests: express path)."""
    srv = restartable.start()
    with _admin(srv) as api:
        load_active(api, MODEL, "--ttft-ms", "5", "--itl-ms", "1")
        put = api.put("/api/v1/tenants/cfg", json={})
        assert (put.status_code, put.json()["code"]) == (409, "tenant_from_config")
        assert api.get("/api/v1/tenants/cfg").json()["source"] == "config"
    with _v1(srv, "k-cfg") as v1:
        first = _chat(v1, _body())
        assert first.status_code == 200  # 0 used < 1
        _assert_429(_chat(v1, _body()), "tokens per day limit of 1")
    # settled by the ASGI handler (fast lane off here): the engine's count, nothing held
    assert _usage(srv, "cfg")["*"] == {
        "concurrent_requests": 0,
        "tokens_today": _used(first),
        "tokens_this_month": None,
    }
    assert srv.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # shut down, not killed
    srv.start()
    with _admin(srv) as api:
        load_active(api, MODEL, "--ttft-ms", "5", "--itl-ms", "1")
    with _v1(srv, "k-cfg") as v1:
        wait = _assert_429(_chat(v1, _body()), "tokens per day limit of 1")
    assert abs(wait - _seconds_to_midnight()) <= 3


def test_a_bad_config_tenant_stops_the_server_with_one_line(
    server_factory: ServerPool, tmp_path: Any
) -> None:
    keys = _keys_file(tmp_path)
    tenants = {"a": {"api_keys": ["k-cfg"]}, "b": {"api_keys": ["k-cfg"]}}
    server = server_factory(
        extra_env={"SARDEENZ_API_KEYS_FILE": keys, "SARDEENZ_TENANTS": json.dumps(tenants)}
    )
    with pytest.raises(RuntimeError, match="SARDEENZ_TENANTS: the API key 'k-cfg' is in two"):
        server.start(timeout=20)
