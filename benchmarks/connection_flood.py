"""Controller RSS growth per 10,000 new connections (issue 23, item 5).

Each connection sends one ``GET /api/health/live`` (one in four with a 60 KiB
header) and closes; one client in three reads the whole answer and resets the
connection (testkit/flood.py). uvicorn's protocol kept every reset connection's
objects for its keep-alive timeout (75 s on the node), so RSS grew with every new
connection; proxy/headguard.py cancels that timer. The baseline, run alongside:
stock uvicorn (uvloop, httptools) with a one-route app and the node's keep-alive,
which still has the defect.

    python benchmarks/connection_flood.py                 # serve + stock uvicorn
    python benchmarks/connection_flood.py --no-fast-lane  # SARDEENZ_PROXY_FAST_LANE=false
    python benchmarks/connection_flood.py --rounds 5 --targets serve

Exit status 1 when ``sardeenz serve`` grows by 10 MiB or more per 10,000 connections
(the test, tests/security/test_connection_flood.py, allows 20 MiB per 20,000).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.flood import flood
from testkit.ports import free_port
from testkit.servers import ServerProcess, kill_engines

MIB = 1 << 20
PER = 10_000
WARM_UP = 2_000
LIMIT_MIB = 10.0
KEEP_ALIVE = 75
"""The node's ``timeout_keep_alive`` (cli/server.py), given to the baseline too."""


def _serve_stock_uvicorn(port: int) -> None:
    """The baseline's server process: stock uvicorn, nothing of Sardeenz."""
    import uvicorn

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        head = {"type": "http.response.start", "status": 200}
        await send({**head, "headers": [(b"content-length", b"2")]})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE,
    )


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the baseline server exited {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("the baseline server did not answer within 30 s")


def _measure(pid: int, port: int, rounds: int) -> list[float]:
    """RSS growth (MiB) of each round of ``PER`` connections, after a warm-up."""
    server = psutil.Process(pid)
    if flood("127.0.0.1", port, WARM_UP) != WARM_UP:
        raise SystemExit("the warm-up flood was not answered 200 throughout")
    growth = []
    for _ in range(rounds):
        before = server.memory_info().rss
        answered = flood("127.0.0.1", port, PER)
        growth.append((server.memory_info().rss - before) / MIB)
        if answered != PER:
            raise SystemExit(f"only {answered} of {PER} connections were answered 200")
    return growth


def _run_serve(rounds: int, fast_lane: bool) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="connection-flood-") as tmp:
        data_dir = Path(tmp)
        srv = ServerProcess(
            data_dir,
            extra_env={
                # admin auth on: the flood is unauthenticated, as in the report
                "SARDEENZ_JWT_SECRET": "connection-flood-benchmark-secret-0123456789",
                "SARDEENZ_PROXY_FAST_LANE": "true" if fast_lane else "false",
            },
        ).start()
        try:
            assert srv.proc is not None
            return _measure(srv.proc.pid, srv.port, rounds)
        finally:
            srv.stop()
            kill_engines(data_dir)


def _run_stock_uvicorn(rounds: int) -> list[float]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--stock-uvicorn-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_ready(f"http://127.0.0.1:{port}/", proc)
        return _measure(proc.pid, port, rounds)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help=f"rounds of {PER:,} connections")
    parser.add_argument("--no-fast-lane", action="store_true")
    parser.add_argument("--targets", default="serve,uvicorn", help="serve, uvicorn or both")
    parser.add_argument("--stock-uvicorn-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stock_uvicorn_port:
        _serve_stock_uvicorn(args.stock_uvicorn_port)
        return 0

    targets = args.targets.split(",")
    results: dict[str, list[float]] = {}
    if "serve" in targets:
        results["sardeenz serve"] = _run_serve(args.rounds, not args.no_fast_lane)
    if "uvicorn" in targets:
        results[f"stock uvicorn, keep-alive {KEEP_ALIVE} s"] = _run_stock_uvicorn(args.rounds)

    lane = "off" if args.no_fast_lane else "on"
    print(
        f"{args.rounds} x {PER:,} new connections after {WARM_UP:,} to warm up; "
        f"1 in 4 with a 60 KiB header, 1 in 3 reset; fast lane {lane}"
    )
    for name, growth in results.items():
        rounds = "  ".join(f"{g:+6.1f}" for g in growth)
        mean = sum(growth) / len(growth)
        print(f"  {name:<32} RSS growth per 10k connections: {rounds}  (mean {mean:+.1f} MiB)")
    serve = results.get("sardeenz serve")
    if serve is None:
        return 0
    worst = max(serve)
    print(f"  sardeenz serve, worst round: {worst:+.1f} MiB per 10k (limit {LIMIT_MIB:.0f})")
    return 0 if worst < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
