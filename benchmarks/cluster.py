"""Cluster benchmark: failover, route convergence, and what a cross-pod hop costs.

A 3-pod static cluster of real `sardeenz serve` processes on 127.0.0.1-3
(testkit/cluster.py), sim engines at zero latency.

1. **Hop cost**: a model loaded on pod B only. The same non-streaming chat
   completion, sequentially over keep-alive, straight to pod B ("local") and
   to pod A, which forwards it to B ("forwarded"), in interleaved batches.
   Printed: p50/p99 latency of each and the p50 added by the hop; CPU per
   request of the pod the client talks to (psutil, user+system, around its
   own batches), and of pod B during forwarded batches. Targets (issue 13):
   p50 added <= 0.5 ms on loopback, CPU per forwarded request <= 1.5x local.
2. **Failover** (``--runs`` times): a model loaded on the leader, the leader
   SIGKILLed; time until the survivors agree on a new leader, and until the
   dead pod's model has left every survivor's ``/v1/models`` (route
   convergence); then the pod is restarted and rejoins. p50 and max.

Timings are the test tier's short ones by default (E 1.5 s, D 2.5 s); with
``--seed-timing`` the defaults (heartbeat 2 s, suspect 10 s, unavailable
15 s: expect ~15-17 s failovers).

Usage: .venv/bin/python benchmarks/cluster.py [--runs 5] [--requests 400] [--seed-timing]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.cluster import TIMING, Cluster, agreed_leader
from testkit.servers import load_active

BODY = {"model": "hop", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def listed(url: str, name: str) -> bool:
    data = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
    return any(m["id"] == name for m in data)


def wait_listed(urls: list[str], name: str, want: bool, timeout: float = 30) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(listed(u, name) is want for u in urls):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError(f"{name} listed={not want} after {timeout}s")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def unload_all(cluster: Cluster, pod: str) -> None:
    """Unload every instance of ``pod`` through the leader (followers redirect)."""
    leader = cluster.leader_url()
    for inst in cluster.instances(pod):
        httpx.post(f"{leader}/api/v1/models/{inst['id']}/unload", timeout=60)
        cluster.wait_instance(pod, inst["id"], None, 60)


def hop_cost(cluster: Cluster, requests: int) -> None:
    a, b = cluster.pods["pod-a"], cluster.pods["pod-b"]
    assert a.proc is not None
    assert b.proc is not None
    cluster.load_on("pod-b", "hop", "--ttft-ms", "0", "--itl-ms", "0")
    wait_listed([a.url], "hop", True)
    lat: dict[str, list[float]] = {"local": [], "forwarded": []}
    entry_cpu = {"local": 0.0, "forwarded": 0.0}
    b_cpu_forwarded = 0.0
    batch = 50
    with (
        httpx.Client(base_url=b.url, timeout=10) as cb,
        httpx.Client(base_url=a.url, timeout=10) as ca,
    ):
        for c in (cb, ca):  # warm both paths (connections, pools, caches)
            for _ in range(50):
                c.post("/v1/chat/completions", json=BODY).raise_for_status()
        done = 0
        while done < requests:
            for kind, client, entry in (("local", cb, b), ("forwarded", ca, a)):
                assert entry.proc is not None
                c0, cb0 = cpu(entry.proc.pid), cpu(b.proc.pid)
                for _ in range(batch):
                    t0 = time.perf_counter()
                    client.post("/v1/chat/completions", json=BODY).raise_for_status()
                    lat[kind].append((time.perf_counter() - t0) * 1000)
                entry_cpu[kind] += cpu(entry.proc.pid) - c0
                if kind == "forwarded":
                    b_cpu_forwarded += cpu(b.proc.pid) - cb0
            done += batch
    n = len(lat["local"])
    print(f"\nhop cost: {n} requests per path, sequential, keep-alive, sim engine at 0 ms")
    print(f"{'':38}{'local (B)':>12}{'forwarded (A->B)':>18}")
    for label, q in (("p50 latency (ms)", 0.5), ("p99 latency (ms)", 0.99)):
        print(f"{label:38}{pct(lat['local'], q):12.3f}{pct(lat['forwarded'], q):18.3f}")
    added = pct(lat["forwarded"], 0.5) - pct(lat["local"], 0.5)
    local_us = entry_cpu["local"] / n * 1e6
    fwd_us = entry_cpu["forwarded"] / n * 1e6
    print(f"{'CPU per request, entry pod (us)':38}{local_us:12.1f}{fwd_us:18.1f}")
    print(f"{'CPU per request, pod B (us)':38}{local_us:12.1f}{b_cpu_forwarded / n * 1e6:18.1f}")
    print(f"p50 added by the hop: {added:.3f} ms (target <= 0.5 ms)")
    ratio = fwd_us / local_us if local_us else float("nan")
    print(f"entry-pod CPU forwarded/local: {ratio:.2f}x (target <= 1.5x)")
    unload_all(cluster, "pod-b")


def failover(cluster: Cluster, runs: int) -> None:
    elect: list[float] = []
    routes: list[float] = []
    for run in range(runs):
        old, term = cluster.wait_one_leader(60)
        dead = cluster.pods[old]
        name = f"on-leader-{run}"
        with dead.client() as client:
            load_active(client, name)
        survivors = [n for n in cluster.names if n != old]
        urls = [cluster.pods[n].url for n in survivors]
        wait_listed(urls, name, True)
        t0 = time.monotonic()
        dead.stop(signal.SIGKILL)

        def moved(s: dict[str, dict[str, Any]], old: str = old) -> bool:
            return agreed_leader(s) and next(iter(s.values()))["leader"] != old

        cluster.wait(moved, 120, "a new leader")
        elect.append(time.monotonic() - t0)
        wait_listed(urls, name, False, 120)
        routes.append(time.monotonic() - t0)
        new, new_term = cluster.wait_one_leader(5)
        print(
            f"run {run + 1}: {old} (term {term}) killed -> {new} (term {new_term}) after "
            f"{elect[-1]:.2f}s; its routes gone after {routes[-1]:.2f}s"
        )
        dead.start()
        cluster.wait(
            lambda s: (
                agreed_leader(s)
                and all(p["state"] == "healthy" for st in s.values() for p in st["pods"])
            ),
            120,
            "rejoin",
        )
        unload_all(cluster, old)  # the re-adopted engine: unload, keep runs alike
    print(
        f"\nfailover over {runs} runs: new leader p50 {statistics.median(elect):.2f}s "
        f"max {max(elect):.2f}s; route convergence p50 {statistics.median(routes):.2f}s "
        f"max {max(routes):.2f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed-timing", action="store_true", help="the default 2/10/15 s timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sardeenz-cluster-bench-") as tmp:
        cluster = Cluster(Path(tmp), 3)
        if args.seed_timing:
            for pod in cluster.pods.values():
                for k in TIMING:
                    pod.env.pop(k, None)
        try:
            cluster.start()
            leader, term = cluster.wait_one_leader(60)
            print(
                f"3 pods up; leader {leader} (term {term}); timing: "
                f"{'defaults' if args.seed_timing else TIMING}"
            )
            hop_cost(cluster, args.requests)
            failover(cluster, args.runs)
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
