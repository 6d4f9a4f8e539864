"""Chaos soak: a 5-pod static cluster and a 3-pod Kubernetes-mode cluster on a real
kube-apiserver (each pod of both in its own network namespace), side by side, each under steady
traffic and a seeded fault schedule, their invariants checked all along
(testkit/soak.py, testkit/soak_kube.py).

Prints the seed first (``--seed`` replays the same sequence of faults, operations and
traffic), every fault, heal and admin operation as it happens (the Kubernetes cluster's
lines start with ``[kube]``), each invariant violation with its timeline, and at the
end each cluster's figures: requests sent, completed, failed (and why), faults by kind,
the longest unavailability of each model, the longest time routing took to converge,
and each pod's controller RSS curve. Exit status 1 if any invariant was violated.

Both need root (network namespaces; the static one also a tmpfs for the disk that fills)
and the static one Debian's libfaketime for the clock jumps (``make soak-deps``); the
Kubernetes one the kube tier's binaries (``SARDEENZ_KUBE_APISERVER``, ``SARDEENZ_ETCD``:
``make kube-env``).
``--only static`` or ``--only kube`` runs one of them.

Usage: sudo -E .venv/bin/python benchmarks/soak.py [--duration 600] [--seed N]
           [--clients 6] [--only static|kube] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit import netns
from testkit.kube import KubeBinariesMissing, find_binaries, started_apiserver
from testkit.soak import Report
from testkit.soak_faults import clock_unavailable
from testkit.soak_kube import run_kube
from testkit.soak_run import run, summary


async def both(
    root: Path, seed: int, duration: float, clients: int, only: str | None
) -> dict[str, Report]:
    """Each cluster asked for, side by side; its report by name."""
    jobs = {}
    with contextlib.ExitStack() as stack:
        if only in (None, "static"):
            jobs["static (5 pods, network namespaces)"] = run(
                root / "static", seed, duration, clients
            )
        if only in (None, "kube"):
            kube = stack.enter_context(started_apiserver(root / "kube"))
            jobs["kubernetes (3 pods, kube-apiserver)"] = run_kube(
                kube, root / "kubepods", seed, duration, max(2, clients * 2 // 3)
            )
        reports = await asyncio.gather(*jobs.values())
    return dict(zip(jobs, reports, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument(
        "--clients", type=int, default=6, help="traffic clients (the kube cluster gets 2/3)"
    )
    parser.add_argument("--only", choices=("static", "kube"), default=None)
    parser.add_argument(
        "--keep", type=Path, default=None, help="run in this folder and keep it (pod logs)"
    )
    args = parser.parse_args()
    if not netns.available():
        print("soak: the pods need root and iproute2 (ip netns)", file=sys.stderr)
        return 2
    if args.only != "static":
        try:
            find_binaries()
        except (KubeBinariesMissing, FileNotFoundError) as exc:
            print(f"soak: the Kubernetes cluster: {exc}", file=sys.stderr)
            return 2
    if args.only != "kube" and (why := clock_unavailable()) is not None:
        print(f"soak: {why}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed: {seed}  (replay: --seed {seed})", flush=True)
    with contextlib.ExitStack() as stack:
        if args.keep is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sardeenz-soak-")))
        else:
            root = args.keep
            root.mkdir(parents=True, exist_ok=False)
        reports = asyncio.run(both(root, seed, args.duration, args.clients, args.only))
    for name, report in reports.items():
        print(f"\n=== {name}\n{summary(report)}")
    return 1 if any(r.violations for r in reports.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
