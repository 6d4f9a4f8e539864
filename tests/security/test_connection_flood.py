"""A flood of new connections outside the fast lane does not grow the controller.

Issue 23 item 5 reported RSS growing with every new connection on the paths
uvicorn's own protocol serves (unauthenticated ``GET /api/health`` with a 60 KiB
header from 50 threads: +284 MiB after 4,689 requests; small headers +21-29 MiB
per 3,000 connections). docs/connection-memory.md says what was measured and how.
This holds the bound the issue asks for: 20,000 new connections, RSS growth under
20 MiB, measured after a warm-up (first-use caches and allocator arenas).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import psutil
import pytest

from testkit.servers import ServerProcess, kill_engines

SECRET = "flood-tests-hs256-secret-0123456789abcdef"
THREADS = 50
MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("flood")
    srv = ServerProcess(data_dir, extra_env={"SARDEENZ_JWT_SECRET": SECRET}).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


def _flood(server: ServerProcess, connections: int, big_every: int) -> int:
    """``connections`` new connections, each one ``GET /api/health/live`` (the cheapest
    route uvicorn serves; every ``big_every``-th with a 60 KiB header); how many got 200."""
    small = b"GET /api/health/live HTTP/1.1\r\nhost: t\r\nuser-agent: flood\r\n\r\n"
    big = b"GET /api/health/live HTTP/1.1\r\nhost: t\r\nx-big: %s\r\n\r\n" % (b"a" * 60 * 1024)
    ok = [0] * THREADS

    def worker(index: int) -> None:
        for i in range(index, connections, THREADS):
            with socket.create_connection((server.host, server.port), timeout=10) as sock:
                sock.sendall(big if i % big_every == 0 else small)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                ok[index] += data.startswith(b"HTTP/1.1 200")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return sum(ok)


@pytest.mark.xfail(
    reason="issue 23 item 5 is open: RSS grows about 30-50 MiB per 20,000 new connections "
    "(fast lane on or off, MALLOC_ARENA_MAX=1 too; docs/connection-memory.md); the bound "
    "is kept here so the fix shows as XPASS",
    strict=False,
)
def test_twenty_thousand_new_connections_grow_rss_less_than_20_mib(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    proc = psutil.Process(server.proc.pid)
    assert _flood(server, 2000, 4) == 2000  # warm-up
    before = proc.memory_info().rss
    answered = _flood(server, 20_000, 4)
    grown = proc.memory_info().rss - before
    assert answered == 20_000
    assert grown < 20 * MIB, f"+{grown / MIB:.1f} MiB after 20,000 connections"
    print(f"RSS +{grown / MIB:.1f} MiB after 20,000 connections")
    assert "Traceback" not in server.log()
