"""Catalog entries with ``engine: external``: a server Sardeenz routes to but does not run.

The "external" servers are real sim engines this module starts itself (one guarded
by ``--api-key`` like vLLM's), behind a real ``sardeenz serve`` that has inference
API keys of its own: a request carries the client's key for Sardeenz, and must reach
the server with the server's key instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from testkit.ports import free_port
from testkit.servers import ServerPool, ServerProcess
from testkit.sim import Sim

CLIENT_KEY = "sk-client-key-for-sardeenz"
UPSTREAM_KEY = "sk-upstream-secret-do-not-leak-93"


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Sim]]:
    started = {
        "keyed": Sim(
            "org/keyed",
            extra=["--served-model-name", "upstream-name", "--api-key", UPSTREAM_KEY],
        ),
        "plain": Sim("ext-plain"),
    }
    try:
        for sim in started.values():
            sim.wait_ready()
        yield started
    finally:
        for sim in started.values():
            sim.kill()


@pytest.fixture(scope="module")
def srv(
    sims: dict[str, Sim],
    module_server_factory: ServerPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> ServerProcess:
    tmp = tmp_path_factory.mktemp("external")
    config: Path = tmp / "sardeenz.yaml"
    config.write_text(
        f"""
catalog:
  ext-keyed:
    engine: external
    url: {sims["keyed"].url}/v1
    modelPath: upstream-name
    apiKeyEnv: UPSTREAM_KEY_FOR_TEST
    aliases: [ext-alias]
  ext-plain:
    engine: external
    url: {sims["plain"].url}
    modelPath: ext-plain
  ext-gone:
    engine: external
    url: http://127.0.0.1:{free_port()}
    modelPath: gone
  ext-nokey:
    engine: external
    url: {sims["plain"].url}
    modelPath: ext-plain
    apiKeyFile: {tmp}/no-such-key-file
"""
    )
    env = {
        "UPSTREAM_KEY_FOR_TEST": UPSTREAM_KEY,
        "SARDEENZ_API_KEYS": CLIENT_KEY,
        "SARDEENZ_EXTERNAL_CHECK_SECONDS": "0.3",
    }
    return module_server_factory(args=["--config", str(config)], extra_env=env).start()


def client(srv: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CLIENT_KEY, timeout=30, max_retries=0)


def listed_state(srv: ServerProcess, name: str) -> str:
    models = {m.id: m for m in client(srv).models.list().data}
    state: str = (models[name].model_extra or {})["state"]
    return state


def catalog_model(srv: ServerProcess, name: str) -> dict[str, Any]:
    with srv.client() as c:
        got: dict[str, Any] = c.get(f"/api/v1/catalog/{name}").json()
        return got


def wait_listed(srv: ServerProcess, name: str, wanted: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listed_state(srv, name) == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} not {wanted} in {timeout} s: {listed_state(srv, name)}")


def test_routes_streams_and_sends_the_servers_key(srv: ServerProcess, sims: dict[str, Sim]) -> None:
    # The upstream refuses the client's key: only the injected one gets through.
    direct = httpx.post(
        f"{sims['keyed'].url}/v1/completions",
        json={"model": "upstream-name", "prompt": "x", "max_tokens": 1},
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert direct.status_code == 401
    wait_listed(srv, "ext-keyed", "active")  # checked and routable: the express path takes it
    express = express_count(srv)
    oai = client(srv)  # a fresh connection: one that served GET /v1/models is uvicorn's
    reply = oai.chat.completions.create(
        model="ext-keyed", messages=[{"role": "user", "content": "hi there"}], max_tokens=4
    )
    assert reply.model == "upstream-name"  # the server's name for it, as it answered
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 4
    assert express_count(srv) == express + 1  # key swap and model rewrite on the fast path
    # The alias goes through the general handler (the express path takes served names).
    stream = oai.completions.create(model="ext-alias", prompt="a b", max_tokens=3, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert len(text.split()) == 3
    chat_stream = oai.chat.completions.create(
        model="ext-keyed", messages=[{"role": "user", "content": "x"}], max_tokens=5, stream=True
    )
    deltas = [c.choices[0].delta.content for c in chat_stream if c.choices]
    assert len("".join(d for d in deltas if d).split()) == 5
    # Without the client's key Sardeenz itself refuses, as for any model.
    denied = httpx.post(
        f"{srv.url}/v1/completions", json={"model": "ext-keyed", "prompt": "x", "max_tokens": 1}
    )
    assert denied.status_code == 401
    # Same metrics as any model.
    with srv.client() as c:
        metrics = c.get("/metrics").text
    assert 'sardeenz_proxy_requests_total{model="ext-keyed",status="200"}' in metrics
    assert listed_state(srv, "ext-keyed") == "active"
    assert catalog_model(srv, "ext-keyed")["state"] == "active"
    assert not instances(srv)  # nothing was started for them


def test_a_path_prefix_and_a_server_without_key(srv: ServerProcess) -> None:
    reply = client(srv).completions.create(model="ext-plain", prompt="x y", max_tokens=2)
    assert reply.model == "ext-plain"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 2


def test_an_unreachable_server_is_listed_so_and_answers_503(srv: ServerProcess) -> None:
    wait_listed(srv, "ext-gone", "unreachable")
    model = catalog_model(srv, "ext-gone")
    assert model["state"] == "unreachable"
    assert "ConnectError" in model["error"]
    r = httpx.post(
        f"{srv.url}/v1/chat/completions",
        json={"model": "ext-gone", "messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert r.status_code == 503
    error = r.json()["error"]
    assert error["code"] == "model_unreachable"
    assert error["type"] == "service_unavailable_error"
    assert "ext-gone" in error["message"]
    assert "unreachable" in error["message"]
    assert int(r.headers["retry-after"]) >= 1


def test_a_missing_key_is_a_failed_entry_and_no_key_leaks(srv: ServerProcess) -> None:
    wait_listed(srv, "ext-nokey", "failed")
    model = catalog_model(srv, "ext-nokey")
    assert model["state"] == "failed"
    assert "apiKeyFile" in model["error"]
    assert "no-such-key-file" in model["error"]
    with srv.client() as c:
        seen = [
            c.get("/api/v1/catalog").text,
            c.get("/v1/models", headers={"Authorization": f"Bearer {CLIENT_KEY}"}).text,
            c.get("/metrics").text,
        ]
    seen.append(srv.log())
    for text in seen:
        assert UPSTREAM_KEY not in text


def test_https_is_refused_with_a_clear_message(srv: ServerProcess) -> None:
    with srv.client() as c:
        r = c.put(
            "/api/v1/catalog/ext-tls",
            json={"engine": "external", "url": "https://example.org/v1", "modelPath": "m"},
        )
        assert r.status_code == 400
        assert "url" in r.json()["detail"]
        assert "https" in r.json()["detail"]
        r = c.put(
            "/api/v1/catalog/ext-args",
            json={
                "engine": "external",
                "url": "http://127.0.0.1:9/v1",
                "modelPath": "m",
                "gpuIds": [0],
            },
        )
        assert r.status_code == 400
        assert "gpuIds" in r.json()["detail"]


def test_a_server_that_goes_away_turns_unreachable(
    srv: ServerProcess, sims: dict[str, Sim]
) -> None:
    with srv.client() as c:
        r = c.put(
            "/api/v1/catalog/ext-late",
            json={"engine": "external", "url": sims["plain"].url, "modelPath": "ext-plain"},
        )
        assert r.status_code == 200, r.text
    # The first request after the PUT waits for the first check, then is routed.
    reply = client(srv).completions.create(model="ext-late", prompt="x", max_tokens=1)
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 1
    sims["plain"].kill()
    wait_listed(srv, "ext-late", "unreachable")
    with pytest.raises(openai.APIStatusError) as caught:
        client(srv).completions.create(model="ext-late", prompt="x", max_tokens=1)
    assert caught.value.status_code == 503


def express_count(srv: ServerProcess) -> float:
    with srv.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith("sardeenz_proxy_express_requests_total "):
                return float(line.split()[1])
    raise AssertionError("no sardeenz_proxy_express_requests_total")


def instances(srv: ServerProcess) -> list[dict[str, Any]]:
    with srv.client() as c:
        got: list[dict[str, Any]] = c.get("/api/v1/models").json()
        return got
