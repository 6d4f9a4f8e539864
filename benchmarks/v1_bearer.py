"""What a JWT caller costs on ``/v1`` next to an API key, and what the API-key path costs
before and after bearer tokens were added: server CPU per request, one run.

Run: ``.venv/bin/python benchmarks/v1_bearer.py [--baseline-src DIR]`` (a minute or two).

One real ``sardeenz serve`` of this tree (fast lane, express path) with an inference API
key, ``SARDEENZ_V1_BEARER_AUTH`` on and an HS256 secret, one simulated model at zero
latency, driven at ``--concurrency`` (64) requests in flight (benchmarks/tenancy.py's
driver; CPU of every thread of the server's pid, from ``/proc``). Conditions, interleaved
and rotated in ``--rounds`` rounds so the machine's noise falls on all alike:

* ``key``: the API key (the express path, as before bearer tokens existed);
* ``jwt``: one JWT for every request (verified once, then found in memory);
* ``key, baseline``: with ``--baseline-src`` (the ``src`` of another checkout, e.g.
  ``git archive main src | tar -x -C /tmp/base``), a second server of that code with the
  same key and environment: the API-key path before this change, in the same run. With
  this tree's own ``src`` it is an A/A run: what two servers differ by with no change.

Printed: the median over rounds of each condition's CPU per request and the differences.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jwt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import ServerProcess, kill_engines, load_active


def _tenancy_bench() -> Any:
    """benchmarks/tenancy.py, whose driver and CPU reading this benchmark shares (the
    benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "tenancy_bench", Path(__file__).parent / "tenancy.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_TENANCY = _tenancy_bench()
MODEL: str = _TENANCY.MODEL
cpu_us_per_request = _TENANCY.cpu_us_per_request

KEY = "sk-bench-bearer-0123456789"
SECRET = "bench-hs256-secret-0123456789abcdef"


def identify_alone(n: int) -> dict[str, float]:
    """In-process, best of 3, us per call: ``ApiKeys.identify`` of a key without bearer
    tokens (as before), of a key with them on, and of a remembered JWT."""
    from sardeenz.config import load_settings
    from sardeenz.security.auth import ApiKey, ApiKeys, Authenticator
    from sardeenz.security.callers import BearerCallers
    from sardeenz.tenancy.admission import Admission

    digest = hashlib.sha256(KEY.encode()).digest()
    plain = ApiKeys([(digest, ApiKey(id="team"))])
    with_tokens = ApiKeys([(digest, ApiKey(id="team"))])
    settings = load_settings(jwt_secret=SECRET, v1_bearer_auth=True)
    callers = BearerCallers(Authenticator(settings), settings)
    callers.member_of = Admission().member_of_principal
    with_tokens.tokens = callers
    token = jwt.encode({"sub": "caller", "exp": time.time() + 3600}, SECRET).encode()
    key_header, jwt_header = b"Bearer " + KEY.encode(), b"Bearer " + token
    asyncio.run(callers.authenticate(jwt_header))  # remembered from now on
    cases = {
        "key, no bearer tokens": (plain, key_header),
        "key, bearer tokens on": (with_tokens, key_header),
        "remembered JWT": (with_tokens, jwt_header),
    }
    out = {}
    for name, (keys, value) in cases.items():
        assert keys.identify(value) is not None, name
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for _ in range(n):
                keys.identify(value)
            best = min(best, (time.process_time() - t0) / n * 1e6)
        out[name] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    admin = jwt.encode({"sub": "bench", "roles": ["admin"], "exp": time.time() + 3600}, SECRET)
    caller = jwt.encode({"sub": "caller", "exp": time.time() + 3600}, SECRET)

    with tempfile.TemporaryDirectory(prefix="sardeenz-bench-bearer-") as tmp:
        data = Path(tmp)
        keys = data / "keys.txt"
        keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} team\n")
        common = {
            "SARDEENZ_API_KEYS_FILE": str(keys),
            "SARDEENZ_LOG_LEVEL": "warning",
            "SARDEENZ_JWT_SECRET": SECRET,
            # The same environment for both servers: code before bearer tokens ignores it.
            "SARDEENZ_V1_BEARER_AUTH": "true",
        }
        servers = {"branch": ServerProcess(data / "branch", extra_env=common)}
        if args.baseline_src is not None:
            servers["baseline"] = ServerProcess(
                data / "baseline",
                extra_env={**common, "PYTHONPATH": str(args.baseline_src.resolve())},
            )
        try:
            for server in servers.values():
                server.start(timeout=90)
                with httpx.Client(
                    base_url=server.url,
                    headers={"Authorization": f"Bearer {admin}"},
                    timeout=60,
                ) as api:
                    load_active(api, MODEL, "--ttft-ms", "0", "--itl-ms", "0")
            runs = {"key": ("branch", KEY), "jwt": ("branch", caller)}
            if "baseline" in servers:
                runs["key, baseline"] = ("baseline", KEY)
            pids = {}
            for name, server in servers.items():
                assert server.proc is not None
                pids[name] = server.proc.pid
            for where, bearer in runs.values():  # warm up
                cpu_us_per_request(pids[where], servers[where].url, bearer, 500, args.concurrency)
            results: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            for r in range(args.rounds):
                t0 = time.monotonic()
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    where, bearer = runs[name]
                    results[name].append(
                        cpu_us_per_request(
                            pids[where], servers[where].url, bearer, args.requests, args.concurrency
                        )
                    )
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v[-1]:.1f} us" for k, v in results.items())
                    + f" ({time.monotonic() - t0:.1f} s)"
                )
        finally:
            for server in servers.values():
                server.stop()
                kill_engines(server.data_dir)

    key = statistics.median(results["key"])
    print(
        f"\nserver CPU per request, c={args.concurrency}, median of {args.rounds} rounds "
        f"of {args.requests} requests:"
    )
    print(f"  API key:                 {key:7.1f} us")
    print(f"  JWT (remembered):        {statistics.median(results['jwt']):7.1f} us  "
          f"({statistics.median(results['jwt']) - key:+.1f} us)")  # fmt: skip
    if "key, baseline" in results:
        base = statistics.median(results["key, baseline"])
        diffs = [a - b for a, b in zip(results["key"], results["key, baseline"], strict=True)]
        print(f"  API key, baseline code:  {base:7.1f} us  (this tree {key - base:+.1f} us)")
        print(
            f"  per-round difference this tree - baseline: median "
            f"{statistics.median(diffs):+.1f} us, range {min(diffs):+.1f} .. {max(diffs):+.1f} us"
        )

    print("\nidentify() alone, in-process (no noise from the rest of the request):")
    for name, us in identify_alone(200_000).items():
        print(f"  {name:24s} {us:.2f} us")


if __name__ == "__main__":
    main()
