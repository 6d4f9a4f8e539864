"""The express path (proxy/express.py): which requests it takes, and its fallbacks.

Everything a client can observe is already covered by test_proxy.py, which
runs its whole suite with and without the lane; this file checks what is
particular to the express path: that ordinary requests take it, that others
do not, that a pooled connection the engine closed under us is retried by the
general handler instead of failing the request, and that a slow client's
backpressure holds its engine connection back only while the exchange lasts.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from collections.abc import Awaitable, Callable, Iterator

import httpx
import orjson
import pytest

from sardeenz.config import Settings
from sardeenz.proxy.upstream import Connection, UpstreamClient, UpstreamClosed
from sardeenz.sim.text import completion_text
from sardeenz.standalone import make_instance
from testkit.proxy import ThreadedProxyServer
from testkit.sim import Sim, read_request

pytestmark = pytest.mark.timeout(60)

_ANSWER = orjson.dumps({"object": "text_completion", "choices": [{"text": "ok"}]})


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    engine = Sim("m1", ttft_ms=1, itl_ms=1).wait_ready()
    try:
        yield engine
    finally:
        engine.kill()


@pytest.fixture
def server(sim: Sim) -> Iterator[ThreadedProxyServer]:
    s = ThreadedProxyServer(Settings()).start()
    s.apply(make_instance("a", "m1", sim.port))
    try:
        yield s
    finally:
        s.stop()


def express_count(server: ThreadedProxyServer) -> float:
    # On a connection of its own: a /metrics request hands its connection to
    # uvicorn, and later /v1 requests on it would not take the express path.
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("sardeenz_proxy_express_requests_total "):
            return float(line.split(" ")[1])
    raise AssertionError("no sardeenz_proxy_express_requests_total")


def test_ordinary_requests_take_the_express_path_and_others_do_not(
    server: ThreadedProxyServer,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        before = express_count(server)
        for stream in (False, True, False):
            r = client.post(
                "/v1/completions",
                json={"model": "m1", "prompt": "x", "max_tokens": 3, "stream": stream},
            )
            assert r.status_code == 200
        assert express_count(server) - before == 3
        # answered by the general handler: unknown model, bad JSON, GET
        assert client.post("/v1/completions", json={"model": "nope"}).status_code == 404
        assert client.post("/v1/completions", content=b"{").status_code == 400
        assert client.get("/v1/models").status_code == 200
        assert express_count(server) - before == 3


def _engine(
    answers: int | None,
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """An engine that answers the first ``answers`` requests on a connection with
    ``_ANSWER`` (every one: None) and drops the connection at the next."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                await read_request(reader)
                if answers is not None and served == answers:
                    break
                served += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(_ANSWER), _ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return serve


def test_a_pooled_connection_dropped_by_the_engine_is_retried_not_failed(
    server: ThreadedProxyServer,
) -> None:
    async def start() -> tuple[asyncio.Server, int]:
        srv = await asyncio.start_server(_engine(answers=1), "127.0.0.1", 0)
        return srv, srv.sockets[0].getsockname()[1]

    upstream, port = server.run(start())
    try:
        server.apply(make_instance("flaky-1", "flaky", port))
        with httpx.Client(base_url=server.url, timeout=10) as client:
            before = express_count(server)
            for _ in range(4):
                r = client.post("/v1/completions", json={"model": "flaky", "prompt": "x"})
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["text"] == "ok"
            # the first went express on a new connection; each later one found
            # that connection pooled, saw it dropped, and fell back to the handler
            assert express_count(server) - before >= 1
    finally:
        server.remove("flaky-1")

        async def stop() -> None:
            upstream.close()

        server.run(stop())


class _Backpressured:
    """An express exchange's side of a response whose client fills up on the final
    write: the client's backpressure arrives inside ``on_end``, once the connection is
    back in the pool (``ExpressCycle.writing_paused`` did ``conn.pause()`` then)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.status = 0
        self.body = b""
        self.ended = asyncio.get_running_loop().create_future()

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_flush(self) -> None:
        pass

    def on_end(self) -> None:
        self.conn.pause()
        self.ended.set_result(None)

    def on_error(self, error: UpstreamClosed) -> None:
        self.ended.set_exception(error)


def test_backpressure_after_a_response_ended_never_pauses_the_pooled_connection() -> None:
    """A connection paused once its response ended would go back to the pool unread, and
    the next request on it would hang (seen as a connection still paused after a slow
    client had read its whole stream)."""

    async def scenario() -> None:
        engine = await asyncio.start_server(_engine(answers=None), "127.0.0.1", 0)
        port = engine.sockets[0].getsockname()[1]
        pool = UpstreamClient()
        request = pool.encode("127.0.0.1", port, b"POST", b"/v1/completions", b"", b"{}")
        try:
            first = _Backpressured(await pool.connect("127.0.0.1", port))
            first.conn.start(request, first)
            await asyncio.wait_for(first.ended, 10)
            assert (first.status, first.body) == (200, _ANSWER)
            assert pool.paused_count == 0, "the pooled connection was left paused"
            again = pool.idle_connection("127.0.0.1", port)
            assert again is first.conn, "the connection was not pooled for reuse"
            second = _Backpressured(again)
            again.start(request, second)
            try:
                await asyncio.wait_for(second.ended, 10)
            except TimeoutError:
                raise AssertionError("the next request on the pooled connection hung") from None
            assert (second.status, second.body) == (200, _ANSWER)
        finally:
            await pool.close()
            engine.close()
            await engine.wait_closed()

    asyncio.run(scenario())


def test_a_slow_client_pauses_the_engine_connection_and_loses_nothing(
    server: ThreadedProxyServer,
) -> None:
    big = Sim("big", ttft_ms=0, itl_ms=0, extra=["--max-model-len", "65536"]).wait_ready()
    tokens = 30000  # a few MB of SSE: far more than the socket buffers hold
    try:
        server.apply(make_instance("big-1", "big", big.port))
        body = orjson.dumps({"model": "big", "prompt": "x", "max_tokens": tokens, "stream": True})
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            proxy = server.proxy
            assert proxy is not None
            assert proxy.client is not None
            client = proxy.client
            deadline = time.monotonic() + 10
            while server.call(lambda: client.paused_count) == 0:
                assert time.monotonic() < deadline, "the engine connection was never paused"
                time.sleep(0.05)
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            assert resp.status == 200
            raw = resp.read()
        events = [e for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        text = "".join(
            c["text"] for e in events[:-1] for c in orjson.loads(e[6:]).get("choices", [])
        )
        assert text == completion_text(tokens)
        assert server.call(lambda: client.paused_count) == 0
    finally:
        server.remove("big-1")
        big.kill()
