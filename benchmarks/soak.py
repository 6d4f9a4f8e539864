"""Chaos soak: a 5-pod static cluster (each pod in its own network namespace) under steady
traffic and a seeded fault schedule, its invariants checked all along (testkit/soak.py).

Prints the seed first (``--seed`` replays the same sequence of faults, operations and
traffic), every fault, heal and admin operation as it happens, each invariant violation
with its timeline, and at the end the figures: requests sent, completed, failed (and
why), faults by kind, the longest unavailability of each model, the longest time routing
took to converge, and each pod's controller RSS curve. Exit status 1 if any invariant
was violated. Needs root (network namespaces, a tmpfs for the disk that fills) and
Debian's libfaketime for the clock jumps (``make soak-deps``).

Usage: sudo .venv/bin/python benchmarks/soak.py [--duration 600] [--seed N] [--clients 6]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit import netns
from testkit.soak_faults import clock_unavailable
from testkit.soak_run import run, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--clients", type=int, default=6, help="concurrent traffic clients")
    args = parser.parse_args()
    if not netns.available():
        print("soak: needs root and iproute2 (ip netns)", file=sys.stderr)
        return 2
    if (why := clock_unavailable()) is not None:
        print(f"soak: {why}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed: {seed}  (replay: --seed {seed})", flush=True)
    with tempfile.TemporaryDirectory(prefix="sardeenz-soak-") as tmp:
        report = asyncio.run(run(Path(tmp), seed, args.duration, args.clients))
    print(summary(report))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
