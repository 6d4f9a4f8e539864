"""Server start-up cost: CPU of one ``sardeenz serve`` from spawn to ready to exit.

What the test suite pays a few hundred times (every test server, every cluster pod).
Each round starts a real server on a new data directory, waits for
``/api/health/ready``, stops it with SIGTERM and takes the CPU (user + system) of the
whole process tree (``getrusage(RUSAGE_CHILDREN)``, so the engines' probes count too).

Rows, run interleaved round by round so a loaded machine affects each alike:

* ``baseline``: the start as it was before issue 24, measured in the same run: the
  same server with ``store.db`` forced back to running every Alembic migration at each
  start (which imported Alembic and its SQLAlchemy dialects), the garbage collector
  left on while the modules load, a TLS context built by each HTTP client, and PyJWT
  (with cryptography), PyYAML and httpx's command-line client (with pygments) imported,
  and uvicorn's watchfiles reloader;
* ``new database``: a first start, today (the schema is created and stamped, no Alembic;
  no garbage collection until the app is built; no PyJWT without admin auth configured);
* ``restart``: a second start on the same data directory (the database is at head).

Then the same for one simulated engine (``python -m sardeenz.sim``, what every model
load of the demo and the tests starts), from spawn through ``/health`` answering 200 and
one ``/metrics`` scrape to its exit on SIGTERM (its EngineCore child included):

* ``sim baseline``: the engine as it was before its start-up was cut, in the same run:
  prometheus_client imported (it wrote ``/metrics``), the garbage collector left on
  while the modules load, and uvicorn's watchfiles reloader imported;
* ``sim engine``: today (``/metrics`` written by ``sardeenz.sim.metrics``, no collection
  during the import).

Then a test server as the suite starts one (``testkit.servers.ServerProcess``), from
spawn to ready, the CPU read from ``/proc`` just before its SIGTERM (the process and the
children it reaped; a forked server is the fork server's child, so ``RUSAGE_CHILDREN``
does not see it):

* ``exec``: the command line, ``python -m sardeenz.cli serve`` (``exec_=True``);
* ``fork``: a fork of this process's fork server (testkit/forkserver.py), which imported
  the server once before the first round.

The best of ``--rounds`` is kept for each, as contention only ever adds to it.

Usage: .venv/bin/python benchmarks/serve_startup.py [--rounds 5] [--only serve|sim|test]
"""

from __future__ import annotations

import argparse
import http.client
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit import forkserver
from testkit.ports import free_port
from testkit.servers import ServerProcess, kill_engines

RUN_CLI = "import runpy; runpy.run_module('sardeenz.cli', run_name='__main__')"
BEFORE_ISSUE_24 = (
    # Alembic ran every migration at each start, and the collector ran during the import.
    "import gc; gc.disable = gc.enable; gc.freeze = lambda: None; "
    "import sardeenz.store.db as db; db._migrate = db.upgrade_head; "
    # and each HTTP client built its own TLS context
    "import httpx, sardeenz.tls as tls; "
    "tls.client_tls = lambda trust_env=True: httpx.create_ssl_context(trust_env=trust_env); "
    # and every start imported PyJWT (with cryptography) and httpx's command-line client
    "import sys; del sys.modules['httpx._main']; import httpx._main, jwt, yaml; "
    # and uvicorn's watchfiles reloader loaded with uvicorn
    "del sys.modules['uvicorn.supervisors.watchfilesreload']; " + RUN_CLI
)

RUN_SIM = "import runpy; runpy.run_module('sardeenz.sim', run_name='__main__')"
SIM_BEFORE = (
    # The collector ran during the import, and prometheus_client wrote /metrics.
    "import gc; gc.disable = gc.enable; gc.freeze = lambda: None; "
    "import prometheus_client; prometheus_client.disable_created_metrics(); "
    # and uvicorn loaded its watchfiles reloader
    "import sys, sardeenz; del sys.modules['uvicorn.supervisors.watchfilesreload']; " + RUN_SIM
)


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def sim_start_stop_cpu(code: str) -> float:
    """CPU seconds of one sim engine from spawn through ready and a scrape to its exit."""
    port = free_port()
    argv = ["--model", "bench", "--port", str(port), "--load-seconds", "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sim engine exited {proc.returncode} before ready")
            if time.monotonic() > deadline:
                raise RuntimeError("sim engine not ready (/health) in 30 s")
            try:
                if _get(port, "/health") == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        if _get(port, "/metrics") != 200:
            raise RuntimeError("sim engine /metrics did not answer 200")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def start_stop_cpu(data_dir: Path, code: str) -> float:
    """CPU seconds of one serve (``python -c code serve``) from spawn until it exited."""
    srv = ServerProcess(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with srv.log_path.open("ab") as log:
        srv.proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=srv.env,
            start_new_session=True,
        )
    try:
        srv.wait_ready(60)
    finally:
        srv.stop()
        kill_engines(data_dir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_server_ready_cpu(data_dir: Path, exec_: bool) -> float:
    """CPU seconds of one test server from spawn to ready (its process and reaped children)."""
    srv = ServerProcess(data_dir, exec_=exec_).start(60)
    try:
        assert srv.proc is not None
        times = psutil.Process(srv.proc.pid).cpu_times()
        return times.user + times.system + times.children_user + times.children_system
    finally:
        srv.stop()
        kill_engines(data_dir)


def print_rows(title: str, best: dict[str, float]) -> None:
    base = next(iter(best.values()))
    print(f"{title:<34} {'CPU (s)':>8} {'/ baseline':>11}")
    for label, used in best.items():
        print(f"{label:<34} {used:>8.3f} {used / base:>11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["serve", "sim", "test"])
    args = parser.parse_args()
    best = {"baseline": float("inf"), "new database": float("inf"), "restart": float("inf")}
    sim_best = {"sim baseline": float("inf"), "sim engine": float("inf")}
    test_best = {"exec": float("inf"), "fork": float("inf")}
    with tempfile.TemporaryDirectory(prefix="sardeenz-serve-bench-") as tmp:
        if args.only in (None, "test"):  # the fork server's one import, before the rounds
            ServerProcess(Path(tmp) / "warm", exec_=False).start(60).stop()
        for i in range(args.rounds):
            if args.only in (None, "test"):
                for label in test_best:
                    used = test_server_ready_cpu(Path(tmp) / f"{label}{i}", label == "exec")
                    test_best[label] = min(test_best[label], used)
            if args.only in (None, "serve"):
                old, new = Path(tmp) / f"old{i}", Path(tmp) / f"new{i}"
                rows = [
                    ("baseline", old, BEFORE_ISSUE_24),
                    ("new database", new, RUN_CLI),
                    ("restart", new, RUN_CLI),
                ]
                for label, data_dir, code in rows:
                    best[label] = min(best[label], start_stop_cpu(data_dir, code))
            if args.only in (None, "sim"):
                for label, code in (("sim baseline", SIM_BEFORE), ("sim engine", RUN_SIM)):
                    sim_best[label] = min(sim_best[label], sim_start_stop_cpu(code))
    if args.only in (None, "serve"):
        print_rows("serve: spawn -> ready -> exit", best)
    if args.only in (None, "sim"):
        print_rows("sim engine: spawn -> ready -> exit", sim_best)
    if args.only in (None, "test"):
        print_rows("test server: spawn -> ready", test_best)
    forkserver.close()


if __name__ == "__main__":
    main()
