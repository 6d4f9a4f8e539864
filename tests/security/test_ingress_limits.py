"""What a client may send before it is authenticated: bounded on every path.

Header size, header count and the time to send a head are checked before any
route or token is looked at, so they are tested with raw sockets, without a
token, on each kind of path (``/v1`` through the fast lane, ``/api``, the
dashboard, ``/metrics``, ``/api/direct``), with the fast lane on and off.
Body limits are tested on the same paths, declared and chunked.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import orjson
import pytest

from testkit.servers import ServerProcess, kill_engines, load_active

SECRET = "ingress-tests-hs256-secret-0123456789abcdef"
HEADER_TIMEOUT = 1.0
PROXY_MAX_BODY = 64 * 1024
API_MAX_BODY = 1 << 20  # the default SARDEENZ_API_MAX_BODY_BYTES

PATHS = [
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/api/v1/models"),
    ("GET", "/api/health"),
    ("POST", "/api/v1/models/load"),
    ("GET", "/api/direct/12345/metrics"),
    ("GET", "/metrics"),
    ("GET", "/"),
]


@pytest.fixture(scope="module", params=["lane", "no-lane"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp(f"ingress-{request.param}")
    srv = ServerProcess(
        data_dir,
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
            "SARDEENZ_PROXY_MAX_BODY_BYTES": str(PROXY_MAX_BODY),
            "SARDEENZ_PROXY_FAST_LANE": "true" if request.param == "lane" else "false",
        },
    ).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


def _token() -> str:
    claims = {"sub": "admin-user", "exp": int(time.time()) + 3600, "roles": ["admin"]}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def _connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes: what came is kept
            return out
        if not chunk:
            return out
        out += chunk


def _read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length, however it is split across reads."""
    sock.settimeout(10)
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length" and len(body) >= int(value):
                    return data
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _exchange(server: ServerProcess, raw: bytes) -> tuple[int, dict[str, object], bytes]:
    """Send one raw request; the status, JSON body and the whole answer, once closed."""
    with _connect(server) as sock:
        sock.sendall(raw)
        data = _read_all(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, orjson.loads(body), data


def _error_code(path: str, body: dict[str, object]) -> object:
    """The error code, checking the body has the shape of its path."""
    if path.startswith("/v1/"):
        error = body["error"]
        assert isinstance(error, dict), body
        assert set(error) == {"message", "type", "param", "code"}, body
        return error["code"]
    assert set(body) == {"detail", "code"}, body
    return body["code"]


# ------------------------------------------------------------------- headers
@pytest.mark.parametrize(("method", "path"), PATHS)
def test_a_header_over_the_limit_is_431_without_a_token(
    server: ServerProcess, method: str, path: str
) -> None:
    big = b"x" * (100 * 1024)
    raw = b"%s %s HTTP/1.1\r\nhost: t\r\nx-big: %s\r\n\r\n" % (method.encode(), path.encode(), big)
    status, body, data = _exchange(server, raw)
    assert status == 431, data[:300]
    assert _error_code(path, body) == "headers_too_large"
    assert b"connection: close" in data.lower()


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_too_many_header_fields_are_431(server: ServerProcess, method: str, path: str) -> None:
    fields = b"".join(b"x-h%d: v\r\n" % i for i in range(150))
    raw = b"%s %s HTTP/1.1\r\nhost: t\r\n%s\r\n" % (method.encode(), path.encode(), fields)
    status, body, _ = _exchange(server, raw)
    assert status == 431
    assert _error_code(path, body) == "headers_too_large"


@pytest.mark.parametrize("path", ["/api/health", "/v1/models"])
def test_a_large_but_allowed_head_is_served(server: ServerProcess, path: str) -> None:
    raw = b"GET %s HTTP/1.1\r\nhost: t\r\nx-big: %s\r\nconnection: close\r\n\r\n" % (
        path.encode(),
        b"y" * (40 * 1024),
    )
    status, _, data = _exchange(server, raw)
    assert status == 200, data[:300]


def test_a_head_over_the_limit_in_many_reads_is_431(server: ServerProcess) -> None:
    """Sent in pieces: the count spans reads (the 50 MB header case, kept short)."""
    with _connect(server) as sock:
        sock.sendall(b"GET /api/v1/models HTTP/1.1\r\nhost: t\r\nx-big: ")
        piece = b"z" * 8192
        for _ in range(9):  # 72 KiB: over the 64 KiB limit
            sock.sendall(piece)
            time.sleep(0.01)
        data = _read_all(sock)
    assert data.startswith(b"HTTP/1.1 431"), data[:200]


# -------------------------------------------------------------- slow headers
@pytest.mark.parametrize(
    "partial",
    [
        b"",  # connects and sends nothing
        b"GET /api/v1/models HTTP/1.1\r\nhost: t\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\n",
        b"GET /v1/models HTTP/1.1\r\nhost: t\r\nx-slow: 1",
        b"GET / HTTP/1.1\r\n",
    ],
)
def test_slow_header_connections_are_closed_within_the_timeout(
    server: ServerProcess, partial: bytes
) -> None:
    with _connect(server) as sock:
        t0 = time.monotonic()
        if partial:
            sock.sendall(partial)
        # A byte now and then does not keep a head alive past the timeout.
        sock.settimeout(0.3)
        closed = False
        while time.monotonic() - t0 < HEADER_TIMEOUT + 4:
            try:
                if sock.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                if partial:
                    sock.sendall(b"x-more: 1\r\n")
            except ConnectionResetError:
                closed = True
                break
        elapsed = time.monotonic() - t0
    assert closed, "the connection was still open"
    assert elapsed < HEADER_TIMEOUT + 2, elapsed


def test_a_keep_alive_connection_is_not_cut_by_the_header_timeout(server: ServerProcess) -> None:
    """The timeout is for a head being received, not for idle keep-alive time."""
    with _connect(server) as sock:
        for _ in range(2):
            sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: t\r\n\r\n")
            data = _read_response(sock)
            assert data.startswith(b"HTTP/1.1 200"), data[:200]
            time.sleep(HEADER_TIMEOUT + 0.5)


# --------------------------------------------------------------------- bodies
def _chunked(total: int) -> bytes:
    piece = b"a" * 65536
    out = b""
    sent = 0
    while sent < total:
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
        sent += len(piece)
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("path", "limit", "code"),
    [
        ("/v1/chat/completions", PROXY_MAX_BODY, "body_too_large"),
        ("/api/v1/models/load", API_MAX_BODY, "payload_too_large"),
    ],
)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_limit_is_413(
    server: ServerProcess, path: str, limit: int, code: str, framing: str
) -> None:
    auth = b"authorization: Bearer %s\r\n" % _token().encode()
    size = limit + 65536
    if framing == "content-length":
        raw = b"POST %s HTTP/1.1\r\nhost: t\r\n%scontent-type: application/json\r\n" % (
            path.encode(),
            auth,
        )
        raw += b"content-length: %d\r\n\r\n" % size + b"a" * size
    else:
        raw = b"POST %s HTTP/1.1\r\nhost: t\r\n%scontent-type: application/json\r\n" % (
            path.encode(),
            auth,
        )
        raw += b"transfer-encoding: chunked\r\n\r\n" + _chunked(size)
    with _connect(server) as sock:
        # Refused early, the server may stop reading: its answer is on its way.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(raw)
        data = _read_response(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), data[:300]
    assert _error_code(path, orjson.loads(body)) == code


# ---------------------------------------------------------------------- ports
@pytest.mark.parametrize("port", ["%C2%B2", "%D9%A1%D9%A2%D9%A3%D9%A4", "1" * 5000, "+80", "0"])
def test_a_port_that_is_not_ascii_digits_is_404_unknown_port(
    server: ServerProcess, port: str
) -> None:
    raw = b"GET /api/direct/%s/metrics HTTP/1.1\r\nhost: t\r\nauthorization: Bearer %s\r\n" % (
        port.encode(),
        _token().encode(),
    )
    status, body, _ = _exchange(server, raw + b"connection: close\r\n\r\n")
    assert status == 404, body
    assert body["code"] == "unknown_port"


# ----------------------------------------------------------- engine errors
def test_an_engine_error_in_another_shape_reaches_v1_in_openai_shape(
    server: ServerProcess,
) -> None:
    """The sim engine, like vLLM, answers a path it does not serve with FastAPI's 404."""
    admin = {"Authorization": f"Bearer {_token()}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as api:
        load_active(api, "errors-m")
        for _ in range(2):  # the second on a pooled connection
            resp = api.post("/v1/embeddings", json={"model": "errors-m", "input": "hi"})
            assert resp.status_code == 404, resp.text
            assert resp.headers["content-type"] == "application/json"
            error = resp.json()["error"]
            assert error == {
                "message": "Not Found",
                "type": "invalid_request_error",
                "param": None,
                "code": "not_found",
            }
        # Unchanged where the engine is addressed directly.
        port = api.get("/api/v1/models").json()[0]["port"]
        direct = api.post(f"/api/direct/{port}/v1/embeddings", json={"input": "hi"})
        assert direct.status_code == 404
        assert direct.json() == {"detail": "Not Found"}
