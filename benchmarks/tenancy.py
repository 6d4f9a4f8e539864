"""What tenant limits cost the proxy per request, and what fair sharing does for a quiet tenant.

Run: ``.venv/bin/python benchmarks/tenancy.py`` (about a minute): the cost, below.
``.venv/bin/python benchmarks/tenancy.py --fairness`` (about a minute and a half): the
fairness claim, see ``fairness`` further down.
``.venv/bin/python benchmarks/tenancy.py --admission-only --baseline-src DIR`` (half a
minute): the admission alone, this tree's against the ``src`` of another checkout (e.g.
``git archive main src | tar -x -C /tmp/base``, then ``/tmp/base/src``), see
``admission_against``.

One real ``sardeenz serve`` (fast lane, express path) with inference API keys
and one simulated model at zero latency, driven at ``--concurrency`` (64)
requests in flight by an aiohttp client in this process. The server's CPU time
(every thread of its pid, from ``/proc``: the engine is another process) is read around
each batch, and divided by the batch's requests. Three conditions, interleaved
in ``--rounds`` rounds so that the machine's noise falls on all of them alike:

* ``no tenants``: no tenant is defined (the key is checked, nothing else);
* ``key of no tenant``: a tenant exists, the key is not in it (one dict lookup);
* ``tenant``: the key's tenant has every limit (requests and tokens per minute,
  concurrency, tokens per day and per month), high enough never to refuse, plus
  a model scope with its own limits: the whole admission and settlement.

The tenant is created and deleted through the admin API between batches, on
the same server, with the same key and model. Printed: the median over rounds
of each condition's CPU per request, and the differences (target: a few us
with a tenant; nothing measurable without one). On a shared machine the
end-to-end numbers move by more than the admission costs, so the admission is
also timed alone, in-process, at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sardeenz.asgi import header
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.proxy.fairgate import PRIORITY_HEADER, FairGate
from sardeenz.proxy.routing import RoutingTable
from sardeenz.tenancy.admission import Admission, Ticket
from sardeenz.tenancy.spec import Tenant, TenantBody
from testkit.servers import ServerProcess, kill_engines, load_active

MODEL = "bench-tenancy"
KEYS = {"team": "sk-bench-team-0123456789", "other": "sk-bench-other-0123456789"}
BIG = 10**7


def tenant_body(model: str) -> dict[str, Any]:
    """The measured tenant: every limit, high enough never to refuse, and a scope on
    ``model`` with its own limits (benchmarks/tenant_usage.py times the same one)."""
    return {
        "api_keys": ["team"],
        "limits": {
            "requests_per_minute": BIG,
            "tokens_per_minute": 10**12,
            "concurrent_requests": BIG,
            "tokens_per_day": 10**12,
            "tokens_per_month": 10**12,
        },
        "models": {model: {"requests_per_minute": BIG, "tokens_per_minute": 10**12}},
    }


TENANT = tenant_body(MODEL)
BODY = orjson.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
)


async def batch(url: str, key: str, requests: int, concurrency: int) -> None:
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        left = requests

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(f"{url}/v1/chat/completions", data=BODY) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{resp.status}: {await resp.text()}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid``, in ns resolution (``/proc/PID/task/*/schedstat``;
    ``cpu_times`` counts 10 ms ticks: 5 us per request over a batch of 2000)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def cpu_us_per_request(pid: int, url: str, key: str, requests: int, concurrency: int) -> float:
    before = cpu_seconds(pid)
    asyncio.run(batch(url, key, requests, concurrency))
    return (cpu_seconds(pid) - before) / requests * 1e6


def admission_alone(n: int) -> tuple[float, float]:
    """In-process: one admission + settlement of a tenant with every limit and a model
    scope, and one admission of a key of no tenant (us each, best of 3)."""
    admission = Admission()
    admission.configure(
        [Tenant(name="bench", source="api", **TenantBody.model_validate(TENANT).__dict__)]
    )
    payload = orjson.loads(BODY)
    tail = b'"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}'
    timings = []
    for key in ("team", "other"):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for _ in range(n):
                ticket = admission.admit(key, MODEL, payload, len(BODY))
                if isinstance(ticket, Ticket):
                    ticket.settle(200, tail, b"")
            best = min(best, (time.process_time() - t0) / n * 1e6)
        timings.append(best)
    return timings[0], timings[1]


SRC = Path(__file__).resolve().parents[1] / "src"


def admission_worker(src: Path, n: int) -> tuple[float, float]:
    """``admission_alone`` in a fresh interpreter importing sardeenz from ``src``."""
    out = subprocess.run(
        [sys.executable, __file__, "--admission-worker", str(n)],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    tenant, other = json.loads(out.stdout.splitlines()[-1])
    return tenant, other


def admission_against(baseline: Path, rounds: int, n: int) -> None:
    """The admission alone, this tree's and ``baseline``'s, interleaved: each round runs
    both (in fresh interpreters, the order alternating) so the machine's noise falls on
    both alike; printed: the medians and the ratio of each round."""
    mine: list[float] = []
    base: list[float] = []
    for r in range(rounds):
        order = [(SRC, mine), (baseline, base)]
        for src, into in order if r % 2 == 0 else order[::-1]:
            into.append(admission_worker(src, n)[0])
        print(f"round {r + 1}: this tree {mine[-1]:.2f} us, baseline {base[-1]:.2f} us")
    ratios = [m / b for m, b in zip(mine, base, strict=True)]
    print(
        f"\nadmit + settle, a tenant with every limit and a model scope, in-process, "
        f"median of {rounds} rounds (each the best of 3 x {n}):"
    )
    print(f"  baseline ({baseline}): {statistics.median(base):.2f} us")
    print(f"  this tree:             {statistics.median(mine):.2f} us")
    print(
        f"  ratio this tree / baseline: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f} .. {max(ratios):.2f}"
    )
    print("  target: <= 2 us")


def gate_alone(n: int) -> float:
    """In-process: what the express path adds with a slot limit and room (``FairGate.room``,
    the look for ``X-Sardeenz-Priority``, ``take``, ``release``), us, best of 3."""
    table = RoutingTable()
    table.apply(
        ModelInstance(
            id="bench",
            model_path="/m",
            served_model_name=MODEL,
            display_name=MODEL,
            engine=EngineKind.SIM,
            status=InstanceStatus.ACTIVE,
            port=9999,
        )
    )
    gate = FairGate(table, 64)
    headers = [
        (b"host", b"127.0.0.1:3000"),
        (b"authorization", b"Bearer sk-x"),
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(BODY)),
    ]
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            room = gate.room(MODEL)
            assert room is not None
            header(headers, PRIORITY_HEADER)
            gate.take(room)
            gate.release(room)
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--fairness", action="store_true", help="measure the quiet tenant's TTFT instead"
    )
    parser.add_argument("--quiet-rps", type=float, default=8.0, help="--fairness: quiet rate")
    parser.add_argument("--quiet-requests", type=int, default=120, help="--fairness: per phase")
    parser.add_argument(
        "--admission-only", action="store_true", help="only the admission alone, in-process"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="the admission alone of this src too (another checkout's), interleaved",
    )
    parser.add_argument("--admission-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.admission_worker:
        print(json.dumps(admission_alone(args.admission_worker)))
        return
    if args.fairness:
        fairness(args.quiet_rps, args.quiet_requests)
        return
    if args.admission_only:
        if args.baseline_src is not None:
            admission_against(args.baseline_src.resolve(), args.rounds, 100_000)
        else:
            with_tenant, no_tenant = admission_alone(100_000)
            print(f"admit + settle, a tenant with every limit: {with_tenant:.2f} us")
            print(f"admit, a key of no tenant:                 {no_tenant:.2f} us")
        return

    with tempfile.TemporaryDirectory(prefix="sardeenz-bench-tenancy-") as tmp:
        data = Path(tmp)
        keys = data / "keys.txt"
        keys.write_text(
            "".join(f"{hashlib.sha256(v.encode()).hexdigest()} {k}\n" for k, v in KEYS.items())
        )
        server = ServerProcess(
            data / "node",
            extra_env={"SARDEENZ_API_KEYS_FILE": str(keys), "SARDEENZ_LOG_LEVEL": "warning"},
        )
        try:
            server.start()
            api = httpx.Client(base_url=server.url, timeout=60)
            load_active(api, MODEL, "--ttft-ms", "0", "--itl-ms", "0")
            assert server.proc is not None
            pid = server.proc.pid
            # warm up (connections, caches, the first tenant's objects)
            api.put("/api/v1/tenants/bench", json=TENANT).raise_for_status()
            cpu_us_per_request(pid, server.url, KEYS["team"], 1000, args.concurrency)
            api.delete("/api/v1/tenants/bench").raise_for_status()
            cpu_us_per_request(pid, server.url, KEYS["team"], 1000, args.concurrency)

            results: dict[str, list[float]] = {"none": [], "other": [], "tenant": []}
            conditions = list(results)
            for r in range(args.rounds):
                t0 = time.monotonic()
                # rotated each round: no condition always runs first or after the others
                for condition in conditions[r % 3 :] + conditions[: r % 3]:
                    if condition == "none":
                        api.delete("/api/v1/tenants/bench")
                    else:
                        api.put("/api/v1/tenants/bench", json=TENANT).raise_for_status()
                    key = KEYS["other" if condition == "other" else "team"]
                    results[condition].append(
                        cpu_us_per_request(pid, server.url, key, args.requests, args.concurrency)
                    )
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v[-1]:.1f} us" for k, v in results.items())
                    + f" ({time.monotonic() - t0:.1f} s)"
                )
            api.put("/api/v1/tenants/bench", json=TENANT).raise_for_status()
            state = api.get("/api/v1/tenants/bench").json()
            assert state["usage"]["*"]["concurrent_requests"] == 0, state  # all settled
        finally:
            server.stop()
            kill_engines(server.data_dir)

    none = statistics.median(results["none"])
    other = statistics.median(results["other"])
    tenant = statistics.median(results["tenant"])
    diffs = [t - n for t, n in zip(results["tenant"], results["none"], strict=True)]
    print(
        f"\nserver CPU per request, c={args.concurrency}, median of {args.rounds} rounds "
        f"of {args.requests} requests:"
    )
    print(f"  no tenants:          {none:7.1f} us")
    print(f"  key of no tenant:    {other:7.1f} us  ({other - none:+.1f} us)")
    print(f"  tenant, all limits:  {tenant:7.1f} us  ({tenant - none:+.1f} us)")
    print(
        f"  per-round difference tenant - none: median {statistics.median(diffs):+.1f} us, "
        f"range {min(diffs):+.1f} .. {max(diffs):+.1f} us"
    )
    with_tenant, no_tenant = admission_alone(100_000)
    print("\nadmission alone, in-process (no noise from the rest of the request):")
    print(f"  tenant, all limits, admit + settle: {with_tenant:.2f} us")
    print(f"  key of no tenant, admit:            {no_tenant:.2f} us")
    print("  no tenants at all: the proxy does not call it (one attribute test)")
    slot = gate_alone(100_000)
    print(f"  slot limit on, a request that finds room (express path): {slot:.2f} us")
    print("  no slot limit: the proxy does not call it (one attribute test)")
    if args.baseline_src is not None:
        print()
        admission_against(args.baseline_src.resolve(), args.rounds, 100_000)


# ---------------------------------------------------------------------------- fairness
FAIR_SLOTS = 16
"""Slots per instance: the engine runs 16 requests at once, more wait in the proxy."""
FAIR_TTFT_MS = 200
FAIR_ITL_MS = 5
FAIR_TOKENS = 4
NOISY_FACTOR = 10
FAIR_TENANTS = {"quiet": {"api_keys": ["quiet"]}, "noisy": {"api_keys": ["noisy"]}}
FAIR_KEYS = {"quiet": "sk-bench-quiet-0123456789", "noisy": "sk-bench-noisy-0123456789"}


def fair_body(stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": FAIR_TOKENS,
            "stream": stream,
        }
    )


async def quiet_and_noisy(url: str, rps: float, count: int, noisy: int) -> list[float]:
    """The quiet tenant's TTFTs (s): ``count`` streamed requests at ``rps``, on a fixed
    schedule (open loop: a slow answer does not slow the next request), while ``noisy``
    requests of the noisy tenant are kept in flight (closed loop; 0: the quiet one alone)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    quiet_h = {"Authorization": f"Bearer {FAIR_KEYS['quiet']}", "content-type": "application/json"}
    noisy_h = {"Authorization": f"Bearer {FAIR_KEYS['noisy']}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def noisy_worker() -> None:
            body = fair_body(False)
            while not stop.is_set():
                async with session.post(
                    f"{url}/v1/chat/completions", data=body, headers=noisy_h
                ) as resp:
                    await resp.read()  # 503s past the queue's bounds are the noisy one's

        async def quiet_one(at: float) -> float:
            await asyncio.sleep(max(0.0, at - loop.time()))
            t0 = time.perf_counter()
            async with session.post(
                f"{url}/v1/chat/completions", data=fair_body(True), headers=quiet_h
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"quiet: {resp.status}: {await resp.text()}")
                while True:
                    chunk = await resp.content.readany()
                    if not chunk or b'"content"' in chunk:
                        break
                ttft = time.perf_counter() - t0
                await resp.read()
                return ttft

        workers = [asyncio.create_task(noisy_worker()) for _ in range(noisy)]
        if noisy:
            await asyncio.sleep(2.0)  # the noisy backlog builds up first
        start = loop.time() + 0.1
        ttfts = await asyncio.gather(*(quiet_one(start + i / rps) for i in range(count)))
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers), 60)
    return list(ttfts)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def fairness(rps: float, count: int) -> None:
    """A quiet tenant at a steady low rate beside a noisy one at 10x its fair share.

    One model, ``FAIR_SLOTS`` slots (its capacity: about FAIR_SLOTS / 0.2 s of
    requests per second); the two tenants weigh the same, so each one's fair share
    is half the slots. The noisy tenant keeps 10x its share in flight (closed loop:
    80 requests for 8 slots); the quiet one sends ``rps`` requests per second, far
    below its share. The quiet tenant's TTFT p99 is measured alone and beside the
    noisy one, in the same run on the same server, with fair sharing on, then again
    on a server with ``SARDEENZ_FAIR_SHARING=false`` (first come, first served).
    Target: the ratio with fairness within 1.3x.
    """
    noisy = NOISY_FACTOR * FAIR_SLOTS // 2
    rows: list[tuple[str, float, float, float, float]] = []
    for fair in (True, False):
        with tempfile.TemporaryDirectory(prefix="sardeenz-bench-fair-") as tmp:
            data = Path(tmp)
            keys = data / "keys.txt"
            keys.write_text(
                "".join(
                    f"{hashlib.sha256(v.encode()).hexdigest()} {k}\n" for k, v in FAIR_KEYS.items()
                )
            )
            server = ServerProcess(
                data / "node",
                extra_env={
                    "SARDEENZ_API_KEYS_FILE": str(keys),
                    "SARDEENZ_LOG_LEVEL": "warning",
                    "SARDEENZ_TENANTS": orjson.dumps(FAIR_TENANTS).decode(),
                    "SARDEENZ_FAIR_SLOTS_PER_INSTANCE": str(FAIR_SLOTS),
                    "SARDEENZ_FAIR_SHARING": "true" if fair else "false",
                    "SARDEENZ_FAIR_QUEUE_MAX": "10000",
                    "SARDEENZ_FAIR_QUEUE_WAIT_SECONDS": "120",
                },
            )
            try:
                server.start()
                api = httpx.Client(base_url=server.url, timeout=60)
                load_active(
                    api,
                    MODEL,
                    "--ttft-ms",
                    str(FAIR_TTFT_MS),
                    "--itl-ms",
                    str(FAIR_ITL_MS),
                )
                asyncio.run(quiet_and_noisy(server.url, rps, 10, 0))  # warm up
                alone = asyncio.run(quiet_and_noisy(server.url, rps, count, 0))
                beside = asyncio.run(quiet_and_noisy(server.url, rps, count, noisy))
            finally:
                server.stop()
                kill_engines(server.data_dir)
        name = "fair sharing" if fair else "first come, first served"
        rows.append(
            (name, p99(alone), p99(beside), statistics.median(alone), statistics.median(beside))
        )
        print(f"{name}: done", flush=True)
    print(
        f"\nquiet tenant TTFT ({count} requests at {rps:g}/s; engine TTFT {FAIR_TTFT_MS} ms; "
        f"{FAIR_SLOTS} slots; noisy tenant: {noisy} in flight = {NOISY_FACTOR}x its share):"
    )
    print(
        f"  {'':26} {'p99 alone':>10} {'p99 beside':>11} {'ratio':>6}"
        f"   {'p50 alone':>9} {'p50 beside':>10}"
    )
    for name, a, b, ma, mb in rows:
        print(
            f"  {name:26} {a * 1e3:8.0f} ms {b * 1e3:8.0f} ms {b / a:6.2f}x"
            f"   {ma * 1e3:6.0f} ms {mb * 1e3:7.0f} ms"
        )
    print("  target: p99 ratio with fair sharing <= 1.30x")


if __name__ == "__main__":
    main()
