"""Odd bytes from a client without credentials are a clear 4xx, never a 500 (issue 23).

Each of these was a 500 with a traceback in the log (two per request for the paths):
``X-Cluster-Timestamp: \\xb2`` passed ``str.isdigit`` and crashed ``int()``, on
``/internal`` and on a ``/v1`` request forwarded by a pod (``x-sardeenz-hop``); a NUL in
the path reached the dashboard's file lookup ("embedded null byte"), and so did a name
longer than the file system allows. The server is a one-pod static cluster (it leads:
no redirect) with API keys, so every one of these paths is live.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from testkit.servers import ServerProcess, kill_engines

SECRET = "unauthenticated-errors-cluster-secret-0123456789"
API_KEY = "unauthenticated-errors-api-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("unauth-errors")
    srv = ServerProcess(data_dir)
    srv.env.update(
        {
            "CLUSTER_PEERS": f"127.0.0.1:{srv.port}",  # itself: a cluster of one, its leader
            "CLUSTER_SECRET": SECRET,
            "SARDEENZ_API_KEYS": API_KEY,
        }
    )
    srv.start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


def _exchange(server: ServerProcess, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """One raw request (bytes as sent, no client library to clean them); status and body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + b"connection: close\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


BAD_TIMESTAMP = (
    b"x-cluster-timestamp: \xb2\r\nx-cluster-target: *\r\n"
    b"x-cluster-signature: " + b"ab" * 32 + b"\r\n"
)


def test_a_superscript_timestamp_on_internal_is_401(server: ServerProcess) -> None:
    status, body = _exchange(server, b"GET /internal/ping HTTP/1.1\r\nhost: t\r\n" + BAD_TIMESTAMP)
    assert status == 401, body
    assert orjson.loads(body)["code"] == "bad_timestamp"


def test_a_superscript_timestamp_on_a_forwarded_v1_request_is_401(server: ServerProcess) -> None:
    payload = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 1})
    head = (
        b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"x-sardeenz-hop: pod-x\r\ncontent-length: %d\r\n" % len(payload)
    )
    status, body = _exchange(server, head + BAD_TIMESTAMP, payload)
    assert status == 401, body
    assert orjson.loads(body)["error"]["code"] == "invalid_api_key"  # OpenAI's shape


@pytest.mark.parametrize("path", ["/%00", "/favicon.svg%00", "/metrics%00", "/docs%00", "/a%00b"])
def test_a_nul_in_the_path_is_400(server: ServerProcess, path: str) -> None:
    status, body = _exchange(server, b"GET %s HTTP/1.1\r\nhost: t\r\n" % path.encode())
    assert status == 400, body
    assert orjson.loads(body) == {
        "detail": "the request path contains a control character (\\x00)",
        "code": "invalid_path",
    }


@pytest.mark.parametrize("path", ["/" + "a" * 300, "/" + "/".join(["b" * 250] * 20) + "/x.js"])
def test_a_name_too_long_for_the_file_system_is_no_file(server: ServerProcess, path: str) -> None:
    # A deep link of the dashboard (its page, or the no-build page): whatever it is, not a 500.
    status, body = _exchange(server, b"GET %s HTTP/1.1\r\nhost: t\r\n" % path.encode())
    assert status == 200, body


def test_none_of_it_left_a_traceback(server: ServerProcess) -> None:
    # Runs last in this module: every request above has been answered by then.
    log = server.log()
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log
    assert "internal_error" not in log
