"""Controller RSS before and after 4 x 50 MB request headers sent without a token.

Issue 18, item 1: request heads were unbounded before authentication (four
such requests took the controller from 124 to 330 MiB). Now every path
answers 431 past ``SARDEENZ_MAX_HEADER_BYTES`` and never buffers the rest, so
the growth must stay under 10 MiB.

    python benchmarks/header_flood.py                # starts its own `sardeenz serve`
    python benchmarks/header_flood.py --no-fast-lane # SARDEENZ_PROXY_FAST_LANE=false
    python benchmarks/header_flood.py --url http://127.0.0.1:3000 --pid 1234

Exit status 1 when the growth is 10 MiB or more.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit

import httpx
import psutil

MIB = 1 << 20
LIMIT_MIB = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data_dir: str, fast_lane: bool) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {
        **os.environ,
        "SARDEENZ_DATA_DIR": data_dir,
        "SARDEENZ_PORT": str(port),
        "VLLM_BASE_PORT": str(_free_port()),
        "SARDEENZ_PROXY_FAST_LANE": "true" if fast_lane else "false",
        # admin auth on: the flood is unauthenticated, as in the report
        "SARDEENZ_JWT_SECRET": "header-flood-benchmark-secret-0123456789abcdef",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sardeenz.cli", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/api/health/ready", timeout=1).status_code == 200:
                return proc, url
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


def _flood(host: str, port: int, size: int, path: str, result: list[str]) -> None:
    """One request whose single header is ``size`` bytes; what the server answered."""
    piece = b"a" * MIB
    try:
        with socket.create_connection((host, port), timeout=60) as sock:
            sock.sendall(b"GET %s HTTP/1.1\r\nhost: x\r\nx-flood: " % path.encode())
            sent = 0
            with contextlib.suppress(OSError):  # the server refuses and closes early
                while sent < size:
                    sock.sendall(piece)
                    sent += len(piece)
                sock.sendall(b"\r\n\r\n")
            sock.settimeout(10)
            try:
                answer = sock.recv(200)
            except OSError as exc:
                answer = repr(exc).encode()
            status_line = answer.split(b"\r\n", 1)[0]
            result.append(f"sent {sent / MIB:.0f} MiB, got {status_line!r}")
    except OSError as exc:
        result.append(f"connect failed: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (needs --pid)")
    parser.add_argument("--pid", type=int, help="the running server's process id")
    parser.add_argument("--no-fast-lane", action="store_true")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--mib", type=int, default=50, help="header size of each request")
    parser.add_argument("--path", default="/api/v1/models")
    args = parser.parse_args()

    proc: subprocess.Popen[bytes] | None = None
    tmp = tempfile.TemporaryDirectory(prefix="header-flood-")
    if args.url:
        if args.pid is None:
            parser.error("--url needs --pid")
        url, pid = args.url, args.pid
    else:
        proc, url = _start(tmp.name, not args.no_fast_lane)
        pid = proc.pid
    target = urlsplit(url)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    server = psutil.Process(pid)
    try:
        time.sleep(1.0)  # let start-up allocations settle
        before = server.memory_info().rss
        peak = before
        results: list[str] = []
        threads = [
            threading.Thread(target=_flood, args=(host, port, args.mib * MIB, args.path, results))
            for _ in range(args.requests)
        ]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, server.memory_info().rss)
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        time.sleep(1.0)
        after = server.memory_info().rss
        ok = httpx.get(f"{url}/api/health", timeout=5).status_code
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        tmp.cleanup()
    growth = (after - before) / MIB
    lane = "off" if args.no_fast_lane else "on"
    print(f"{args.requests} x {args.mib} MiB header, no token, {args.path}, fast lane {lane}")
    for line in results:
        print(f"  {line}")
    print(f"  flood took {elapsed:.2f} s; /api/health afterwards: {ok}")
    print(
        f"  controller RSS before {before / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB, "
        f"after {after / MIB:.1f} MiB: growth {growth:+.1f} MiB (limit {LIMIT_MIB:.0f})"
    )
    return 0 if growth < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
