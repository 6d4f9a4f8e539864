"""The inference proxy over real HTTP: uvicorn + InferenceProxy in front of real
simulated-engine processes (``python -m sardeenz.sim``).

The proxy runs on its own thread and loop (``ThreadedProxyServer``), so the
blocking ``openai`` client works against it as well as async clients; the
routing table is changed the way the supervisor's events would change it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus
from sardeenz.sim.text import completion_text
from sardeenz.standalone import make_instance
from testkit.ports import free_port
from testkit.proxy import ThreadedProxyServer
from testkit.sim import Sim

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Sim]]:
    """Two engines serving m1 (round robin), one serving m2; started in parallel."""
    engines = {"a": Sim("m1"), "b": Sim("m1"), "c": Sim("m2", itl_ms=20)}
    try:
        for e in engines.values():
            e.wait_ready()
        yield engines
    finally:
        for e in engines.values():
            e.kill()


@pytest.fixture(scope="module", params=[True, False], ids=["fast-lane", "uvicorn"])
def proxy(sims: dict[str, Sim], request: pytest.FixtureRequest) -> Iterator[ThreadedProxyServer]:
    """The proxy with the fast lane and express path, and without (uvicorn + handler only).

    Both must behave the same: the handler still serves every connection
    the lane hands over and every request the express path declines.
    """
    settings = Settings(proxy_max_body_bytes=64 * 1024, proxy_fast_lane=request.param)
    server = ThreadedProxyServer(settings).start()
    try:
        for iid, e in sims.items():
            server.apply(make_instance(iid, e.model, e.port))
        yield server
    finally:
        server.stop()


def error_of(r: httpx.Response) -> dict[str, Any]:
    """The OpenAI error object of a response, checking its shape."""
    body = r.json()
    assert set(body) == {"error"}, body
    err: dict[str, Any] = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str)
    assert err["message"]
    return err


def sse_events(raw: bytes) -> list[tuple[str | None, bytes]]:
    """(event name, data) pairs of an SSE body."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        event, data = None, []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if data:
            out.append((event, b"\n".join(data)))
    return out


# --------------------------------------------------------------- happy paths
def test_openai_sync_client_non_stream_and_stream(proxy: ThreadedProxyServer) -> None:
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": "Say hello"}]
    reply = client.chat.completions.create(model="m1", messages=messages, max_tokens=5)
    assert reply.model == "m1"
    assert reply.choices[0].message.content == completion_text(5)
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 5

    parts: list[str] = []
    usage = None
    stream = client.chat.completions.create(
        model="m1",
        messages=messages,
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        assert chunk.model == "m1"
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == completion_text(7)
    assert usage is not None
    assert usage.completion_tokens == 7

    completion = client.completions.create(model="m2", prompt="Once upon", max_tokens=3)
    assert completion.choices[0].text == completion_text(3)
    assert completion.model == "m2"


async def test_openai_async_client_non_stream_and_stream(proxy: ThreadedProxyServer) -> None:
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": "Hi"}]
    reply = await client.chat.completions.create(model="m1", messages=messages, max_tokens=4)
    assert reply.choices[0].message.content == completion_text(4)
    stream = await client.completions.create(model="m2", prompt="x", max_tokens=6, stream=True)
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    assert text == completion_text(6)
    models = await client.models.list()
    ids = {m.id: m for m in models.data}
    assert set(ids) == {"m1", "m2"}
    assert ids["m1"].owned_by == "sardeenz"
    await client.close()


def test_stream_is_relayed_as_sse_with_done_and_useful_headers(proxy: ThreadedProxyServer) -> None:
    body = {"model": "m1", "prompt": "x", "max_tokens": 3, "stream": True}
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/completions",
        json=body,
        headers={"x-request-id": "req-123"},
        timeout=10,
    ) as r:
        raw = r.read()
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in r.headers
    assert r.headers.get("transfer-encoding") == "chunked"
    assert r.headers.get_list("server") == ["uvicorn"]  # the engine's is not relayed
    events = sse_events(raw)
    assert events[-1] == (None, b"[DONE]")
    text = "".join(orjson.loads(d)["choices"][0]["text"] for _, d in events[:-1])
    assert text == completion_text(3)


def test_models_endpoint_lists_routable_names(proxy: ThreadedProxyServer) -> None:
    r = httpx.get(f"{proxy.url}/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["m1", "m2"]
    assert all(m["object"] == "model" and m["owned_by"] == "sardeenz" for m in body["data"])
    r = httpx.get(f"{proxy.url}/v1/models/m2")
    assert r.json()["id"] == "m2"
    r = httpx.get(f"{proxy.url}/v1/models/nope")
    assert r.status_code == 404
    assert error_of(r)["code"] == "model_not_found"


def test_round_robin_across_two_instances(proxy: ThreadedProxyServer, sims: dict[str, Sim]) -> None:
    seen = []
    with httpx.Client(base_url=proxy.url) as c:
        for _ in range(8):
            r = c.post("/v1/completions", json={"model": "m1", "prompt": "x", "max_tokens": 1})
            assert r.status_code == 200
            seen.append(r.json()["system_fingerprint"])
    ports = {f"sardeenz-sim-{sims['a'].port}", f"sardeenz-sim-{sims['b'].port}"}
    assert set(seen) == ports
    assert all(seen[i] != seen[i + 1] for i in range(len(seen) - 1))


async def test_200_concurrent_streams_complete_with_correct_content(
    proxy: ThreadedProxyServer,
) -> None:
    limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
    async with httpx.AsyncClient(base_url=proxy.url, limits=limits, timeout=30) as client:

        async def one(i: int) -> str:
            n = 5 + i % 11
            body = {"model": "m1", "prompt": "x", "max_tokens": n, "stream": True}
            async with client.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200
                raw = await r.aread()
            events = sse_events(raw)
            assert events[-1] == (None, b"[DONE]")
            text = "".join(orjson.loads(d)["choices"][0]["text"] for _, d in events[:-1])
            assert text == completion_text(n)
            return text

        results = await asyncio.gather(*(one(i) for i in range(200)))
    assert len(results) == 200


# ------------------------------------------------------------ engine failures
def _wait_running(port: int, wanted: int, timeout: float = 10) -> None:
    """Wait until the engine's own gauge shows ``wanted`` requests in flight."""
    deadline = time.monotonic() + timeout
    # One client: a new one per poll loads the CA bundle (~20 ms of CPU) every 20 ms.
    with httpx.Client(timeout=5) as http:
        while time.monotonic() < deadline:
            text = http.get(f"http://127.0.0.1:{port}/metrics").text
            running = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running")]
            if any(float(line.split()[-1]) >= wanted for line in running):
                return
            time.sleep(0.02)
    raise AssertionError(f"engine on {port} never had {wanted} requests running")


def test_engine_killed_mid_stream_and_mid_request(proxy: ThreadedProxyServer) -> None:
    victim = Sim("victim", ttft_ms=5, itl_ms=30).wait_ready()
    try:
        proxy.apply(make_instance("victim-1", "victim", victim.port))
        body = {"model": "victim", "prompt": "x", "max_tokens": 2000, "stream": True}
        result: dict[str, Any] = {}

        def slow_non_stream() -> None:
            r = httpx.post(
                f"{proxy.url}/v1/completions",
                json={"model": "victim", "prompt": "x", "max_tokens": 2000},
                timeout=20,
            )
            result["status"] = r.status_code
            result["error"] = error_of(r)

        waiter = threading.Thread(target=slow_non_stream)
        waiter.start()
        with httpx.stream("POST", f"{proxy.url}/v1/completions", json=body, timeout=20) as r:
            assert r.status_code == 200
            chunks = r.iter_raw()
            got = next(chunks) + next(chunks)
            assert b"data: " in got
            # Kill only once the non-stream request is in flight at the engine too;
            # otherwise it may arrive after the kill and rightly get a 503 instead.
            _wait_running(victim.port, 2)
            victim.kill()
            rest = b"".join(chunks)  # must end, not hang
        events = sse_events(got + rest)
        name, data = events[-1]
        assert name == "error"
        err = orjson.loads(data)["error"]
        assert err["code"] == "engine_failed"
        assert set(err) == {"message", "type", "param", "code"}

        waiter.join(10)
        assert result["status"] == 502
        assert result["error"]["code"] == "engine_failed"

        # still "active" in the table (the supervisor has not noticed yet):
        # nothing listens, so 503 with Retry-After, not a hang or a 500
        r = httpx.post(
            f"{proxy.url}/v1/completions", json={"model": "victim", "prompt": "x"}, timeout=10
        )
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
        assert error_of(r)["code"] == "engine_unavailable"

        # the proxy keeps serving everyone else
        r = httpx.post(
            f"{proxy.url}/v1/completions",
            json={"model": "m1", "prompt": "x", "max_tokens": 2},
            timeout=10,
        )
        assert r.status_code == 200
    finally:
        victim.kill()
        proxy.remove("victim-1")


def test_client_disconnect_mid_stream_aborts_the_engine_request(
    proxy: ThreadedProxyServer, sims: dict[str, Sim]
) -> None:
    engine = sims["c"]  # m2, 20 ms per token
    before = engine.aborts()
    body = {"model": "m2", "prompt": "x", "max_tokens": 1000, "stream": True}
    with (
        httpx.Client(timeout=10) as c,
        c.stream("POST", f"{proxy.url}/v1/completions", json=body) as r,
    ):
        chunks = r.iter_raw()
        next(chunks)
        next(chunks)
    # leaving the block closes the unfinished response's connection
    t0 = time.monotonic()
    while engine.aborts() < before + 1:
        assert time.monotonic() - t0 < 1.0, "engine did not see the abort within 1 s"
        time.sleep(0.02)


def test_client_disconnect_while_waiting_for_first_token(proxy: ThreadedProxyServer) -> None:
    slow = Sim("slow-first", ttft_ms=3000).wait_ready()
    try:
        proxy.apply(make_instance("slow-1", "slow-first", slow.port))
        before = slow.aborts()
        body = {"model": "slow-first", "prompt": "x", "max_tokens": 5, "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{proxy.url}/v1/completions", json=body, timeout=0.3)
        t0 = time.monotonic()
        while slow.aborts() < before + 1:
            assert time.monotonic() - t0 < 1.0
            time.sleep(0.02)
    finally:
        slow.kill()
        proxy.remove("slow-1")


# ------------------------------------------------------------ starting models
def test_request_for_a_starting_model_is_held_until_active(proxy: ThreadedProxyServer) -> None:
    """As in real life: the engine is still booting when the request arrives."""
    late = Sim("late")
    proxy.apply(make_instance("late-1", "late", late.port, InstanceStatus.STARTING))
    try:

        def become_active() -> None:
            late.wait_ready()
            time.sleep(0.2)
            proxy.apply(make_instance("late-1", "late", late.port))

        activator = threading.Thread(target=become_active)
        activator.start()
        t0 = time.monotonic()
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={
                "model": "late",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            },
            timeout=30,
        )
        waited = time.monotonic() - t0
        activator.join()
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == completion_text(2)
        assert waited >= 0.2
    finally:
        late.kill()
        proxy.remove("late-1")


def test_starting_model_times_out_with_503_and_retry_after(sims: dict[str, Sim]) -> None:
    server = ThreadedProxyServer(Settings(proxy_ready_wait_seconds=0.3)).start()
    try:
        server.apply(
            make_instance("s-1", "still-starting", sims["a"].port, InstanceStatus.STARTING)
        )
        t0 = time.monotonic()
        r = httpx.post(f"{server.url}/v1/completions", json={"model": "still-starting"}, timeout=10)
        assert 0.25 < time.monotonic() - t0 < 3
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) >= 1
        assert error_of(r)["code"] == "model_not_ready"
        # a model whose only instance failed: 503 at once, no waiting
        server.apply(make_instance("s-2", "broken", sims["a"].port, InstanceStatus.FAILED))
        r = httpx.post(f"{server.url}/v1/completions", json={"model": "broken"}, timeout=10)
        assert r.status_code == 503
        assert error_of(r)["code"] == "no_healthy_endpoint"
    finally:
        server.stop()


# ------------------------------------------------------------ client mistakes
@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b"\xff\xfe garbage", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_body"),
        (b'"model"', 400, "invalid_body"),
        (b"{}", 400, "missing_model"),
        (b'{"model": null}', 400, "missing_model"),
        (b'{"model": 42}', 400, "invalid_model"),
        (b'{"model": ""}', 400, "invalid_model"),
        (b'{"model": ["m1"]}', 400, "invalid_model"),
        (b'{"model": "gpt-17"}', 404, "model_not_found"),
    ],
)
def test_bad_requests_get_openai_errors(
    proxy: ThreadedProxyServer, content: bytes, status: int, code: str
) -> None:
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == status
    err = error_of(r)
    assert err["code"] == code
    assert err["type"] == "invalid_request_error"
    if code == "model_not_found":
        assert "m1" in err["message"]
        assert "m2" in err["message"]


def test_body_over_the_limit_is_413_by_header_and_by_counting(proxy: ThreadedProxyServer) -> None:
    big = b'{"model": "m1", "prompt": "' + b"x" * (70 * 1024) + b'"}'
    r = httpx.post(f"{proxy.url}/v1/completions", content=big)
    assert r.status_code == 413
    assert error_of(r)["code"] == "body_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the proxy has to count
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    r = httpx.post(f"{proxy.url}/v1/completions", content=chunked())
    assert r.status_code == 413
    assert error_of(r)["code"] == "body_too_large"


def test_wrong_methods_and_paths(proxy: ThreadedProxyServer) -> None:
    r = httpx.get(f"{proxy.url}/v1/chat/completions")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert error_of(r)["code"] == "method_not_allowed"
    r = httpx.post(f"{proxy.url}/v1/models", json={"model": "m1"})
    assert r.status_code == 405
    # other /v1 POST paths are forwarded by model like the rest
    r = httpx.post(f"{proxy.url}/v1/embeddings", json={"model": "m1", "input": "x"})
    assert r.status_code < 500


def test_known_name_on_a_dead_port_is_503_not_500(proxy: ThreadedProxyServer) -> None:
    proxy.apply(make_instance("ghost-1", "ghost", free_port()))
    try:
        r = httpx.post(f"{proxy.url}/v1/completions", json={"model": "ghost"})
        assert r.status_code == 503
        assert error_of(r)["code"] == "engine_unavailable"
    finally:
        proxy.remove("ghost-1")


# ------------------------------------------------------------- direct proxy
def test_direct_proxy_reaches_only_managed_ports(
    proxy: ThreadedProxyServer, sims: dict[str, Sim]
) -> None:
    port = sims["c"].port
    r = httpx.get(f"{proxy.url}/api/direct/{port}/health")
    assert r.status_code == 200
    r = httpx.post(
        f"{proxy.url}/api/direct/{port}/v1/completions",
        json={"model": "m2", "prompt": "x", "max_tokens": 2},
    )
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"] == completion_text(2)
    with httpx.stream(
        "POST",
        f"{proxy.url}/api/direct/{port}/v1/completions",
        json={"model": "m2", "prompt": "x", "max_tokens": 3, "stream": True},
    ) as s:
        raw = s.read()
    assert sse_events(raw)[-1] == (None, b"[DONE]")

    for bad in (free_port(), 22, 1):
        r = httpx.get(f"{proxy.url}/api/direct/{bad}/health")
        assert r.status_code == 404
        assert r.json()["code"] == "unknown_port"
        assert "detail" in r.json()


# ------------------------------------------------------------------ metrics
def test_metrics_count_requests_by_model_and_status(proxy: ThreadedProxyServer) -> None:
    httpx.post(f"{proxy.url}/v1/completions", json={"model": "m2", "prompt": "x", "max_tokens": 1})
    httpx.post(f"{proxy.url}/v1/completions", json={"model": "no-such-model"})
    text = httpx.get(f"{proxy.url}/metrics").text
    assert 'sardeenz_proxy_requests_total{model="m2",status="200"}' in text
    assert 'sardeenz_proxy_requests_total{model="_unknown",status="404"}' in text
    assert "no-such-model" not in text
    assert 'sardeenz_proxy_time_to_first_byte_seconds_count{model="m2"}' in text
    assert 'sardeenz_proxy_overhead_seconds_bucket{le="0.001",model="m2"}' in text
    assert 'sardeenz_proxy_requests_in_flight{model="m2"} 0.0' in text
    assert 'sardeenz_instance_status{instance_id="c",model="m2",status="active"} 1.0' in text
    assert "process_cpu_seconds_total" in text
