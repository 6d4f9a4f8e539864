"""Move benchmark: what a blue-green move costs the streams it happens under.

A 3-pod static cluster of real `sardeenz serve` processes on 127.0.0.1-3
(testkit/cluster.py), two simulated GPUs each. A sim model on pod A;
``--clients`` streaming clients (testkit/streams.py) through pod C, the
pod that is neither source nor target. After ``--baseline`` seconds the model
is moved from pod A to pod B (``POST /api/cluster/moves``).

Printed: the move's total time and its steps; then, for the move's window
(from the POST to the move's end) and for a window of the same length just
before it (no move), the inter-token gaps of every stream (p50, p99, longest),
the longest wait for a first token, and the fewest tokens served in any
100 ms. Target (issue 14): no gap during the move longer than 2x the normal
inter-token latency (the p50 gap without a move). Failed streams are counted;
there must be none.

Usage: .venv/bin/python benchmarks/move.py [--clients 200] [--itl-ms 40] [--tokens 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.cluster import Cluster
from testkit.streams import Load, run_clients


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fewest_per_bucket(load: Load, start: float, end: float, bucket: float = 0.1) -> int:
    n = max(1, int((end - start) / bucket))
    counts = [0] * n
    for s in load.ok:
        for t in s.chunks:
            i = int((t - start) / bucket)
            if 0 <= i < n:
                counts[i] += 1
    return min(counts)


def window(load: Load, start: float, end: float) -> dict[str, float]:
    gaps = load.gaps(start, end)
    firsts = load.first_token_waits(start, end)
    return {
        "p50": pct(gaps, 0.5) * 1000,
        "p99": pct(gaps, 0.99) * 1000,
        "max": max(gaps, default=float("nan")) * 1000,
        "ttft": max(firsts, default=float("nan")) * 1000,
        "fewest": fewest_per_bucket(load, start, end),
        "gaps": len(gaps),
    }


def prepare(args: argparse.Namespace, cluster: Cluster) -> dict[str, Any]:
    """The model on pod A, listed on pod C (the entry): the source instance."""
    src = cluster.load_on("pod-a", "bench-move", "--itl-ms", str(args.itl_ms), "--ttft-ms", "20")
    entry = cluster.pods["pod-c"].url
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        names = [m["id"] for m in httpx.get(f"{entry}/v1/models", timeout=5).json()["data"]]
        if "bench-move" in names:
            break
        time.sleep(0.05)
    return src


async def run(args: argparse.Namespace, cluster: Cluster, src: dict[str, Any]) -> None:
    leader = cluster.pods["pod-a"].url
    entry = cluster.pods["pod-c"].url
    load = Load()
    stop = asyncio.Event()
    # Made before the clients start: building a client (its TLS context) blocks this
    # event loop for tens of ms, which the streams would show as a gap.
    async with httpx.AsyncClient(timeout=10) as http:
        (await http.get(f"{leader}/api/cluster/moves")).raise_for_status()  # warm: lazy imports
        clients = asyncio.create_task(
            run_clients(entry, "bench-move", args.clients, stop, args.tokens, load)
        )
        await asyncio.sleep(args.baseline)
        t0 = time.monotonic()
        resp = await http.post(
            f"{leader}/api/cluster/moves", json={"instanceId": src["id"], "targetPodId": "pod-b"}
        )
        resp.raise_for_status()
        move_id = resp.json()["id"]
        move: dict[str, Any] = {}
        while time.monotonic() - t0 < 120:
            move = (await http.get(f"{leader}/api/cluster/moves/{move_id}")).json()
            if move["state"] in ("done", "failed"):
                break
            await asyncio.sleep(0.05)
        t1 = time.monotonic()
    await asyncio.sleep(1.0)
    stop.set()
    await clients

    span = t1 - t0
    base_end = t0 - 0.2
    base = window(load, max(base_end - span, 1.5), base_end)
    during = window(load, t0, t1)
    print(f"clients {args.clients} through pod-c, sim ITL {args.itl_ms} ms, {args.tokens} tokens")
    print(f"move {move.get('state')}: total {span:.2f} s (server: {move.get('durationSeconds')} s)")
    for step in move.get("steps", []):
        detail = f": {step['detail']}" if step.get("detail") else ""
        print(f"  {step['at'][11:23]} {step['name']}{detail}")
    if move.get("reason"):
        print(f"  reason: {move['reason']}")
    print(f"streams: {len(load.streams)}, failed: {len(load.failed)}")
    for s in load.failed[:5]:
        print(f"  {s.error}")
    heads = ("gaps", "p50 ms", "p99 ms", "max ms", "ttft max", "min/100ms")
    print(f"{'window':<12}" + "".join(f"{h:>10}" for h in heads))
    for name, w in (("no move", base), ("move", during)):
        print(
            f"{name:<12}{w['gaps']:>10}{w['p50']:>10.1f}{w['p99']:>10.1f}{w['max']:>10.1f}"
            f"{w['ttft']:>10.1f}{w['fewest']:>10}"
        )
    slots: dict[int, float] = {}
    for st in load.ok:
        for a, b in zip(st.chunks, st.chunks[1:], strict=False):
            if t0 <= b <= t1:
                k = int((b - t0) / 0.25)
                slots[k] = max(slots.get(k, 0.0), b - a)
    print(
        "longest gap per 250 ms of the move: "
        + " ".join(f"{k * 0.25:.2f}:{v * 1000:.0f}" for k, v in sorted(slots.items()))
    )
    normal = base["p50"]
    ratio = during["max"] / normal if normal else float("nan")
    verdict = "met" if ratio <= 2 else "NOT met"
    print(
        f"longest gap during the move: {during['max']:.1f} ms = {ratio:.2f}x the normal ITL "
        f"({normal:.1f} ms); without a move: {base['max'] / normal:.2f}x; target <= 2x: {verdict}"
    )
    print(f"(statistics over {statistics.fmean([base['gaps'], during['gaps']]):.0f} gaps a window)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--baseline", type=float, default=6.0, help="seconds before the move")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sardeenz-move-") as tmp:
        cluster = Cluster(Path(tmp), 3, SARDEENZ_SIM_GPUS="NVIDIA L4:24GiB,NVIDIA L4:24GiB")
        try:
            cluster.start()
            cluster.wait_one_leader()
            asyncio.run(run(args, cluster, prepare(args, cluster)))
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
