"""Lifecycle benchmark: readiness detection, unload time, controller memory.

Runs a real `sardeenz serve` with simulated engines and prints:
- readiness detection latency: from the moment the engine itself is ready
  (its /health first answers 200, polled here every 1 ms) to the moment the
  controller announces `active` on its SSE stream. Target: median <= 100 ms.
  Baseline in the same run: the seed's design (poll /health every 2 s) would
  notice on average after half an interval; the ratio is printed against that.
- unload time (POST .../unload until the process tree is gone, sim engines).
- controller RSS with 50 sim instances loaded, against its RSS with none.

Usage: .venv/bin/python benchmarks/lifecycle.py [--instances 50] [--samples 15]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import ServerProcess, kill_engines, wait_for_status


def _watch_active(url: str, instance_id: str, out: dict[str, float]) -> threading.Thread:
    def run() -> None:
        with httpx.stream(
            "GET", f"{url}/api/v1/models/instances/{instance_id}/events", timeout=60
        ) as resp:
            event = ""
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif (
                    line.startswith("data:")
                    and event == "status"
                    and json.loads(line[5:])["status"] == "active"
                ):
                    out["active"] = time.perf_counter()
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _engine_ready_at(port: int, deadline: float) -> float:
    with httpx.Client(timeout=0.2) as c:
        while time.perf_counter() < deadline:
            try:
                if c.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return time.perf_counter()
            except httpx.HTTPError:
                pass
            time.sleep(0.001)
    raise RuntimeError("engine never became ready")


def measure_readiness(srv: ServerProcess, samples: int) -> tuple[list[float], list[float]]:
    detect, unload = [], []
    with srv.client() as api:
        for i in range(samples):
            resp = api.post(
                "/api/v1/models/load",
                json={
                    "modelPath": f"ready-{i}",
                    "engine": "sim",
                    "extraArgs": ["--load-seconds", "1.0"],
                },
            )
            inst = resp.json()
            seen: dict[str, float] = {}
            watcher = _watch_active(srv.url, inst["id"], seen)
            ready = _engine_ready_at(inst["port"], time.perf_counter() + 30)
            watcher.join(30)
            detect.append((seen["active"] - ready) * 1000)
            t0 = time.perf_counter()
            api.post(f"/api/v1/models/{inst['id']}/unload").raise_for_status()
            unload.append((time.perf_counter() - t0) * 1000)
    return detect, unload


def measure_rss(srv: ServerProcess, n: int) -> tuple[float, float]:
    assert srv.proc is not None
    proc = psutil.Process(srv.proc.pid)
    base = proc.memory_info().rss / 2**20
    with srv.client() as api:
        ids = []
        for i in range(n):
            resp = api.post(
                "/api/v1/models/load",
                json={
                    "modelPath": f"rss-{i}",
                    "engine": "sim",
                    "extraArgs": ["--load-seconds", "0.1"],
                },
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
        for i in ids:
            wait_for_status(api, i, "active", timeout=180)
        time.sleep(3)  # a few health rounds with everything loaded
    return base, proc.memory_info().rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--samples", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(
            Path(tmp) / "node",
            port_range=args.instances + 10,
            extra_env={"SARDEENZ_HEALTH_INTERVAL_SECONDS": "2"},  # the seed's default
        )
        srv.start()
        try:
            detect, unload = measure_readiness(srv, args.samples)
            base, loaded = measure_rss(srv, args.instances)
        finally:
            srv.stop(signal.SIGTERM, timeout=120)
            kill_engines(srv.data_dir)
    med = statistics.median(detect)
    seed_expected = 1000.0  # 2 s health poll: on average half an interval late
    print(f"readiness detection (engine /health 200 -> controller 'active'), n={len(detect)}")
    print(
        f"  median {med:.1f} ms   p90 {sorted(detect)[int(0.9 * (len(detect) - 1))]:.1f} ms"
        f"   max {max(detect):.1f} ms   target <= 100 ms: {'PASS' if med <= 100 else 'FAIL'}"
    )
    print(
        f"  ratio vs the seed's 2 s /health poll (expected {seed_expected:.0f} ms): "
        f"{med / seed_expected:.3f}"
    )
    print(
        f"unload (sim engine, API call until tree gone): median {statistics.median(unload):.0f} ms"
        f"   max {max(unload):.0f} ms"
    )
    print(
        f"controller RSS: {base:.1f} MiB idle -> {loaded:.1f} MiB with {args.instances} "
        f"active sim instances ({(loaded - base) / args.instances * 1024:.0f} KiB per instance;"
        f" ratio {loaded / base:.2f}x idle)"
    )


if __name__ == "__main__":
    main()
