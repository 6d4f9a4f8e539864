"""Pod client benchmark: the CPU one inter-pod call costs its sender, and an idle cluster's.

An idle cluster still talks: every heartbeat interval each pod sends a signed
``POST /internal/heartbeat`` to every other pod. (It no longer pulls request logs
whose heartbeat says nothing changed, syncs tenant shares without a tenant limit,
or reads the presets table on the leader with no preset applied.) Profiled,
almost all of an idle pod's CPU is the HTTP client of those calls, so the pod client
(cluster/transport/client.py) sends them straight to httpx's connection pool
(httpcore), without an ``httpx.AsyncClient``.

1. **Per call** (always): one real clustered `sardeenz serve` (testkit/cluster.py,
   one pod). This process signs ``GET /internal/ping`` as the pods do and sends it
   ``--calls`` times, over keep-alive, in interleaved batches, two ways:
   ``PodClient.call_at`` (what pods use) and, as the baseline measured in the
   same run, an ``httpx.AsyncClient`` request with the same signed headers (what
   the pod client used before). Printed: this process's CPU per call of each
   (``time.process_time``) and the ratio.
2. **Idle cluster** (``--idle SECONDS``): a 3-pod cluster with the test tier's
   timings (heartbeat every 0.3 s), left idle; each pod's CPU (psutil, user +
   system) over the window, as a share of one core and per heartbeat it sent.

Usage: .venv/bin/python benchmarks/pod_client.py [--calls 2000] [--idle 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.client import PodClient
from sardeenz.security.cluster_hmac import ANY_TARGET, Signer
from testkit.cluster import SECRET, TESTER, TIMING, Cluster

BATCH = 100


async def per_call(address: PeerAddress, calls: int) -> tuple[float, float]:
    """(CPU s per call via the pod client, CPU s per call via an httpx.AsyncClient)."""
    signer = Signer(SECRET.encode(), source=TESTER)
    # call_at never asks the directory (it is for calls by pod id); none is needed.
    client = PodClient(
        signer,
        directory=None,  # type: ignore[arg-type]
        timeout=5,
        order_timeout=5,
        backoff_base=1,
        backoff_cap=1,
    )
    await client.start()
    baseline = httpx.AsyncClient(timeout=httpx.Timeout(5), trust_env=False)
    path = routes.PING.path()

    async def via_pod_client() -> None:
        data = await client.call_at(address, routes.PING)
        assert data is not None, "the pod did not answer the ping"
        assert isinstance(data.get("podId"), str), data

    async def via_async_client() -> None:
        headers = signer.headers("GET", path, b"", target=ANY_TARGET)
        resp = await baseline.request("GET", address.url + path, headers=headers, timeout=5)
        assert resp.status_code == 200, resp.text
        assert isinstance(resp.json().get("podId"), str), resp.text

    cpu: dict[str, list[float]] = {"pod client": [], "httpx.AsyncClient": []}
    ways = {"pod client": via_pod_client, "httpx.AsyncClient": via_async_client}
    try:
        for way in ways.values():  # warm both pools and code paths
            for _ in range(20):
                await way()
        for _ in range(max(1, calls // BATCH)):
            for name, way in ways.items():
                t0 = time.process_time()
                for _ in range(BATCH):
                    await way()
                cpu[name].append((time.process_time() - t0) / BATCH)
    finally:
        await client.close()
        await baseline.aclose()
    return statistics.median(cpu["pod client"]), statistics.median(cpu["httpx.AsyncClient"])


def pod_cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def idle_cluster(seconds: float) -> None:
    beat = float(TIMING["SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS"])
    with tempfile.TemporaryDirectory(prefix="sardeenz-bench-idle-") as root:
        cluster = Cluster(Path(root), 3)
        try:
            cluster.start()
            cluster.wait_one_leader()
            procs = {}
            for name, pod in cluster.pods.items():
                assert pod.proc is not None
                procs[name] = psutil.Process(pod.proc.pid)
            time.sleep(3)  # past the first rounds (pings, first full heartbeats)
            before = {n: pod_cpu(p) for n, p in procs.items()}
            t0 = time.monotonic()
            time.sleep(seconds)
            wall = time.monotonic() - t0
            after = {n: pod_cpu(p) for n, p in procs.items()}
        finally:
            cluster.close()
    beats = wall / beat * (len(procs) - 1)  # heartbeats each pod sent in the window
    print(f"\nidle 3-pod cluster, {wall:.0f} s, heartbeat every {beat} s:")
    for name in procs:
        used = after[name] - before[name]
        print(
            f"  {name}: {used / wall:.4f} core; all its CPU / heartbeats it sent: "
            f"{used / beats * 1000:.2f} ms"
        )
    total = sum(after[n] - before[n] for n in procs)
    print(f"  all pods: {total / wall:.4f} core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per way")
    parser.add_argument("--idle", type=float, default=0, help="also idle a 3-pod cluster (s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sardeenz-bench-podclient-") as root:
        cluster = Cluster(Path(root), 1)
        try:
            cluster.start()
            pod = cluster.pods["pod-a"]
            address = PeerAddress(pod.host, pod.port)
            ours, theirs = asyncio.run(per_call(address, args.calls))
        finally:
            cluster.close()
    print(f"signed GET /internal/ping, {args.calls} calls each way, sender's CPU per call:")
    print(f"  pod client (httpcore pool):         {ours * 1e6:7.0f} us")
    print(f"  httpx.AsyncClient (baseline):       {theirs * 1e6:7.0f} us")
    print(f"  ratio pod client / baseline:        {ours / theirs:7.2f}")
    if args.idle > 0:
        idle_cluster(args.idle)


if __name__ == "__main__":
    main()
