"""Load on first request and the idle lifecycle, over a real server with sim engines.

One server for the module; each test uses its own catalog model so they do not
see each other's instances.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from testkit.servers import ServerPool, ServerProcess

CONFIG = """
catalog:
  chat:
    modelPath: org/chat
    engine: sim
    aliases: [chat-alias]
    extraArgs: [--load-seconds, "0.5"]
  burst:
    modelPath: org/burst
    engine: sim
    extraArgs: [--load-seconds, "1"]
  slow:
    modelPath: org/slow
    engine: sim
    extraArgs: [--load-seconds, "3600"]
  broken:
    modelPath: org/broken
    engine: sim
    extraArgs: [--load-seconds, "0.3", --fail-after-load]
  idler:
    modelPath: org/idler
    engine: sim
    extraArgs: [--load-seconds, "0.3"]
    sleepLevel: 1
    idleSleepSeconds: 1
    idleUnloadSeconds: 4
  keeper:
    modelPath: org/keeper
    engine: sim
    extraArgs: [--load-seconds, "0.3"]
    sleepLevel: 1
    idleSleepSeconds: 1
    idleUnloadSeconds: 2
    pinned: true
"""
MAX_WAIT = 6  # two tests wait it out
QUEUE_MAX = 60
# ``slow`` never finishes starting while the module runs (3600 s): its tests need it
# starting, and the first of them starts it. At 60 s, a loaded machine reached the queue
# test after the start had finished, and the waiters got answers instead of 503s.


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    config: Path = tmp_path_factory.mktemp("ondemand") / "sardeenz.yaml"
    config.write_text(CONFIG)
    env = {
        "SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS": str(MAX_WAIT),
        "SARDEENZ_ONDEMAND_MIN_RESIDENCY_SECONDS": "0.5",
        "SARDEENZ_ONDEMAND_TICK_SECONDS": "0.2",
        "SARDEENZ_ONDEMAND_FAILURE_HOLD_SECONDS": "30",
        "SARDEENZ_ONDEMAND_QUEUE_MAX": str(QUEUE_MAX),
    }
    return module_server_factory(args=["--config", str(config)], extra_env=env).start()


def instances_of(srv: ServerProcess, name: str) -> list[dict[str, Any]]:
    with srv.client() as c:
        return [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == name]


def catalog_state(srv: ServerProcess, name: str) -> str:
    with srv.client() as c:
        state: str = c.get(f"/api/v1/catalog/{name}").json()["state"]
        return state


def wait_state(srv: ServerProcess, name: str, wanted: str, timeout: float = 20) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if catalog_state(srv, name) == wanted:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"{name} not {wanted} in {timeout}s: {catalog_state(srv, name)}")


def chat(srv: ServerProcess, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with srv.client() as c:
        return c.post("/v1/chat/completions", json=body)


def _metric(srv: ServerProcess, line_start: str) -> float:
    with srv.client() as c:
        text = c.get("/metrics").text
    values = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line_start)]
    assert values, f"no {line_start} in /metrics"
    return values[0]


def test_first_request_starts_the_model_stream_and_not(srv: ServerProcess) -> None:
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60)
    listed = {m.id: m for m in client.models.list().data}
    assert (listed["chat"].model_extra or {})["state"] == "unloaded"
    assert instances_of(srv, "chat") == []
    reply = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi there"}], max_tokens=4
    )
    assert reply.model == "chat"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 4
    stream = client.completions.create(model="chat-alias", prompt="a b", max_tokens=3, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert len(text.split()) == 3
    assert [i["status"] for i in instances_of(srv, "chat")] == ["active"]
    listed = {m.id: m for m in client.models.list().data}
    assert (listed["chat"].model_extra or {})["state"] == "active"


def test_a_first_stream_waits_for_the_start_too(srv: ServerProcess) -> None:
    # the alias names the model: the engine sees its served name
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60)
    with srv.client() as c:
        for inst in instances_of(srv, "chat"):
            assert c.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
    stream = client.chat.completions.create(
        model="chat-alias", messages=[{"role": "user", "content": "x"}], max_tokens=3, stream=True
    )
    chunks = list(stream)
    assert chunks
    assert all(c.model == "chat" for c in chunks)


async def test_fifty_concurrent_first_requests_start_one_instance(srv: ServerProcess) -> None:
    body = {"model": "burst", "prompt": "hello", "max_tokens": 2}
    limits = httpx.Limits(max_connections=60)
    async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as c:
        replies = await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(50)))
    assert [r.status_code for r in replies] == [200] * 50, replies[0].text
    assert len(instances_of(srv, "burst")) == 1
    assert _metric(srv, 'sardeenz_ondemand_starts_total{model="burst"}') == 1


def test_a_request_waiting_past_the_max_wait_gets_503_with_retry_after(srv: ServerProcess) -> None:
    t0 = time.monotonic()
    resp = chat(srv, "slow")
    waited = time.monotonic() - t0
    assert resp.status_code == 503
    assert int(resp.headers["retry-after"]) >= 1
    error = resp.json()["error"]
    assert error["code"] == "model_not_ready"
    assert error["type"] == "service_unavailable_error"
    assert MAX_WAIT - 0.5 <= waited < MAX_WAIT + 5
    assert [i["status"] for i in instances_of(srv, "slow")] == ["starting"]


async def test_a_failing_start_answers_every_waiter_with_the_cause(srv: ServerProcess) -> None:
    body = {"model": "broken", "prompt": "hello", "max_tokens": 2}
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
        replies = await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(5)))
    failed = instances_of(srv, "broken")
    assert [i["status"] for i in failed] == ["failed"]
    cause = failed[0]["errorMessage"]
    assert cause
    for r in replies:
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "model_start_failed"
        assert cause in r.json()["error"]["message"]
        assert "retry-after" in r.headers
    # within the hold time a new request gets the cause at once, without a new start
    again = chat(srv, "broken")
    assert cause in again.json()["error"]["message"]
    assert len(instances_of(srv, "broken")) == 1
    assert _metric(srv, 'sardeenz_ondemand_start_failures_total{model="broken"}') == 1


def test_idle_models_sleep_then_unload_and_pinned_ones_stay(srv: ServerProcess) -> None:
    assert chat(srv, "idler").status_code == 200
    assert chat(srv, "keeper").status_code == 200
    wait_state(srv, "idler", "sleeping", timeout=10)
    # a request wakes it and restarts its idle clock
    assert chat(srv, "idler").status_code == 200
    assert catalog_state(srv, "idler") == "active"
    wait_state(srv, "idler", "sleeping", timeout=10)
    wait_state(srv, "idler", "unloaded", timeout=15)
    assert instances_of(srv, "idler") == []
    assert catalog_state(srv, "keeper") == "active"
    assert "idle: unloading idler" in srv.log()
    assert "keeper" not in "".join(line for line in srv.log().splitlines() if "idle:" in line)


def test_a_client_that_leaves_stops_waiting(srv: ServerProcess) -> None:
    body = {"model": "slow", "prompt": "x", "max_tokens": 1}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=srv.url, timeout=1.0) as c:
        c.post("/v1/completions", json=body)
    deadline = time.monotonic() + 5
    while _metric(srv, 'sardeenz_ondemand_waiting_requests{model="slow"}') != 0:
        assert time.monotonic() < deadline, "the request that left still counts as waiting"
        time.sleep(0.1)


def test_a_restarted_controller_readopts_and_starts_idle_clocks_afresh(
    server_factory: ServerPool, tmp_path: Path
) -> None:
    config = tmp_path / "sardeenz.yaml"
    config.write_text(
        "catalog:\n"
        "  lazy:\n"
        "    modelPath: org/lazy\n"
        "    engine: sim\n"
        "    extraArgs: [--load-seconds, '0.2']\n"
        "    idleUnloadSeconds: 4\n"
    )
    env = {"SARDEENZ_ONDEMAND_MIN_RESIDENCY_SECONDS": "0", "SARDEENZ_ONDEMAND_TICK_SECONDS": "0.2"}
    node = server_factory(args=["--config", str(config)], extra_env=env).start()
    assert chat(node, "lazy").status_code == 200
    used = time.monotonic()
    (before,) = instances_of(node, "lazy")
    time.sleep(3)
    node.stop(signal.SIGKILL)  # a crash: the engine lives on
    node.start()
    restarted = time.monotonic()
    (after,) = instances_of(node, "lazy")
    assert after["id"] == before["id"]
    # Idle for more than the 4 s TTL since its last use (1 s more than the TTL, the
    # restart included): an old clock would unload now; and a second since the restart,
    # five of the controller's ticks, so the check below sees its verdict.
    time.sleep(max(0.0, used + 4 + 1 - time.monotonic(), restarted + 1 - time.monotonic()))
    assert catalog_state(node, "lazy") == "active"
    wait_state(node, "lazy", "unloaded", timeout=10)
    assert time.monotonic() - restarted >= 4


async def test_requests_beyond_the_queue_limit_get_503_at_once(srv: ServerProcess) -> None:
    body = {"model": "slow", "prompt": "x", "max_tokens": 1}
    limits = httpx.Limits(max_connections=QUEUE_MAX + 10)

    async def timed(c: httpx.AsyncClient) -> tuple[float, httpx.Response]:
        t0 = time.monotonic()
        resp = await c.post("/v1/completions", json=body)
        return time.monotonic() - t0, resp

    async with httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as c:
        replies = await asyncio.gather(*(timed(c) for _ in range(QUEUE_MAX + 5)))
    full = [(t, r) for t, r in replies if r.json()["error"]["code"] == "queue_full"]
    queued = [t for t, r in replies if r.json()["error"]["code"] != "queue_full"]
    assert len(full) == 5
    # "At once" measured against the queued requests of the same run, which wait
    # out MAX_WAIT: a wall-clock constant would flake on a loaded machine.
    for took, resp in full:
        assert resp.status_code == 503
        assert int(resp.headers["retry-after"]) >= 1
        assert took < min(queued) - MAX_WAIT / 2, (took, min(queued))
    codes = {r.json()["error"]["code"] for _, r in replies} - {"queue_full"}
    assert codes == {"model_not_ready"}
