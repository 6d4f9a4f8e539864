"""Inference through the real `sardeenz serve`, with the official openai client."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from testkit.servers import ServerPool, ServerProcess, sim_load, unload_all, wait_for_status


def _expected(n: int) -> str:
    return " ".join(f"tok{i}" for i in range(n))


@pytest.fixture(scope="module")
def two_models(module_server_factory: ServerPool) -> ServerProcess:
    """One server with alpha and beta, shared by the module's tests.

    Tests that load models of their own take ``loads_own`` and leave alpha and beta alone.
    """
    server = module_server_factory().start()
    with server.client() as api:
        a = sim_load(api, "alpha", "--ttft-ms", "5", "--itl-ms", "1")
        b = sim_load(api, "beta", "--ttft-ms", "5", "--itl-ms", "1")
        wait_for_status(api, a["id"], "active")
        wait_for_status(api, b["id"], "active")
    return server


@pytest.fixture
def loads_own(two_models: ServerProcess) -> Iterator[ServerProcess]:
    """``two_models`` for a test that loads models: what it loaded is unloaded after it,
    so the next test finds alpha and beta alone (one server start fewer for the module)."""
    yield two_models
    unload_all(two_models, keep={"alpha", "beta"})


def _express_requests(server: ServerProcess) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    match = re.search(r"^sardeenz_proxy_express_requests_total (\S+)$", text, re.M)
    assert match is not None
    return float(match.group(1))


def test_openai_sync_client_stream_and_not(two_models: ServerProcess) -> None:
    express_before = _express_requests(two_models)
    client = openai.OpenAI(base_url=f"{two_models.url}/v1", api_key="unused")
    models = {m.id for m in client.models.list().data}
    assert models == {"alpha", "beta"}
    for name in ("alpha", "beta"):
        chat = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "hi there"}], max_tokens=7
        )
        assert chat.model == name
        assert chat.choices[0].message.content == _expected(7)
        assert chat.usage is not None
        assert chat.usage.completion_tokens == 7
        stream = client.completions.create(
            model=name,
            prompt="one two three",
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text.split() == _expected(5).split()
        usage = [c.usage for c in chunks if c.usage is not None]
        assert usage[-1].completion_tokens == 5
        assert usage[-1].prompt_tokens == 3
    # the node served them on its hot path: the fast lane's express relay
    assert _express_requests(two_models) - express_before == 4


async def test_openai_async_client_concurrent_streams(two_models: ServerProcess) -> None:
    client = openai.AsyncOpenAI(base_url=f"{two_models.url}/v1", api_key="unused")

    async def one(i: int) -> str:
        stream = await client.chat.completions.create(
            model="alpha" if i % 2 else "beta",
            messages=[{"role": "user", "content": f"n{i}"}],
            max_tokens=8,
            stream=True,
        )
        out = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                out.append(chunk.choices[0].delta.content)
        return "".join(out)

    results = await asyncio.gather(*(one(i) for i in range(100)))
    assert all(r.split() == _expected(8).split() for r in results)
    await client.close()


def test_raw_sse_ends_with_done(two_models: ServerProcess) -> None:
    with httpx.stream(
        "POST",
        f"{two_models.url}/v1/completions",
        json={"model": "alpha", "prompt": "x", "max_tokens": 3, "stream": True},
        timeout=10,
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in resp.iter_lines() if ln.startswith("data:")]
    assert lines[-1] == "data: [DONE]"


def test_round_robin_across_two_instances_of_one_name(loads_own: ServerProcess) -> None:
    with loads_own.client() as api:
        ids = [sim_load(api, "twin", "--ttft-ms", "1")["id"] for _ in range(2)]
        ports = {wait_for_status(api, i, "active")["port"] for i in ids}
    seen = []
    for _ in range(6):
        r = httpx.post(
            f"{loads_own.url}/v1/completions",
            json={"model": "twin", "prompt": "x", "max_tokens": 1},
            timeout=10,
        )
        seen.append(int(re.sub(r"\D", "", r.json()["system_fingerprint"])))
    assert set(seen) == ports
    assert all(seen[i] != seen[i + 1] for i in range(len(seen) - 1))


def test_request_during_start_is_served_once_active(loads_own: ServerProcess) -> None:
    with loads_own.client() as api:
        inst = sim_load(api, "late", "--load-seconds", "2")
        assert inst["status"] == "starting"
        r = httpx.post(
            f"{loads_own.url}/v1/completions",
            json={"model": "late", "prompt": "x", "max_tokens": 2},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == _expected(2)


def test_errors_are_openai_shaped(two_models: ServerProcess) -> None:
    url = f"{two_models.url}/v1/chat/completions"
    cases: list[tuple[Any, int, str]] = [
        (b"{not json", 400, "invalid_request_error"),
        ({"messages": []}, 400, "invalid_request_error"),
        ({"model": "nope", "messages": []}, 404, "model_not_found"),
    ]
    for body, status, key in cases:
        if isinstance(body, bytes):
            r = httpx.post(url, content=body, headers={"content-type": "application/json"})
        else:
            r = httpx.post(url, json=body)
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert set(err) >= {"message", "type", "param", "code"}
        assert key in (err["type"], err["code"])
    r = httpx.post(url, json={"model": "nope", "messages": []})
    assert "alpha" in r.json()["error"]["message"]
    big = b'{"model": "alpha", "prompt": "' + b"x" * (33 * 2**20) + b'"}'
    r = httpx.post(f"{two_models.url}/v1/completions", content=big, timeout=30)
    assert r.status_code == 413
    assert r.json()["error"]["code"]


def test_metrics_expose_proxy_series(two_models: ServerProcess) -> None:
    httpx.post(
        f"{two_models.url}/v1/completions",
        json={"model": "alpha", "prompt": "x", "max_tokens": 1},
    ).raise_for_status()
    for path in ("/metrics", "/api/v1/metrics"):
        text = httpx.get(f"{two_models.url}{path}").text
        assert 'sardeenz_proxy_requests_total{model="alpha",status="200"}' in text
        assert "sardeenz_proxy_request_duration_seconds_bucket" in text
        assert "sardeenz_proxy_overhead_seconds" in text
        assert "sardeenz_instance_status{" in text
        assert "process_cpu_seconds_total" in text


def test_direct_proxy_only_reaches_managed_ports(two_models: ServerProcess) -> None:
    with two_models.client() as api:
        port = api.get("/api/v1/models").json()[0]["port"]
    r = httpx.get(f"{two_models.url}/api/direct/{port}/v1/models")
    assert r.status_code == 200
    assert r.json()["data"][0]["owned_by"] == "vllm"
    r = httpx.get(f"{two_models.url}/api/direct/{two_models.port}/api/health")
    assert r.status_code == 404
    assert r.json()["code"] == "unknown_port"


def _sim_metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in engine metrics")


async def test_fifty_requests_to_a_sleeping_model_cause_one_wake(
    server_factory: Any,
) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB"]).start()
    with srv.client() as api:
        inst = sim_load(api, "dozy", "--memory-gib", "4", enableSleepMode=True)
        inst = wait_for_status(api, inst["id"], "active")
        api.post(f"/api/v1/models/{inst['id']}/sleep").raise_for_status()
    before = _sim_metric(inst["port"], "sardeenz_sim_wakeups_total")
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    "/v1/completions", json={"model": "dozy", "prompt": "x", "max_tokens": 2}
                )
                for _ in range(50)
            )
        )
    assert [r.status_code for r in replies] == [200] * 50
    assert _sim_metric(inst["port"], "sardeenz_sim_wakeups_total") == before + 1
    with srv.client() as api:
        assert api.get(f"/api/v1/models/{inst['id']}").json()["status"] == "active"


def test_auto_wake_off_gives_503_with_retry_after(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(
        args=["--sim-gpus", "NVIDIA L4:24GiB"],
        extra_env={"SARDEENZ_PROXY_AUTO_WAKE": "false"},
    ).start()
    with srv.client() as api:
        inst = sim_load(api, "stays-asleep", "--memory-gib", "2", enableSleepMode=True)
        wait_for_status(api, inst["id"], "active")
        api.post(f"/api/v1/models/{inst['id']}/sleep").raise_for_status()
    r = httpx.post(
        f"{srv.url}/v1/completions", json={"model": "stays-asleep", "prompt": "x"}, timeout=10
    )
    assert r.status_code == 503
    assert r.headers["retry-after"]
    assert r.json()["error"]["code"] == "model_sleeping"
