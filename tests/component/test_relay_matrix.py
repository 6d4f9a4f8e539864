"""One failure matrix through both relay paths: the client cannot tell them apart.

The proxy relays with the express path (fast lane on: protocol callbacks,
proxy/express.py) or with the general handler (fast lane off: uvicorn and
proxy/forwarder.py). Both take their decisions from proxy/relay.py; this file
checks that what a client sees is the same, byte for byte, whichever path
answered: each engine failure below runs through a proxy of each kind, and
the two outcomes (status, relayed headers, body, whether the body ended
cleanly, the request counted by status) must be equal and as expected.

The engines are small raw asyncio servers misbehaving on purpose, on the
proxy's own loop; the proxies are in-process (``ThreadedProxyServer``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest

from sardeenz.config import Settings
from sardeenz.proxy import metrics
from sardeenz.proxy.metrics import LANE
from sardeenz.standalone import make_instance
from testkit.ports import free_port
from testkit.proxy import ThreadedProxyServer
from testkit.sim import read_request

pytestmark = pytest.mark.timeout(60)

Engine = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_OK = orjson.dumps({"object": "text_completion", "choices": [{"text": "ok"}]})
_ENGINE_500 = orjson.dumps({"object": "error", "message": "engine bug", "code": 500})
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
_JSON_CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
)
_BIG = 2_000_000  # over relay.READ_WHOLE_LIMIT: relayed as it comes, not read whole


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def engine(*parts: bytes, answers: int | None = None, close: bool = False) -> Engine:
    """An engine that answers each request with ``parts`` (a pause between them).

    ``close``: then closes the connection (the answer is cut there);
    ``answers``: after that many answers on a connection, the next request is
    read and the connection closed without a byte of answer.
    """

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            n = 0
            while answers is None or n < answers:
                await read_request(reader)
                n += 1
                for i, part in enumerate(parts):
                    if i:
                        await asyncio.sleep(0.03)  # separate reads at the proxy
                    writer.write(part)
                    await writer.drain()
                if close:
                    await asyncio.sleep(0.03)
                    return
            await read_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return serve


def mid_stream_error(model: str) -> bytes:
    err = {
        "message": f"The engine serving {model!r} failed mid-stream",
        "type": "upstream_error",
        "param": None,
        "code": "engine_failed",
    }
    return b"event: error\ndata: " + orjson.dumps({"error": err}) + b"\n\n"


def openai_error(message: str, type_: str, code: str) -> bytes:
    err = {"message": message, "type": type_, "param": None, "code": code}
    return orjson.dumps({"error": err})


@dataclass(frozen=True)
class Outcome:
    status: int
    headers: dict[str, str]
    body: bytes
    complete: bool
    counted: dict[int, int]


@dataclass(frozen=True)
class Case:
    name: str
    engine: Engine | None  # None: nothing listens on the port
    expected: list[Outcome]  # one per request, in order
    express: int  # requests the express path answers itself (fast lane on)
    stream: bool = False


_RELAYED = ("content-type", "content-length", "transfer-encoding", "retry-after", "x-engine")


def cases() -> list[Case]:
    def out(
        status: int,
        body: bytes,
        ct: str = "application/json",
        complete: bool = True,
        counted: int | None = None,
        **headers: str,
    ) -> Outcome:
        h = {"content-type": ct, **{k.replace("_", "-"): v for k, v in headers.items()}}
        return Outcome(status, h, body, complete, {counted or status: 1})

    def sse(body: bytes) -> Outcome:
        return out(200, body, "text/event-stream", counted=502, transfer_encoding="chunked")

    refused = openai_error(
        "The engine serving 'refused' is not reachable; retry shortly",
        "service_unavailable_error",
        "engine_unavailable",
    )
    dropped = openai_error(
        "The engine serving 'dropped' failed before answering", "upstream_error", "engine_failed"
    )
    head_only = openai_error(
        "The engine serving 'head-only-json' failed while answering",
        "upstream_error",
        "engine_failed",
    )
    event = b'data: {"n":1}\n\n'
    return [
        # before the first byte
        Case(
            "refused",
            None,
            [out(503, refused, content_length=str(len(refused)), retry_after="1")],
            express=0,  # nothing reached an engine: the handler answers
        ),
        Case(
            "dropped",
            engine(answers=0),
            [out(502, dropped, content_length=str(len(dropped)))],
            express=1,
        ),
        Case(
            "head-only-json",
            engine(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
                close=True,
            ),
            [out(502, head_only, content_length=str(len(head_only)))],
            express=1,
        ),
        # after the first byte: an event stream ends with an error event ...
        Case(
            "head-only-sse",
            engine(_SSE_HEAD, close=True),
            [sse(mid_stream_error("head-only-sse"))],
            express=1,
            stream=True,
        ),
        Case(
            "sse-mid-stream",
            engine(_SSE_HEAD + chunk(event), chunk(b'data: {"n":2}\n\n'), close=True),
            [sse(event + b'data: {"n":2}\n\n' + mid_stream_error("sse-mid-stream"))],
            express=1,
            stream=True,
        ),
        Case(
            "sse-mid-event",
            engine(_SSE_HEAD + chunk(event), chunk(b'data: {"par'), close=True),
            [sse(event + b'data: {"par\n\n' + mid_stream_error("sse-mid-event"))],
            express=1,
            stream=True,
        ),
        # ... any other body is cut: it must not look complete
        Case(
            "json-mid-body-chunked",
            engine(_JSON_CHUNKED_HEAD + chunk(b'{"partial":'), close=True),
            [out(200, b'{"partial":', complete=False, counted=502, transfer_encoding="chunked")],
            express=1,
        ),
        Case(
            "json-mid-body-long",
            engine(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (_BIG, b"x" * 1000),
                close=True,
            ),
            [out(200, b"x" * 1000, complete=False, counted=502, content_length=str(_BIG))],
            express=1,
        ),
        # the engine's own errors are relayed as they are
        Case(
            "engine-500",
            engine(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                b"x-engine: yes\r\ncontent-length: %d\r\n\r\n%s" % (len(_ENGINE_500), _ENGINE_500),
            ),
            [out(500, _ENGINE_500, content_length=str(len(_ENGINE_500)), x_engine="yes")],
            express=1,
        ),
        # a pooled connection the engine closed under us is retried, not failed
        Case(
            "stale-pooled",
            engine(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(_OK), _OK),
                answers=1,
            ),
            [out(200, _OK, content_length=str(len(_OK)))] * 3,
            express=1,  # the first, on a new connection; the others fall back and retry
        ),
    ]


CASES = {c.name: c for c in cases()}


@pytest.fixture(scope="module")
def proxies() -> Iterator[dict[str, ThreadedProxyServer]]:
    """A proxy with the fast lane and express path, and one with uvicorn + handler only,
    both routing every case's model to its misbehaving engine."""
    servers = {
        "express": ThreadedProxyServer(Settings(proxy_fast_lane=True)).start(),
        "handler": ThreadedProxyServer(Settings(proxy_fast_lane=False)).start(),
    }
    host = servers["express"]
    engines: list[asyncio.Server] = []

    async def start(serve: Engine) -> int:
        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        engines.append(srv)
        port: int = srv.sockets[0].getsockname()[1]
        return port

    try:
        for i, case in enumerate(CASES.values()):
            port = free_port() if case.engine is None else host.run(start(case.engine))
            for s in servers.values():
                s.apply(make_instance(f"i{i}", case.name, port))
        yield servers
    finally:

        async def stop() -> None:
            for srv in engines:
                srv.close()

        host.run(stop())
        for s in servers.values():
            s.stop()


def counted(model: str) -> dict[int, int]:
    return dict(metrics.for_model(model).requests)


def send(url: str, case: Case) -> Outcome:
    """One request as a client sees it (a fresh client connection each time)."""
    payload = {"model": case.name, "prompt": "x", "stream": case.stream}
    before = counted(case.name)
    with (
        httpx.Client(base_url=url, timeout=10) as client,
        client.stream("POST", "/v1/completions", json=payload) as r,
    ):
        body = b""
        try:
            for data in r.iter_raw():
                body += data
            complete = True
        except httpx.RemoteProtocolError:  # the proxy closed before the end
            complete = False
        headers = {k: r.headers[k] for k in _RELAYED if k in r.headers}
    # The handler counts after its last write: give it a moment to get there.
    deadline = time.monotonic() + 2
    while True:
        now = counted(case.name)
        delta = {s: n - before.get(s, 0) for s, n in now.items() if n != before.get(s, 0)}
        if sum(delta.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return Outcome(r.status_code, headers, body, complete, delta)


@pytest.mark.parametrize("name", list(CASES))
def test_both_paths_answer_an_engine_failure_the_same(
    proxies: dict[str, ThreadedProxyServer], name: str
) -> None:
    case = CASES[name]
    seen: dict[str, list[Outcome]] = {}
    for path, server in proxies.items():
        express_before = LANE.express
        seen[path] = [send(server.url, case) for _ in case.expected]
        if path == "express":  # the fast-lane proxy's own path did answer it
            assert LANE.express - express_before == case.express
    assert seen["express"] == seen["handler"], "the two relay paths answered differently"
    assert seen["handler"] == case.expected
