"""Garbage in, never a 5xx out: hypothesis-generated requests against the proxy.

The upstream is a tiny aiohttp echo server (the point is the proxy's own
handling: parsing, routing, header relaying), run on the proxy's loop.
"""

from __future__ import annotations

import json
import socket
import string
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sardeenz.config import Settings
from sardeenz.standalone import make_instance
from testkit.proxy import ThreadedProxyServer

pytestmark = pytest.mark.timeout(60)

_RESERVED = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "expect",
    "te",
    "trailer",
    "keep-alive",
}


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {"len": len(body), "headers": len(request.headers)}, headers={"x-echo": "1"}
    )


async def _start_echo() -> tuple[web.AppRunner, int]:
    app = web.Application(client_max_size=2**20)
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


@pytest.fixture(scope="module")
def fuzz_proxy() -> Iterator[tuple[ThreadedProxyServer, httpx.Client]]:
    server = ThreadedProxyServer(
        Settings(proxy_max_body_bytes=4096, proxy_ready_wait_seconds=0)
    ).start()
    runner, port = server.run(_start_echo())
    server.apply(make_instance("echo-1", "echo", port))
    client = httpx.Client(base_url=server.url, timeout=10)
    try:
        yield server, client
    finally:
        client.close()
        server.run(runner.cleanup())
        server.stop()


def _dumps(value: object) -> bytes:
    # stdlib, not orjson: big integers and Infinity must reach the proxy too
    return json.dumps(value).encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
models = st.one_of(
    st.just("echo"),
    st.text(max_size=30),
    st.none(),
    st.integers(),
    st.lists(st.text(max_size=5), max_size=2),
)
json_bodies = st.builds(
    lambda extra, model, with_model: _dumps({**extra, "model": model} if with_model else extra),
    st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    models,
    st.booleans(),
)
bodies = st.one_of(json_bodies, st.binary(max_size=6000), json_values.map(_dumps))
header_names = st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=20).filter(
    lambda n: n.lower() not in _RESERVED and not n.lower().startswith("proxy-")
)
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60).map(
    str.strip
)
headers = st.dictionaries(header_names, header_values, max_size=6)
paths = st.sampled_from(
    [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/x/y/z",
        "/v1/models",
        "/v1/models/echo",
        "/v1/models/nope",
        "/api/direct/1/x",
        "/api/direct/99999/x",
        "/api/direct/abc/x",
    ]
)
methods = st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
queries = st.dictionaries(st.text(max_size=6), st.text(max_size=10), max_size=3)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(method=methods, path=paths, body=bodies, hdrs=headers, query=queries)
def test_garbage_never_gets_a_5xx(
    fuzz_proxy: tuple[ThreadedProxyServer, httpx.Client],
    method: str,
    path: str,
    body: bytes,
    hdrs: dict[str, str],
    query: dict[str, str],
) -> None:
    _, client = fuzz_proxy
    try:
        r = client.request(method, path, content=body, headers=hdrs, params=query)
    except httpx.LocalProtocolError:
        return  # httpx itself refused to send it: nothing reached the proxy
    assert r.status_code < 500, (r.status_code, r.text)
    if path.startswith("/v1/") and r.status_code >= 400:
        err: Any = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
    if path.startswith("/api/direct/") and r.status_code >= 400:
        assert r.json()["code"] in ("unknown_port", "body_too_large")


def test_forwarded_headers_and_body_arrive_intact(
    fuzz_proxy: tuple[ThreadedProxyServer, httpx.Client],
) -> None:
    _, client = fuzz_proxy
    body = b'{"model": "echo", "x": "' + b"y" * 3000 + b'"}'
    r = client.post("/v1/anything", content=body, headers={"x-a": "1", "x-b": "2"})
    assert r.status_code == 200
    assert r.json()["len"] == len(body)
    assert r.headers["x-echo"] == "1"
