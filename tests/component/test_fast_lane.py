"""The fast lane (proxy/fastlane.py) over raw sockets: HTTP/1.1 as clients send it.

The lane serves plain ``/v1`` requests itself and hands any other request's
connection to uvicorn; these tests speak bytes on a socket so that keep-alive,
pipelining, ``Expect``, framing and the hand-over are exercised exactly, and
read the answers with the stdlib's ``http.client`` parser.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sardeenz.config import Settings
from sardeenz.proxy.fastlane import fast_lane_protocol
from sardeenz.standalone import make_instance
from testkit.proxy import ThreadedProxyServer
from testkit.sim import Sim
from testkit.waiting import within

pytestmark = pytest.mark.timeout(60)

BODY = orjson.dumps({"model": "m1", "prompt": "hi", "max_tokens": 3})


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    engine = Sim("m1", ttft_ms=1, itl_ms=1).wait_ready()
    try:
        yield engine
    finally:
        engine.kill()


@pytest.fixture(scope="module")
def lane(sim: Sim) -> Iterator[ThreadedProxyServer]:
    server = ThreadedProxyServer(
        Settings(proxy_max_body_bytes=64 * 1024), timeout_keep_alive=1
    ).start()
    try:
        server.apply(make_instance("a", "m1", sim.port))
        yield server
    finally:
        server.stop()


class _Shared:
    """The connection's one read buffer, which a finished HTTPResponse must not close."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def close(self) -> None:
        pass


class Conn:
    """One client socket; ``read()`` parses the next response off a shared buffer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file: BinaryIO = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> tuple[http.client.HTTPResponse, bytes]:
        resp = http.client.HTTPResponse(self)  # type: ignore[arg-type]
        resp.begin()
        return resp, resp.read()

    def makefile(self, *_: Any, **__: Any) -> Any:  # what HTTPResponse asks of a socket
        return _Shared(self.file)

    def closed_by_peer(self, wait: float = 5.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.file.read(1) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@pytest.fixture
def conn(lane: ThreadedProxyServer) -> Iterator[Conn]:
    c = Conn(lane.port)
    yield c
    c.close()


def post(path: str = "/v1/completions", body: bytes = BODY, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n%s\r\n%s" % (path.encode(), len(body), extra, body)
    )


def counters(lane: ThreadedProxyServer) -> tuple[float, float]:
    c = Conn(lane.port)
    try:
        c.send(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        _, body = c.read()
    finally:
        c.close()
    values = {}
    for line in body.decode().splitlines():
        if line.startswith("sardeenz_http_connections"):
            name, value = line.split(" ")
            values[name] = float(value)
    return values["sardeenz_http_connections_total"], values[
        "sardeenz_http_connections_handed_over_total"
    ]


def test_keep_alive_requests_are_served_by_the_lane_not_handed_over(
    lane: ThreadedProxyServer,
) -> None:
    accepted0, handed0 = counters(lane)
    conn = Conn(lane.port)
    for _ in range(3):
        conn.send(post())
        resp, body = conn.read()
        assert resp.status == 200
        assert orjson.loads(body)["model"] == "m1"
        assert resp.getheader("date")
        assert resp.getheader("content-length") == str(len(body))
    conn.close()
    accepted, handed = counters(lane)
    # this connection plus the metrics connection of counters(); only the latter handed over
    assert accepted - accepted0 == 2
    assert handed - handed0 == 1


def test_pipelined_requests_are_answered_in_order(conn: Conn) -> None:
    first = orjson.dumps({"model": "m1", "prompt": "a", "max_tokens": 2})
    second = orjson.dumps({"model": "m1", "prompt": "b", "max_tokens": 5})
    conn.send(post(body=first) + post(body=second))
    r1, b1 = conn.read()
    r2, b2 = conn.read()
    assert (r1.status, r2.status) == (200, 200)
    assert orjson.loads(b1)["usage"]["completion_tokens"] == 2
    assert orjson.loads(b2)["usage"]["completion_tokens"] == 5


def test_a_non_v1_request_hands_the_connection_to_uvicorn_mid_connection(conn: Conn) -> None:
    conn.send(post())
    assert conn.read()[0].status == 200
    conn.send(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
    resp, body = conn.read()
    assert resp.status == 200
    assert b"sardeenz_proxy_requests_total" in body
    # the same connection keeps working, now through uvicorn
    conn.send(post())
    resp, body = conn.read()
    assert resp.status == 200
    assert orjson.loads(body)["object"] == "text_completion"


def test_streams_are_chunked_and_end_with_done(conn: Conn) -> None:
    body = orjson.dumps({"model": "m1", "prompt": "hi", "max_tokens": 4, "stream": True})
    conn.send(post(body=body))
    resp, data = conn.read()
    assert resp.status == 200
    assert resp.getheader("transfer-encoding") == "chunked"
    assert resp.getheader("content-type", "").startswith("text/event-stream")
    events = [e for e in data.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    assert len(events) >= 5  # 4 tokens (possibly with a usage chunk) and [DONE]


def test_expect_100_continue_is_answered_before_the_body(conn: Conn) -> None:
    head = post(extra=b"expect: 100-continue\r\n")[: -len(BODY)]
    conn.send(head)
    conn.sock.settimeout(5)
    interim = conn.file.readline()
    assert interim.startswith(b"HTTP/1.1 100")
    assert conn.file.readline() == b"\r\n"
    conn.send(BODY)
    resp, body = conn.read()
    assert resp.status == 200
    assert orjson.loads(body)["model"] == "m1"


def test_a_body_arriving_in_pieces_is_waited_for(conn: Conn) -> None:
    data = post()
    for i in range(0, len(data), 7):
        conn.send(data[i : i + 7])
        time.sleep(0.002)
    assert conn.read()[0].status == 200


def test_chunked_upload_goes_through_uvicorn_and_works(conn: Conn) -> None:
    conn.send(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    )
    resp, body = conn.read()
    assert resp.status == 200
    assert orjson.loads(body)["model"] == "m1"


def test_a_body_over_the_limit_is_refused_with_413_without_being_read(conn: Conn) -> None:
    conn.send(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % (10 * 2**20)
    )
    resp, body = conn.read()
    assert resp.status == 413
    assert orjson.loads(body)["error"]["code"] == "body_too_large"
    assert conn.closed_by_peer()


def test_oversized_headers_are_431_in_openai_shape(conn: Conn) -> None:
    conn.send(b"POST /v1/completions HTTP/1.1\r\nx-big: " + b"a" * (70 * 1024) + b"\r\n\r\n")
    resp, body = conn.read()
    assert resp.status == 431
    assert orjson.loads(body)["error"]["code"] == "headers_too_large"
    assert conn.closed_by_peer()


def test_malformed_request_is_400_and_closed(conn: Conn) -> None:
    conn.send(b"POST /v1/completions HTTP/1.1\r\nbad header line\r\ncontent-length: 2\r\n\r\n{}")
    resp, body = conn.read()
    assert resp.status == 400
    assert orjson.loads(body)["error"]["code"] == "invalid_http_request"
    assert conn.closed_by_peer()


def test_http_1_0_is_answered_and_closed(conn: Conn) -> None:
    conn.send(post().replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    resp, body = conn.read()
    assert resp.status == 200
    assert orjson.loads(body)["model"] == "m1"
    assert conn.closed_by_peer()


def test_connection_close_is_honoured(conn: Conn) -> None:
    conn.send(post(extra=b"connection: close\r\n"))
    resp, _ = conn.read()
    assert resp.status == 200
    assert resp.getheader("connection") == "close"
    assert conn.closed_by_peer()


def test_head_of_models_has_length_and_no_body(conn: Conn) -> None:
    conn.send(b"HEAD /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
    resp = http.client.HTTPResponse(conn, method="HEAD")  # type: ignore[arg-type]
    resp.begin()
    assert resp.status == 200
    assert int(resp.getheader("content-length") or 0) > 0
    conn.send(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")  # nothing left over from HEAD
    resp, body = conn.read()
    assert resp.status == 200
    assert [m["id"] for m in orjson.loads(body)["data"]] == ["m1"]


def test_idle_connection_is_closed_after_the_keep_alive_timeout(conn: Conn) -> None:
    conn.send(post())
    assert conn.read()[0].status == 200
    started = time.monotonic()
    assert conn.closed_by_peer(wait=5)
    assert 0.8 < time.monotonic() - started < 4


def test_shutdown_closes_idle_lane_connections_and_finishes(sim: Sim) -> None:
    server = ThreadedProxyServer(Settings(), timeout_keep_alive=60).start()
    server.apply(make_instance("a", "m1", sim.port))
    c = Conn(server.port)
    try:
        c.send(post())
        assert c.read()[0].status == 200
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 3  # not held by the idle keep-alive connection
        assert c.closed_by_peer(wait=1)
    finally:
        c.close()


def _answer_after_eof(port: int, data: bytes) -> int | None:
    """Send ``data``, half-close, and return the first response's status (None: no answer)."""
    c = Conn(port)
    try:
        c.send(data)
        c.sock.shutdown(socket.SHUT_WR)
        try:
            resp, _ = c.read()
        except (http.client.HTTPException, ConnectionError):
            return None
        return resp.status
    finally:
        c.close()


_header_token = st.binary(min_size=1, max_size=20)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(garbage=st.binary(max_size=400))
def test_garbage_after_a_v1_request_line_never_gets_a_5xx(
    lane: ThreadedProxyServer, garbage: bytes
) -> None:
    status = _answer_after_eof(lane.port, b"POST /v1/chat/completions HTTP/1.1\r\n" + garbage)
    assert status is None or status < 500


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    headers=st.lists(st.tuples(_header_token, st.binary(max_size=40)), max_size=6),
    body=st.binary(max_size=200) | st.just(BODY),
)
def test_random_headers_and_bodies_never_get_a_5xx(
    lane: ThreadedProxyServer, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    head = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
    data = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n%scontent-length: %d\r\n\r\n%s" % (
        head,
        len(body),
        body,
    )
    status = _answer_after_eof(lane.port, data)
    assert status is None or status < 500


async def test_an_app_that_crashes_gets_a_500_server_error_and_a_closed_connection() -> None:
    """A bug in the app behind the lane: an OpenAI-shaped 500, never a hang or a bare reset."""

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raise RuntimeError("bug")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections queue until the server accepts them
    config = uvicorn.Config(
        broken,
        loop="none",
        lifespan="off",
        log_level="critical",
        http=fast_lane_protocol(broken, max_body_bytes=1024),
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        writer.write(post())
        raw = await within(reader.read(), 5, "the lane closed the connection after its 500")
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 500")
        assert b"connection: close" in head
        error = orjson.loads(body)["error"]
        assert (error["type"], error["code"]) == ("server_error", "internal_error")
    finally:
        server.should_exit = True
        await serving
        sock.close()
