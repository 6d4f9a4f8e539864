"""CLI start-up cost: CPU time of ``sardeenz version`` and ``sardeenz models ls``.

Each command is the installed entry point run as an operator runs it, against a
``sardeenz serve --demo`` started by this script (so ``models ls`` prints a real
table of its demo models). The baseline, measured in the same run, is
``python -c pass``: the interpreter's own start-up, which no CLI can go below.

CPU is user + system time of the child (``getrusage(RUSAGE_CHILDREN)`` around each
run); the best of ``--rounds`` is kept, as a loaded machine only ever adds to it.
Target (issue 25): each command under 0.3 s CPU.

Usage: .venv/bin/python benchmarks/cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import ServerProcess, kill_engines

TARGET_S = 0.3


def cpu_seconds(argv: list[str], env: dict[str, str], rounds: int) -> float:
    """The least CPU (user + system) one run of ``argv`` took, over ``rounds`` runs."""
    best = float("inf")
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr}")
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, used)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("sardeenz")
    with tempfile.TemporaryDirectory(prefix="sardeenz-cli-bench-") as tmp:
        server = ServerProcess(Path(tmp), args=["--demo"]).start()
        try:
            env = {**os.environ, "SARDEENZ_URL": server.url}
            rows = [
                ("python -c pass (baseline)", [sys.executable, "-c", "pass"]),
                ("sardeenz version", [str(script), "version"]),
                ("sardeenz models ls", [str(script), "models", "ls"]),
            ]
            measured = [(label, cpu_seconds(argv, env, args.rounds)) for label, argv in rows]
        finally:
            server.stop()
            kill_engines(server.data_dir)  # the demo's engines outlive a stopped server
    baseline = measured[0][1]
    print(f"{'command':<28} {'CPU (s)':>8} {'- baseline':>11}  target < {TARGET_S} s")
    for label, used in measured:
        verdict = "" if label.startswith("python") else ("ok" if used < TARGET_S else "OVER")
        print(f"{label:<28} {used:>8.3f} {used - baseline:>11.3f}  {verdict}")


if __name__ == "__main__":
    main()
