"""Relayed instance streams: the latency a relay adds per event, remote vs local.

A 2-pod static cluster of real `sardeenz serve` processes on loopback
(testkit/cluster.py), one sim engine on each pod. The client follows both
instances' SSE streams (``/api/v1/models/instances/{id}/events``) on the leader,
pod-a, at the same time: pod-a's own instance is the local stream, pod-b's is
relayed from pod-b (cluster/instance_relay.py). Completions sent to both engines
in alternation make each engine write an access line, one ``log`` event each.

Per event: latency = the time the client reads it minus its ``timestamp`` (set
by the pod's supervisor when it read the line; both pods share this host's
clock). Printed: p50/p95 of each stream and the p50 the relay adds (target
issue 22: <= 5 ms on loopback), then how long the owning pod takes to close
its side after a client of a relayed stream leaves (target: within 1 s).

Usage: .venv/bin/python benchmarks/relay.py [--events 300]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.cluster import Cluster

GAUGE = re.compile(r"^sardeenz_cluster_relayed_streams (\S+)$", re.M)


class Reader(threading.Thread):
    """Follows one instance's SSE stream; latency (s) of each live log event it reads."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.latencies: list[float] = []
        self.open = threading.Event()
        self.stopping = threading.Event()
        self.left_at = 0.0
        """Monotonic time the reader closed its connection (after ``stopping``)."""
        self.client = httpx.Client(timeout=httpx.Timeout(30, read=120))

    def run(self) -> None:
        try:
            with self.client.stream("GET", self.url) as resp:
                name = ""
                for line in resp.iter_lines():
                    if self.stopping.is_set():
                        break
                    if line.startswith("event:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("data:"):
                        now = time.time()
                        data = orjson.loads(line.split(":", 1)[1])
                        if name == "status":
                            self.open.set()
                        elif name == "log" and "timestamp" in data:
                            at = datetime.fromisoformat(data["timestamp"]).timestamp()
                            self.latencies.append(now - at)
            self.left_at = time.monotonic()  # the response is closed: so is its connection
        except httpx.HTTPError:
            pass

    def stop(self) -> None:
        self.client.close()
        self.join(10)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def gauge(url: str) -> float:
    found = GAUGE.search(httpx.get(f"{url}/metrics", timeout=5).text)
    return float(found.group(1)) if found else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=300, help="completions per engine")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sz-relay-") as tmp:
        cluster = Cluster(Path(tmp), 2)
        try:
            cluster.start()
            leader, _ = cluster.wait_one_leader()
            assert leader == "pod-a", leader
            a = cluster.pods["pod-a"].url
            local = str(cluster.load_on("pod-a", "near")["id"])
            remote = str(cluster.load_on("pod-b", "far")["id"])
            deadline = time.monotonic() + 30
            while not any(i["id"] == remote for i in httpx.get(f"{a}/api/v1/models").json()):
                assert time.monotonic() < deadline, "the leader never listed pod-b's instance"
                time.sleep(0.1)
            readers = {
                "local": Reader(f"{a}/api/v1/models/instances/{local}/events"),
                "relayed": Reader(f"{a}/api/v1/models/instances/{remote}/events"),
            }
            for r in readers.values():
                r.start()
                assert r.open.wait(30), f"{r.url} did not open"
            engines = {"near": cluster.pods["pod-a"].url, "far": cluster.pods["pod-b"].url}
            with httpx.Client(timeout=30) as client:
                for _ in range(args.events):
                    for model, url in engines.items():
                        body = {"model": model, "prompt": "x", "max_tokens": 1}
                        client.post(f"{url}/v1/completions", json=body).raise_for_status()
                    time.sleep(0.005)
            time.sleep(2)  # the last lines reach both readers
            b = cluster.pods["pod-b"].url
            assert gauge(b) == 1, "pod-b should be sending exactly one relayed stream"
            # The reader leaves at its next line (pod-b's engine logs its health polls).
            readers["relayed"].stopping.set()
            t0 = time.monotonic()
            while gauge(b) != 0:
                assert time.monotonic() - t0 < 30, "pod-b kept the stream after the client left"
                time.sleep(0.005)
            zero = time.monotonic()
            readers["relayed"].stop()  # joins: left_at is set
            closed = zero - readers["relayed"].left_at
            readers["local"].stop()
        finally:
            cluster.close()
    print(f"\nrelayed instance streams, 2 pods on loopback, {args.events} completions per engine")
    for name, r in readers.items():
        n = len(r.latencies)
        print(
            f"  {name:8} {n:5d} log events  p50 {pct(r.latencies, 0.5):6.2f} ms"
            f"  p95 {pct(r.latencies, 0.95):6.2f} ms"
        )
    added = pct(readers["relayed"].latencies, 0.5) - pct(readers["local"].latencies, 0.5)
    verdict = "ok" if added <= 5 else "ABOVE TARGET"
    print(f"  added by the relay: p50 {added:+.2f} ms per event (target <= 5 ms: {verdict})")
    print(
        f"  client left -> pod-b closed its stream: {closed * 1000:.0f} ms (target <= 1000 ms,"
        " measured by polling /metrics every 5 ms)"
    )
    print(
        f"  (median of per-event latencies; stdev local "
        f"{statistics.pstdev(readers['local'].latencies) * 1000:.2f} ms)"
    )


if __name__ == "__main__":
    main()
