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
  (with cryptography), PyYAML and httpx's command-line client (with pygments) imported;
* ``new database``: a first start, today (the schema is created and stamped, no Alembic;
  no garbage collection until the app is built; no PyJWT without admin auth configured);
* ``restart``: a second start on the same data directory (the database is at head).

The best of ``--rounds`` is kept for each, as contention only ever adds to it.

Usage: .venv/bin/python benchmarks/serve_startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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
    "import sys; del sys.modules['httpx._main']; import httpx._main, jwt, yaml; " + RUN_CLI
)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best = {"baseline": float("inf"), "new database": float("inf"), "restart": float("inf")}
    with tempfile.TemporaryDirectory(prefix="sardeenz-serve-bench-") as tmp:
        for i in range(args.rounds):
            old, new = Path(tmp) / f"old{i}", Path(tmp) / f"new{i}"
            rows = [
                ("baseline", old, BEFORE_ISSUE_24),
                ("new database", new, RUN_CLI),
                ("restart", new, RUN_CLI),
            ]
            for label, data_dir, code in rows:
                best[label] = min(best[label], start_stop_cpu(data_dir, code))
    base = best["baseline"]
    print(f"{'serve: spawn -> ready -> exit':<34} {'CPU (s)':>8} {'/ baseline':>11}")
    for label, used in best.items():
        print(f"{label:<34} {used:>8.3f} {used / base:>11.2f}")


if __name__ == "__main__":
    main()
