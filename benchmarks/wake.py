"""Auto-wake benchmark: what Sardeenz adds to the first request for a sleeping model.

For each round, with a simulated engine started in sleep mode:
1. an ordinary request while the model is awake (T_awake, through the proxy);
2. put it to sleep through the API;
3. the first request for it (T_first, through the proxy: auto-wake, hold, serve);
4. the engine's own wake time, from its log line "It took X seconds to wake up".

added = T_first - T_engine_wake - T_awake, i.e. what the controller's wake path
(detect, call /wake_up, confirm /is_sleeping, re-route, release the held
request) costs on top of the engine. Target: median <= 50 ms. Baseline in the
same run: T_awake, the cost of the same request without any wake.

Usage: .venv/bin/python benchmarks/wake.py [--rounds 15] [--wake-ms 200]
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import ServerProcess, kill_engines, wait_for_status

WAKE_LINE = re.compile(r"It took ([0-9.]+) seconds to wake up")


def timed_completion(client: httpx.Client, model: str) -> float:
    t0 = time.perf_counter()
    resp = client.post("/v1/completions", json={"model": model, "prompt": "x", "max_tokens": 1})
    resp.raise_for_status()
    return (time.perf_counter() - t0) * 1000


def engine_wake_ms(api: httpx.Client, instance_id: str, seen: int) -> tuple[float, int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = api.get(f"/api/v1/models/{instance_id}/logs?lines=5000").json()["lines"]
        found = [float(m.group(1)) * 1000 for ln in lines if (m := WAKE_LINE.search(ln))]
        if len(found) > seen:
            return found[-1], len(found)
        time.sleep(0.05)
    raise RuntimeError("engine never logged its wake-up")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--wake-ms", type=float, default=200)
    args = ap.parse_args()
    added, awake, first, engine = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "node", args=["--sim-gpus", "NVIDIA L4:24GiB"]).start()
        try:
            with srv.client() as api, httpx.Client(base_url=srv.url, timeout=30) as client:
                inst = api.post(
                    "/api/v1/models/load",
                    json={
                        "modelPath": "wake-bench",
                        "engine": "sim",
                        "enableSleepMode": True,
                        "extraArgs": [
                            "--ttft-ms",
                            "0",
                            "--itl-ms",
                            "0",
                            "--load-seconds",
                            "0.2",
                            "--wake-ms",
                            str(args.wake_ms),
                        ],
                    },
                ).json()
                wait_for_status(api, inst["id"], "active")
                for _ in range(3):
                    timed_completion(client, "wake-bench")  # warm connections
                seen = 0
                for _ in range(args.rounds):
                    t_awake = timed_completion(client, "wake-bench")
                    api.post(f"/api/v1/models/{inst['id']}/sleep").raise_for_status()
                    t_first = timed_completion(client, "wake-bench")
                    t_engine, seen = engine_wake_ms(api, inst["id"], seen)
                    awake.append(t_awake)
                    first.append(t_first)
                    engine.append(t_engine)
                    added.append(t_first - t_engine - t_awake)
        finally:
            srv.stop(signal.SIGTERM)
            kill_engines(srv.data_dir)
    med = statistics.median(added)
    print(f"auto-wake, {args.rounds} rounds, engine wake ~{args.wake_ms:.0f} ms (simulated)")
    print(f"  request while awake (baseline)   median {statistics.median(awake):7.2f} ms")
    print(f"  first request while asleep       median {statistics.median(first):7.2f} ms")
    print(f"  engine's own wake (its log)      median {statistics.median(engine):7.2f} ms")
    print(
        f"  added by Sardeenz                median {med:7.2f} ms   max {max(added):7.2f} ms"
        f"   target <= 50 ms: {'PASS' if med <= 50 else 'FAIL'} (ratio {med / 50:.2f})"
    )


if __name__ == "__main__":
    main()
