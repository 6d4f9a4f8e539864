"""No request body is read before its sender is authenticated, nor for ever.

The attacks of issue 23 item 2, each with its numbers: a POST announcing a
1,000,000-byte body with no token was not answered for 5 s+; 200 anonymous
connections of 1 MiB on ``/api/v1/models/load`` grew the controller by 228 MiB,
20 connections of 30 MiB on ``/v1`` (API keys set) by 600 MiB, 50 unsigned
connections of 8 MiB on ``/internal/heartbeat`` by 400 MiB; slow chunked bodies were
held 40 s+. Now a refusal comes from the headers alone, a body has
``SARDEENZ_BODY_TIMEOUT_SECONDS`` to arrive, and the bodies of signed cluster
requests (read before their signature can be checked) share one budget.

The connections are kept open while the server's RSS is measured: what the server
read of them is then still held, as it was before these limits.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import jwt
import psutil
import pytest

from testkit.cluster import SECRET as CLUSTER_SECRET
from testkit.cluster import Cluster
from testkit.servers import ServerProcess, kill_engines

JWT_SECRET = "prebody-tests-hs256-secret-0123456789abcdef"
API_KEY = "prebody-inference-key-0123456789"
BODY_TIMEOUT = 1.5
MIB = 1 << 20
RSS_BOUND = 40 * MIB
"""Growth allowed under each flood (the floods themselves are 200-600 MiB)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("prebody")
    srv = ServerProcess(
        data_dir,
        extra_env={
            "SARDEENZ_JWT_SECRET": JWT_SECRET,
            "SARDEENZ_API_KEYS": API_KEY,
            "SARDEENZ_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        },
    ).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cluster = Cluster(
        tmp_path_factory.mktemp("prebody-pod"),
        1,
        SARDEENZ_API_KEYS=API_KEY,
        SARDEENZ_UNVERIFIED_BODY_BYTES=str(8 * MIB),
    )
    try:
        cluster.start()
        yield cluster.pods["pod-a"]
    finally:
        cluster.close()


def _rss(server: ServerProcess) -> int:
    assert server.proc is not None
    return int(psutil.Process(server.proc.pid).memory_info().rss)


def _token() -> str:
    claims = {"sub": "admin-user", "exp": int(time.time()) + 3600, "roles": ["admin"]}
    return jwt.encode(claims, JWT_SECRET, algorithm="HS256")


def _connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _head(path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        f"{extra}content-length: {length}\r\n\r\n"
    ).encode()


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes (or ``timeout`` passes)."""
    sock.settimeout(timeout)
    out = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


def _push(sock: socket.socket, data: bytes) -> int:
    """Send as much of ``data`` as the server takes within a moment; bytes sent."""
    sock.settimeout(0.5)
    sent = 0
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while sent < len(data):
            sent += sock.send(view[sent : sent + MIB])
    return sent


def _flood(
    server: ServerProcess, n: int, head: bytes, body: bytes
) -> tuple[list[socket.socket], int]:
    """``n`` connections each sending ``head`` + ``body``, left open; total bytes sent.

    Callers send one byte less than they announce: a body the server reads is held
    until the last byte comes, as an attacker would hold it."""
    socks, total = [], 0
    for _ in range(n):
        sock = _connect(server)
        socks.append(sock)
        total += _push(sock, head + body)
    return socks, total


@pytest.mark.parametrize(
    "path", ["/api/v1/models/load", "/v1/chat/completions", "/api/direct/1/v1/models"]
)
def test_a_body_without_a_token_is_refused_at_once_unread(server: ServerProcess, path: str) -> None:
    """Before: a POST announcing 1,000,000 bytes, none sent, had no answer for 5 s+."""
    with _connect(server) as sock:
        t0 = time.monotonic()
        sock.sendall(_head(path, 1_000_000))
        data = _answer(sock, 5.0)
        elapsed = time.monotonic() - t0
    assert data.startswith(b"HTTP/1.1 401"), data[:300]
    assert b"connection: close" in data.lower()
    assert elapsed < 3.0, f"answered after {elapsed:.1f} s"


def test_anonymous_bodies_on_the_admin_api_are_not_held(server: ServerProcess) -> None:
    """Before: 200 connections of 1 MiB each on /api/v1/models/load: +228 MiB."""
    before = _rss(server)
    socks, sent = _flood(server, 200, _head("/api/v1/models/load", MIB), b"{" + b" " * (MIB - 2))
    try:
        grown = _rss(server) - before
        answers = [_answer(s, 5.0) for s in socks[:5]]
    finally:
        for s in socks:
            s.close()
    assert all(a.startswith(b"HTTP/1.1 401") for a in answers), answers[0][:200]
    assert grown < RSS_BOUND, f"+{grown / MIB:.0f} MiB after {sent / MIB:.0f} MiB sent"
    assert "Traceback" not in server.log()


def test_bodies_without_an_api_key_are_not_held(server: ServerProcess) -> None:
    """Before: with API keys set, 20 connections of 30 MiB each on /v1: +600 MiB."""
    size = 30 * MIB
    before = _rss(server)
    body = b"{" + b" " * (size - 2)
    socks, sent = _flood(server, 20, _head("/v1/chat/completions", size), body)
    try:
        grown = _rss(server) - before
        answer = _answer(socks[0], 5.0)
    finally:
        for s in socks:
            s.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b'"invalid_api_key"' in answer
    assert grown < RSS_BOUND, f"+{grown / MIB:.0f} MiB after {sent / MIB:.0f} MiB sent"


@pytest.mark.parametrize(
    ("path", "auth", "code"),
    [
        ("/api/v1/models/load", "Bearer {token}", b"body_timeout"),
        ("/v1/chat/completions", f"Bearer {API_KEY}", b"body_timeout"),
    ],
)
@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_slow_bodies_are_cut_at_the_body_timeout(
    server: ServerProcess, path: str, auth: str, code: bytes, framing: str
) -> None:
    """Before: 100 slow chunked bodies were held 40 s+ (authenticated or not)."""
    header = "authorization: " + auth.format(token=_token()) + "\r\n"
    if framing == "chunked":
        head = (
            f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
            f"{header}transfer-encoding: chunked\r\n\r\n"
        ).encode()
    else:
        head = _head(path, 10_000, header)
    socks = []
    t0 = time.monotonic()
    try:
        for _ in range(100):
            sock = _connect(server)
            sock.sendall(head + (b"1\r\n{\r\n" if framing == "chunked" else b"{"))
            socks.append(sock)
        closed_at: list[float] = []
        answers: list[bytes] = []
        deadline = t0 + BODY_TIMEOUT + 10
        for sock in socks:  # a byte now and then does not keep a body alive
            out = b""
            sock.settimeout(0.2)
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    with contextlib.suppress(OSError):
                        sock.send(b"1\r\n \r\n" if framing == "chunked" else b" ")
                    continue
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    closed_at.append(time.monotonic() - t0)
                    break
                out += chunk
            answers.append(out)
    finally:
        for s in socks:
            s.close()
    assert len(closed_at) == 100, f"{100 - len(closed_at)} connections still open"
    assert max(closed_at) < BODY_TIMEOUT + 5, max(closed_at)
    assert all(a.startswith(b"HTTP/1.1 408") and code in a for a in answers), answers[0][:300]
    assert "Traceback" not in server.log()


def test_unsigned_internal_bodies_are_refused_unread(pod: ServerProcess) -> None:
    """Before: 50 unsigned connections of 8 MiB on /internal/heartbeat: +400 MiB."""
    size = 8 * MIB
    before = _rss(pod)
    socks, sent = _flood(pod, 50, _head("/internal/heartbeat", size), b"{" + b" " * (size - 2))
    try:
        grown = _rss(pod) - before
        answer = _answer(socks[0], 5.0)
    finally:
        for s in socks:
            s.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b'"unsigned"' in answer
    assert grown < RSS_BOUND, f"+{grown / MIB:.0f} MiB after {sent / MIB:.0f} MiB sent"


@pytest.mark.parametrize("path", ["/internal/heartbeat", "/v1/chat/completions"])
def test_forged_signatures_share_one_budget(pod: ServerProcess, path: str) -> None:
    """Well-formed, fresh signature headers for this pod (no secret needed) and 8 MiB bodies: read
    before the signature can be checked, so they count against one budget (8 MiB here)."""
    size = 8 * MIB - 1024
    before = _rss(pod)
    socks = []
    try:
        for i in range(50):
            stamp = int(time.time() * 1000)
            forged = (
                f"x-cluster-timestamp: {stamp}\r\nx-cluster-signature: {i:064x}\r\n"
                "x-cluster-target: pod-a\r\nx-cluster-source: pod-z\r\n"
            )
            sock = _connect(pod)
            socks.append(sock)
            sock.sendall(_head(path, size, forged))
            _push(sock, b"{" + b" " * (size // 2))  # half of it: the rest is held back
        grown = _rss(pod) - before
        answers = [_answer(s, 0.5) for s in socks]
    finally:
        for s in socks:
            s.close()
    full = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    assert len(full) >= 45, [a[:100] for a in answers[:3]]
    assert all(b"unverified_bodies_full" in a for a in full)
    assert grown < RSS_BOUND, f"+{grown / MIB:.0f} MiB"
    assert "Traceback" not in pod.log()


def test_well_formed_requests_still_pass(server: ServerProcess, pod: ServerProcess) -> None:
    """The checks refuse before the body, not everything: a signed request and an
    authenticated body still get their answers."""
    from sardeenz.security.cluster_hmac import Signer

    body = b'{"podId": "pod-z"}'
    signer = Signer(CLUSTER_SECRET.encode(), source="pod-z")
    headers = signer.header_block("POST", "/internal/heartbeat", body, target="pod-a")
    with _connect(pod) as sock:
        sock.sendall(_head("/internal/heartbeat", len(body), headers.decode()) + body)
        answer = _answer(sock, 3.0)
    # A signed body reaches the route (which refuses a heartbeat this short as 400).
    assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 400")), answer[:300]
    load = b'{"modelPath": ""}'
    auth = f"authorization: Bearer {_token()}\r\nconnection: close\r\n"
    with _connect(server) as sock:
        sock.sendall(_head("/api/v1/models/load", len(load), auth) + load)
        answer = _answer(sock, 5.0)
    assert answer.startswith(b"HTTP/1.1 422"), answer[:300]
