"""Billable usage on one real node: the official client's traffic, counted exactly.

One server for the module (JWT admin auth, inference keys in a keys file, one
simulated model, tenants defined through the API); each test uses its own
tenant and keys, so their counts do not mix. The expected tokens are the ones
the engine reported to the client (``usage``), or, for a stream that did not ask
for usage, the admission's documented estimate (request body bytes / 4, rounded
up, + ``max_tokens``). The restart test has a server of its own.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import time
from typing import Any

import httpx
import openai
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from tests.component.test_auth import token
from tests.component.test_tenancy import (
    JWT_ENV,
    MODEL,
    _admin,
    _keys_file,
    _put_tenant,
    _secret,
)
from tests.e2e.test_cli_compose import COLUMNS, cli, cli_tty


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    keys = _keys_file(tmp_path_factory.mktemp("keys"))
    server: ServerProcess = module_server_factory(
        extra_env={**JWT_ENV, "SARDEENZ_API_KEYS_FILE": keys}
    ).start()
    with _admin(server) as api:
        load_active(api, MODEL, "--ttft-ms", "2", "--itl-ms", "1")
    return server


def _client(srv: ServerProcess, key_id: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{srv.url}/v1", api_key=_secret(key_id), max_retries=0, timeout=30
    )


def _window() -> dict[str, str]:
    """A range holding every minute a test's requests can end in."""
    now = int(time.time())
    return {"from": str(now - 120), "to": str(now + 120)}


def _usage(srv: ServerProcess, **params: str) -> dict[str, Any]:
    with _admin(srv, "admin-readonly") as api:
        resp = api.get("/api/v1/usage", params=params)
    assert resp.status_code == 200, resp.text
    doc: dict[str, Any] = resp.json()
    return doc


def _of(doc: dict[str, Any], **match: str) -> list[dict[str, Any]]:
    return [b for b in doc["buckets"] if all(b[k] == v for k, v in match.items())]


def _traffic(srv: ServerProcess, key_id: str, chats: int) -> tuple[int, int]:
    """``chats`` chat completions and one stream with usage; the engine's (prompt,
    completion) totals as the client saw them."""
    prompt = completion = 0
    with _client(srv, key_id) as client:
        for n in range(chats):
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"count me {n}"}],
                max_tokens=3 + n,
            )
            assert reply.usage is not None
            prompt += reply.usage.prompt_tokens
            completion += reply.usage.completion_tokens
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "stream me"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [c.usage for c in stream if c.usage is not None]
        assert len(usage) == 1
        prompt += usage[0].prompt_tokens
        completion += usage[0].completion_tokens
    return prompt, completion


def test_exact_counts_per_tenant_key_and_model_in_json_and_csv(srv: ServerProcess) -> None:
    _put_tenant(srv, "bill-a", {"api_keys": ["k-rpm", "k-tpm"]})
    window = _window()
    p1, c1 = _traffic(srv, "k-rpm", 3)
    p2, c2 = _traffic(srv, "k-tpm", 1)
    with _client(srv, "k-free") as free:  # a key of no tenant: not billed here
        free.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )

    doc = _usage(srv, **window)  # default grouping: tenant, key, model
    assert doc["groupBy"] == ["tenant", "key", "model"]
    assert doc["step"] is None
    rows = {b["key"]: b for b in _of(doc, tenant="bill-a")}
    assert set(rows) == {"k-rpm", "k-tpm"}
    assert not _of(doc, key="k-free")
    for key, requests, prompt, completion in (("k-rpm", 4, p1, c1), ("k-tpm", 2, p2, c2)):
        row = rows[key]
        assert row["model"] == MODEL
        assert (row["requests"], row["promptTokens"], row["completionTokens"]) == (
            requests,
            prompt,
            completion,
        ), row
        assert row["totalTokens"] == prompt + completion
        assert (row["failedRequests"], row["estimatedRequests"], row["rejectedRequests"]) == (
            0,
            0,
            0,
        )

    per_tenant = _of(_usage(srv, group_by="tenant", **window), tenant="bill-a")
    assert len(per_tenant) == 1
    assert per_tenant[0]["key"] is None
    assert per_tenant[0]["model"] is None
    assert per_tenant[0]["requests"] == 6
    assert per_tenant[0]["promptTokens"] == p1 + p2

    with _admin(srv, "admin-readonly") as api:
        resp = api.get("/api/v1/usage.csv", params={"group_by": "tenant,key", **window})
        as_csv = {"group_by": "tenant,key", "format": "csv", **window}
        same = api.get("/api/v1/usage", params=as_csv)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/csv")
    assert same.text == resp.text
    lines = list(csv.DictReader(io.StringIO(resp.text)))
    mine = {r["key"]: r for r in lines if r["tenant"] == "bill-a"}
    assert mine["k-rpm"]["model"] == ""
    assert (mine["k-rpm"]["requests"], mine["k-rpm"]["prompt_tokens"]) == ("4", str(p1))
    assert mine["k-tpm"]["completion_tokens"] == str(c2)
    assert mine["k-tpm"]["rejected_requests_per_minute"] == "0"


def test_per_minute_steps_add_up_to_the_total(srv: ServerProcess) -> None:
    _put_tenant(srv, "bill-step", {"api_keys": ["k-conc"]})
    window = _window()
    prompt, _ = _traffic(srv, "k-conc", 2)
    steps = _of(_usage(srv, step="1m", group_by="tenant", **window), tenant="bill-step")
    assert 1 <= len(steps) <= 2  # the requests may straddle a minute
    assert sum(b["requests"] for b in steps) == 3
    assert sum(b["promptTokens"] for b in steps) == prompt
    for b in steps:
        start = b["start"]
        assert start.endswith(":00Z") or start.endswith(":00+00:00"), start


def test_refusals_by_reason_and_estimates_for_a_stream_without_usage(srv: ServerProcess) -> None:
    _put_tenant(srv, "bill-rpm", {"api_keys": ["k-budget"], "limits": {"requests_per_minute": 2}})
    window = _window()
    with httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {_secret('k-budget')}"}, timeout=30
    ) as v1:
        body = (
            b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], '
            b'"max_tokens": 4, "stream": true}' % MODEL.encode()
        )
        resp = v1.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert resp.status_code == 200
        assert '"usage"' not in resp.text  # the client did not ask: the estimate is billed
    with _client(srv, "k-budget") as client:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
        for _ in range(2):
            with pytest.raises(openai.RateLimitError):
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
                )
    row = _of(_usage(srv, **window), tenant="bill-rpm")
    assert len(row) == 1
    got = row[0]
    assert got["requests"] == 2
    assert got["estimatedRequests"] == 1
    assert got["rejectedRequests"] == 2
    assert got["rejected"] == {"requests_per_minute": 2}
    # the stream's estimate: ceil(body bytes / 4) + max_tokens; plus the JSON one's usage
    assert got["promptTokens"] >= -(-len(body) // 4)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "invalid_range"),
        ({"from": "100", "to": "100"}, "invalid_range"),
        ({"from": "yesterday"}, "invalid_time"),
        ({"to": "-5"}, "invalid_time"),
        ({"to": "1e300"}, "invalid_time"),
        ({"to": "nan"}, "invalid_time"),
        ({"group_by": "tenant,colour"}, "unknown_group_by"),
        ({"step": "30"}, "invalid_step"),
        ({"step": "90s"}, "invalid_step"),
        ({"step": "0"}, "invalid_step"),
        ({"step": "-1h"}, "invalid_step"),
        ({"step": "1m", "from": "0", "to": "31536000"}, "too_many_points"),
    ],
)
def test_bad_questions_are_422s_with_a_stable_code(
    srv: ServerProcess, params: dict[str, str], code: str
) -> None:
    with _admin(srv) as api:
        for path in ("/api/v1/usage", "/api/v1/usage.csv"):
            resp = api.get(path, params=params)
            assert resp.status_code == 422, (path, resp.text)
            assert resp.json()["code"] == code, resp.text


def test_usage_needs_an_admin_token_and_the_old_answer_stays(srv: ServerProcess) -> None:
    assert httpx.get(f"{srv.url}/api/v1/usage", params={"step": "1h"}).status_code == 401
    assert httpx.get(f"{srv.url}/api/v1/usage.csv").status_code == 401
    with _admin(srv) as api:
        since_start = api.get("/api/v1/usage").json()  # no question: counters since start
        bad_format = api.get("/api/v1/usage", params={"format": "xml"})
        with_pod = api.get("/api/v1/usage", params={"pod": "p", "step": "1h"})
    assert {"since", "rows", "byKey", "byModel"} <= set(since_start)
    assert bad_format.status_code == 422
    assert (with_pod.status_code, with_pod.json()["code"]) == (422, "pod_not_supported")


def test_usage_survives_a_restart(server_factory: ServerPool, tmp_path: Any) -> None:
    keys = _keys_file(tmp_path)
    server = server_factory(
        extra_env={
            **JWT_ENV,
            "SARDEENZ_API_KEYS_FILE": keys,
            "SARDEENZ_USAGE_FLUSH_SECONDS": "3600",  # only the shutdown writes it
        }
    ).start()
    with _admin(server) as api:
        load_active(api, MODEL, "--ttft-ms", "2", "--itl-ms", "1")
    _put_tenant(server, "keep", {"api_keys": ["k-api"]})
    window = _window()
    prompt, completion = _traffic(server, "k-api", 2)
    before = _of(_usage(server, **window), tenant="keep")
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server.start()
    after = _of(_usage(server, **window), tenant="keep")
    assert after == before
    assert (after[0]["requests"], after[0]["promptTokens"], after[0]["completionTokens"]) == (
        3,
        prompt,
        completion,
    )


def test_the_cli_lists_tenants_and_usage_at_80_columns(srv: ServerProcess) -> None:
    _put_tenant(
        srv,
        "bill-cli",
        {"api_keys": ["k-model"], "limits": {"requests_per_minute": 600, "tokens_per_day": 10**6}},
    )
    window = _window()
    prompt, completion = _traffic(srv, "k-model", 1)
    auth = ("--url", srv.url, "--token", token(["admin"]))
    code, out = cli_tty("tenants", "list", *auth)
    assert code == 0, out
    assert "bill-cli" in out
    assert "rpm 600 · day 1M" in out, out
    assert max(len(line) for line in out.splitlines()) <= COLUMNS, out

    span = ("--from", window["from"], "--to", window["to"])
    code, out = cli_tty("usage", "--group-by", "tenant,key,model", *span, *auth)
    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= COLUMNS, out
    piped = cli("usage", "--group-by", "tenant,key", *span, *auth)
    assert piped.returncode == 0, piped.stderr
    lines = [ln.split("\t") for ln in piped.stdout.splitlines()]
    assert lines[0] == ["TENANT", "KEY", "REQS", "PROMPT", "COMPL", "REFUSED"]
    assert ["bill-cli", "k-model", "2", str(prompt), str(completion), "0"] in lines[1:]

    as_csv = cli("usage", "--csv", "--group-by", "tenant", *span, *auth)
    with _admin(srv) as api:
        same = api.get("/api/v1/usage.csv", params={"group_by": "tenant", **window}).text
    assert as_csv.stdout == same
    as_json = cli("usage", "--json", "--group-by", "tenant", *span, *auth)
    assert _of(json.loads(as_json.stdout), tenant="bill-cli")[0]["requests"] == 2

    bad = cli("usage", "--group-by", "colour", *auth)
    assert bad.returncode == 1
    assert "unknown_group_by" in bad.stderr
