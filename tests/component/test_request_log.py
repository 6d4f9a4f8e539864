"""Scoped API keys, usage per key and model, the request log, and the audit's targets.

One server for the module: JWT admin auth on, two inference keys in a keys file
(``team-a`` limited to model A, ``ops`` unlimited), a small request-log ring, and
two simulated models. Token counts are compared with the ``usage`` the engine put
in its own responses, never with numbers written here.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from tests.component.test_auth import AUDIENCE, ISSUER, SECRET, token

TEAM_A_KEY = "sk-team-a-0123456789"
OPS_KEY = "sk-ops-0123456789"
MODEL_A = "reqlog-a"
MODEL_B = "reqlog-b"
RING = 40


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(
        "# digest id models\n"
        f"{hashlib.sha256(TEAM_A_KEY.encode()).hexdigest()} team-a {MODEL_A}\n"
        f"{hashlib.sha256(OPS_KEY.encode()).hexdigest()} ops\n"
    )
    server: ServerProcess = module_server_factory(
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_JWT_ISSUER": ISSUER,
            "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
            "SARDEENZ_API_KEYS_FILE": str(keys),
            "SARDEENZ_REQUEST_LOG_SIZE": str(RING),
        }
    ).start()
    with _admin(server) as api:
        load_active(api, MODEL_A, "--ttft-ms", "5", "--itl-ms", "1")
        load_active(api, MODEL_B, "--ttft-ms", "5", "--itl-ms", "1")
    return server


def _admin(srv: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {token(['admin'])}"}, timeout=30
    )


def _v1(srv: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "how many tokens is this prompt"}],
        "max_tokens": 4,
        **extra,
    }


def _stream_usage(resp: httpx.Response) -> dict[str, int]:
    """The usage chunk of an SSE stream (the client asked for it)."""
    usage: dict[str, int] | None = None
    for line in resp.text.splitlines():
        if line.startswith("data: {"):
            doc = json.loads(line[6:])
            usage = doc.get("usage") or usage
    assert usage is not None, resp.text
    return usage


def test_a_scoped_key_gets_403_on_other_models_and_sees_only_its_own(srv: ServerProcess) -> None:
    with _v1(srv, TEAM_A_KEY) as team_a, _v1(srv, OPS_KEY) as ops:
        refused = team_a.post("/v1/chat/completions", json=_chat(MODEL_B))
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "model_not_allowed"
        assert error["type"] == "invalid_request_error"
        assert error["param"] == "model"
        assert MODEL_B in error["message"]
        # Streams are refused the same way (nothing reaches the engine).
        stream = team_a.post("/v1/chat/completions", json=_chat(MODEL_B, stream=True))
        assert stream.status_code == 403
        # Its own model works; so does any model with the unscoped key.
        assert team_a.post("/v1/chat/completions", json=_chat(MODEL_A)).status_code == 200
        assert ops.post("/v1/chat/completions", json=_chat(MODEL_B)).status_code == 200
        # Discovery shows the scope, and a model outside it does not exist for this key.
        assert [m["id"] for m in team_a.get("/v1/models").json()["data"]] == [MODEL_A]
        assert {m["id"] for m in ops.get("/v1/models").json()["data"]} >= {MODEL_A, MODEL_B}
        hidden = team_a.get(f"/v1/models/{MODEL_B}")
        assert hidden.status_code == 404
        assert MODEL_B not in hidden.json()["error"]["message"].split("Available models:")[1]
        assert team_a.get(f"/v1/models/{MODEL_A}").status_code == 200
        # An unknown model's 404 does not list models outside the scope either.
        unknown = team_a.post("/v1/chat/completions", json=_chat("no-such-model"))
        assert unknown.status_code == 403  # outside the scope: existence is not revealed


def _usage_row(report: dict[str, Any], key: str, model: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = report["rows"]
    for row in rows:
        if row["keyId"] == key and row["model"] == model:
            return row
    return {"requests": 0, "promptTokens": 0, "completionTokens": 0}


def _metric(text: str, name: str, key: str, model: str) -> float:
    prefix = f'{name}{{key="{key}",model="{model}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def test_usage_per_key_and_model_matches_what_the_engine_reported(srv: ServerProcess) -> None:
    with _admin(srv) as api, _v1(srv, TEAM_A_KEY) as team_a, _v1(srv, OPS_KEY) as ops:
        before = api.get("/api/v1/usage").json()
        metrics_before = api.get("/api/v1/metrics").text
        sent = {("team-a", MODEL_A): [0, 0, 0], ("ops", MODEL_B): [0, 0, 0]}
        for i in range(3):
            resp = team_a.post("/v1/chat/completions", json=_chat(MODEL_A, max_tokens=3 + i))
            assert resp.status_code == 200
            u = resp.json()["usage"]
            sent[("team-a", MODEL_A)] = [
                a + b
                for a, b in zip(
                    sent[("team-a", MODEL_A)],
                    (1, u["prompt_tokens"], u["completion_tokens"]),
                    strict=True,
                )
            ]
        for i in range(2):  # streams: tokens from the final usage chunk the client asked for
            resp = ops.post(
                "/v1/completions",
                json={
                    "model": MODEL_B,
                    "prompt": "a prompt of some words " * (i + 1),
                    "max_tokens": 5 + i,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            )
            assert resp.status_code == 200
            u = _stream_usage(resp)
            row = sent[("ops", MODEL_B)]
            sent[("ops", MODEL_B)] = [
                row[0] + 1,
                row[1] + u["prompt_tokens"],
                row[2] + u["completion_tokens"],
            ]
        after = api.get("/api/v1/usage").json()
        metrics_after = api.get("/api/v1/metrics").text
    for (key, model), (n, prompt, completion) in sent.items():
        old, new = _usage_row(before, key, model), _usage_row(after, key, model)
        assert new["requests"] - old["requests"] == n
        assert new["promptTokens"] - old["promptTokens"] == prompt > 0
        assert new["completionTokens"] - old["completionTokens"] == completion > 0
        for name, value in (
            ("sardeenz_usage_requests_total", n),
            ("sardeenz_usage_prompt_tokens_total", prompt),
            ("sardeenz_usage_completion_tokens_total", completion),
        ):
            grew = _metric(metrics_after, name, key, model) - _metric(
                metrics_before, name, key, model
            )
            assert grew == value, name
    # Totals per key add up the rows; a key never appears by its secret.
    by_key = {r["keyId"]: r for r in after["byKey"]}
    assert by_key["team-a"]["requests"] == sum(
        r["requests"] for r in after["rows"] if r["keyId"] == "team-a"
    )
    assert TEAM_A_KEY not in json.dumps(after)
    assert OPS_KEY not in metrics_after


def test_request_log_entries_carry_the_right_fields(srv: ServerProcess) -> None:
    start = datetime.now(UTC)
    with _admin(srv) as api, _v1(srv, TEAM_A_KEY) as team_a:
        plain = team_a.post("/v1/chat/completions", json=_chat(MODEL_A))
        streamed = team_a.post(
            "/v1/chat/completions",
            json=_chat(MODEL_A, stream=True, stream_options={"include_usage": True}),
        )
        refused = team_a.post("/v1/chat/completions", json=_chat(MODEL_B))
        assert (plain.status_code, streamed.status_code, refused.status_code) == (200, 200, 403)
        instance_a = next(
            i["id"] for i in api.get("/api/v1/models").json() if i["servedModelName"] == MODEL_A
        )
        # Newest first: the three just sent (one client, one after the other).
        r, s, e = api.get("/api/v1/requests", params={"key": "team-a", "limit": 3}).json()
    usage = plain.json()["usage"]
    assert e["model"] == MODEL_A
    assert e["instanceId"] == instance_a
    assert e["pod"]
    assert e["status"] == 200
    assert e["stream"] is False
    assert e["keyId"] == "team-a"
    assert e["promptTokens"] == usage["prompt_tokens"]
    assert e["completionTokens"] == usage["completion_tokens"]
    assert e["latencyMs"] > 0
    assert e["ttftMs"] is None
    assert datetime.fromisoformat(e["at"]) >= start
    stream_usage = _stream_usage(streamed)
    assert s["stream"] is True
    assert s["status"] == 200
    assert 0 < s["ttftMs"] <= s["latencyMs"]
    assert (s["promptTokens"], s["completionTokens"]) == (
        stream_usage["prompt_tokens"],
        stream_usage["completion_tokens"],
    )
    assert r["status"] == 403
    assert r["model"] == MODEL_B
    assert r["instanceId"] is None
    assert r["promptTokens"] is None
    # No body and no key in any entry.
    assert len({e["requestId"], s["requestId"], r["requestId"]}) == 3
    assert e["id"] < s["id"] < r["id"]
    text = json.dumps([e, s, r])
    assert "how many tokens" not in text
    assert TEAM_A_KEY not in text


def test_request_log_filters(srv: ServerProcess) -> None:
    with _admin(srv) as api, _v1(srv, TEAM_A_KEY) as team_a, _v1(srv, OPS_KEY) as ops:
        before = len(api.get("/api/v1/requests", params={"limit": 1000}).json())
        assert ops.post("/v1/chat/completions", json=_chat(MODEL_B)).status_code == 200
        # The proxy records a request just after its last byte: wait for the record, so
        # that ``since`` is surely later than it (a loaded machine took longer than 10 ms).
        deadline = time.monotonic() + 10
        while len(api.get("/api/v1/requests", params={"limit": 1000}).json()) == before:
            assert time.monotonic() < deadline, "the first request was not recorded in 10 s"
            time.sleep(0.02)
        since = datetime.now(UTC)
        time.sleep(0.01)
        assert team_a.post("/v1/chat/completions", json=_chat(MODEL_B)).status_code == 403
        assert ops.post("/v1/chat/completions", json=_chat(MODEL_A)).status_code == 200

        def get(**params: Any) -> list[dict[str, Any]]:
            resp = api.get("/api/v1/requests", params=params)
            assert resp.status_code == 200, resp.text
            entries: list[dict[str, Any]] = resp.json()
            return entries

        recent = get(since=since.isoformat())
        assert [(e["keyId"], e["status"]) for e in recent] == [("ops", 200), ("team-a", 403)]
        assert all(e["model"] == MODEL_B for e in get(model=MODEL_B))
        assert {e["keyId"] for e in get(key="ops")} == {"ops"}
        assert {e["status"] for e in get(status="4xx")} == {403}
        assert {e["status"] for e in get(status="error")} == {403}
        assert {e["status"] for e in get(status="200")} == {200}
        assert len(get(limit=2)) == 2
        newest = get(limit=1)[0]
        assert all(e["id"] < newest["id"] for e in get(beforeId=newest["id"]))
        bad = api.get("/api/v1/requests", params={"status": "2x0"})
        assert bad.status_code == 400
        assert bad.json()["code"] == "invalid_status_filter"
        readonly = {"Authorization": f"Bearer {token(['admin-readonly'])}"}
        assert httpx.get(f"{srv.url}/api/v1/requests", headers=readonly).status_code == 200
        assert httpx.get(f"{srv.url}/api/v1/usage").status_code == 401


def test_the_ring_is_bounded(srv: ServerProcess) -> None:
    with _admin(srv) as api, _v1(srv, OPS_KEY) as ops:
        info = api.get("/api/v1/requests/info").json()
        assert info == {
            "size": RING,
            "retention": False,
            "maxRows": None,
            "pods": info["pods"],
        }
        for _ in range(RING + 5):
            ops.post("/v1/chat/completions", json=_chat(MODEL_A, max_tokens=1))
        entries = api.get("/api/v1/requests", params={"limit": 1000}).json()
    assert len(entries) == RING
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids, reverse=True)
    assert ids[0] - ids[-1] == RING - 1
    # a single node: every record is this node's, entered here
    assert {(e["pod"], e["entryPod"]) for e in entries} == {(info["pods"][0], info["pods"][0])}


def _audit_until(api: httpx.Client, path: str) -> list[dict[str, Any]]:
    """The trail once an entry for ``path`` is written (one writer, in order: all before it are)."""
    deadline = time.monotonic() + 10
    while True:
        entries: list[dict[str, Any]] = api.get("/api/audit").json()
        if any(e["path"] == path for e in entries) or time.monotonic() > deadline:
            return entries
        time.sleep(0.1)


def test_audit_entries_name_the_target_and_the_refusal(srv: ServerProcess) -> None:
    with _admin(srv) as api:
        # Refused: the instance in the path, the error code.
        assert api.post("/api/v1/models/no-such-id/unload").status_code == 404
        # Form-encoded and malformed bodies are attributed to the caller like JSON ones,
        # with the model they named.
        form = api.post(
            "/api/v1/models/load",
            content=b"modelPath=form%2Fmodel&engine=sim",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert form.status_code == 422
        broken = api.post(
            "/api/v1/models/load",
            content=b'{"modelPath": "broken/model"',
            headers={"content-type": "application/json"},
        )
        assert broken.status_code == 422
        done = api.post("/api/v1/models/load", json={"modelPath": "reqlog-audit", "engine": "sim"})
        assert done.status_code == 202
        created = done.json()["id"]
        unload = f"/api/v1/models/{created}/unload"
        assert api.post(unload).status_code == 200
        trail = _audit_until(api, unload)
    gone = next(e for e in trail if e["path"] == "/api/v1/models/no-such-id/unload")
    assert (gone["instanceId"], gone["code"], gone["outcome"]) == (
        "no-such-id",
        "instance_not_found",
        "error",
    )
    loads = [e for e in trail if e["path"] == "/api/v1/models/load"][:3]  # newest first
    assert [e["status"] for e in loads] == [202, 422, 422]
    done_entry, broken_entry, form_entry = loads
    assert form_entry["model"] == "form/model"
    assert form_entry["code"] == "validation_error"
    assert broken_entry["code"] == "validation_error"
    assert done_entry["instanceId"] == created
    assert done_entry["model"] == "reqlog-audit"
    assert done_entry["code"] is None
    # The malformed body fails before the route's policy runs: still the caller, not anonymous.
    assert {e["subject"] for e in loads} == {"tester"}
    assert {e["role"] for e in loads} == {"admin"}
    unloaded = next(e for e in trail if e["path"] == unload)
    assert unloaded["instanceId"] == created
    assert unloaded["model"] == "reqlog-audit"
