"""Runner capacity: how many concurrent streams one process drives with TTFT error < 1 ms.

What is measured. At each concurrency level, in steady state (workers start
spread over one request's duration, so first tokens are not synchronised
bursts; a burst measures the engine's queueing, not the client), the
benchmark runner (``sardeenz.bench.runner.run_load`` with
the runner's own aiohttp session, exactly what a run uses) sends streamed
completions to a simulated engine with a fixed time to first token, at
increasing concurrency. The engine reports its own TTFT (its Prometheus
histogram ``vllm:time_to_first_token_seconds``, from the moment it has read a
request to the moment it writes the first token). The runner's **TTFT error**
is the runner's mean TTFT minus the engine's mean TTFT over the same
requests: the HTTP request and response on loopback plus whatever the
runner's event loop adds while it is busy with the other streams.

Baseline, in the same run: the same load from the lean asyncio client the
proxy uses for engines (``sardeenz.proxy.upstream``; one write per request,
httptools parsing), so the floor of loopback plus kernel plus the engine's
own HTTP handling is visible next to the runner's number.

The answer printed at the end is the highest concurrency at which the
runner's TTFT error stayed under 1 ms, and the runner's error relative to
the baseline's at each level. Runtime is bounded (``--max-seconds``, default
110 s): levels double from 1 up to ``--max-concurrency`` and stop early once
the error has exceeded ``SATURATED_MS`` at two levels in a row.

Usage: .venv/bin/python benchmarks/runner_capacity.py [--ttft-ms 50] [--itl-ms 20]
       [--tokens 16] [--max-concurrency 512] [--max-seconds 110]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sardeenz.bench.client import Target, completion_body
from sardeenz.bench.runner import new_session, run_load
from sardeenz.proxy.upstream import UpstreamClient

SATURATED_MS = 20.0
"""Stop doubling after two levels in a row with an error this large: the answer is known."""

_TTFT_RE = re.compile(r"^vllm:time_to_first_token_seconds_(sum|count)\{[^}]*\} (\S+)$", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def engine_ttft(url: str) -> tuple[float, float]:
    """(sum seconds, count) of the engine's TTFT histogram."""
    found = {m.group(1): float(m.group(2)) for m in _TTFT_RE.finditer(httpx.get(url).text)}
    return found["sum"], found["count"]


ROUNDS = 3
"""Rounds per level and client, alternating runner and baseline; the median error counts."""


@dataclass
class Level:
    client: str
    concurrency: int
    requests: int
    ttft_ms: list[float]
    engine_ms: float
    cpu_percent: float
    seconds: float
    failed: int
    round_errors: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ttft_ms)

    @property
    def error(self) -> float:
        """Median over rounds of (mean TTFT - engine mean TTFT): robust to one noisy round."""
        if self.round_errors:
            return statistics.median(self.round_errors)
        return self.mean - self.engine_ms

    @property
    def p99(self) -> float:
        data = sorted(self.ttft_ms)
        return data[min(len(data) - 1, round(0.99 * (len(data) - 1)))]


def merge(rounds: list[Level]) -> Level:
    return Level(
        client=rounds[0].client,
        concurrency=rounds[0].concurrency,
        requests=sum(r.requests for r in rounds),
        ttft_ms=[t for r in rounds for t in r.ttft_ms],
        engine_ms=statistics.fmean(r.engine_ms for r in rounds),
        cpu_percent=statistics.fmean(r.cpu_percent for r in rounds),
        seconds=sum(r.seconds for r in rounds),
        failed=sum(r.failed for r in rounds),
        round_errors=[r.error for r in rounds],
    )


# --- the two clients ------------------------------------------------------------------

Load = Callable[[int, int, float], Awaitable[tuple[list[float], int]]]
"""(requests, concurrency, ramp seconds) -> (TTFTs in ms of the successful ones, failures)."""


def runner_load(port: int, body: bytes) -> tuple[Load, Callable[[], Awaitable[None]]]:
    session = new_session()
    target = Target(url=f"http://127.0.0.1:{port}/v1/completions", model="cap")

    async def load(total: int, concurrency: int, ramp: float) -> tuple[list[float], int]:
        samples = await run_load(
            session, target, [body], total=total, concurrency=concurrency, ramp_seconds=ramp
        )
        ok = [s.ttft_ms for s in samples if s.ok and s.ttft_ms is not None]
        return ok, len(samples) - len(ok)

    return load, session.close


def lean_load(port: int, body: bytes) -> tuple[Load, Callable[[], Awaitable[None]]]:
    client = UpstreamClient()
    headers = b"content-type: application/json\r\naccept: text/event-stream\r\n"

    async def one() -> float | None:
        start = time.perf_counter()
        resp = await client.request("127.0.0.1", port, b"POST", b"/v1/completions", headers, body)
        first = None
        while chunk := await resp.read():
            if first is None and b'"text":"tok' in chunk:
                first = time.perf_counter()
        return None if first is None else (first - start) * 1000

    async def load(total: int, concurrency: int, ramp: float) -> tuple[list[float], int]:
        issued = 0
        out: list[float] = []
        failed = 0
        count = min(concurrency, total)

        async def worker(delay: float) -> None:
            nonlocal issued, failed
            await asyncio.sleep(delay)
            while issued < total:
                issued += 1
                ttft = await one()
                if ttft is None:
                    failed += 1
                else:
                    out.append(ttft)

        await asyncio.gather(*(worker(ramp * i / count) for i in range(count)))
        return out, failed

    return load, client.close


async def measure(
    name: str, load: Load, metrics_url: str, concurrency: int, requests: int, ramp: float
) -> Level:
    """One round: ``requests`` requests, TTFTs and the engine's own mean TTFT for them."""
    s0, c0 = await asyncio.to_thread(engine_ttft, metrics_url)
    me = psutil.Process()
    cpu0 = sum(me.cpu_times()[:2])
    t0 = time.perf_counter()
    ttfts, failed = await load(requests, concurrency, ramp)
    seconds = time.perf_counter() - t0
    cpu = sum(me.cpu_times()[:2]) - cpu0
    s1, c1 = await asyncio.to_thread(engine_ttft, metrics_url)
    engine_ms = (s1 - s0) / max(1.0, c1 - c0) * 1000
    return Level(
        name, concurrency, requests, ttfts, engine_ms, 100 * cpu / seconds, seconds, failed
    )


async def run(args: argparse.Namespace, port: int) -> list[tuple[Level, Level]]:
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    body = completion_body("cap", "hello world", args.tokens)
    runner, close_runner = runner_load(port, body)
    lean, close_lean = lean_load(port, body)
    deadline = time.monotonic() + args.max_seconds
    # One request's duration: workers start spread over it, so their first tokens
    # stay out of phase (steady state) instead of arriving in lockstep bursts.
    cycle = (args.ttft_ms + (args.tokens - 1) * args.itl_ms) / 1000
    results: list[tuple[Level, Level]] = []
    over = 0  # levels in a row where the runner is clearly saturated
    concurrency = 1
    try:
        while concurrency <= args.max_concurrency and time.monotonic() < deadline:
            requests = max(2 * concurrency, 8)
            # Warm-up: connections open, caches warm.
            await runner(concurrency, concurrency, 0.0)
            await lean(concurrency, concurrency, 0.0)
            rounds = [
                (
                    await measure("runner", runner, metrics_url, concurrency, requests, cycle),
                    await measure("lean", lean, metrics_url, concurrency, requests, cycle),
                )
                for _ in range(ROUNDS)
            ]
            ours, base = merge([r[0] for r in rounds]), merge([r[1] for r in rounds])
            results.append((ours, base))
            print(
                f"c={concurrency:4d}  runner error {ours.error:7.3f} ms  "
                f"lean error {base.error:7.3f} ms  engine TTFT {ours.engine_ms:6.2f} ms  "
                f"runner CPU {ours.cpu_percent:5.1f}%",
                flush=True,
            )
            over = over + 1 if ours.error >= SATURATED_MS else 0
            if over >= 2:
                break
            concurrency *= 2
    finally:
        await close_runner()
        await close_lean()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--max-concurrency", type=int, default=512)
    parser.add_argument("--max-seconds", type=float, default=110.0)
    args = parser.parse_args()

    port = free_port()
    engine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sardeenz.sim",
            "--model",
            "cap",
            "--port",
            str(port),
            "--load-seconds",
            "0",
            "--ttft-ms",
            str(args.ttft_ms),
            "--itl-ms",
            str(args.itl_ms),
            "--max-model-len",
            "65536",
            "--disable-uvicorn-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or engine.poll() is not None:
                raise SystemExit("the simulated engine did not start")
            time.sleep(0.05)
        print(
            f"sim engine: TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms, {args.tokens} tokens "
            f"per request; cpus: {psutil.cpu_count()}; load average "
            f"{', '.join(f'{x:.2f}' for x in psutil.getloadavg())}",
            flush=True,
        )
        results = uvloop.run(run(args, port))
    finally:
        engine.terminate()
        try:
            engine.wait(10)
        except subprocess.TimeoutExpired:
            engine.kill()

    print()
    header = (
        f"{'conc':>5} {'runner err ms':>13} {'lean err ms':>11} {'ratio':>6} "
        f"{'runner p99 ms':>13} {'engine ms':>9} {'runner CPU%':>11} {'failed':>6}"
    )
    print(header)
    for ours, base in results:
        ratio = ours.error / base.error if base.error > 0.01 else float("nan")
        print(
            f"{ours.concurrency:5d} {ours.error:13.3f} {base.error:11.3f} {ratio:6.2f} "
            f"{ours.p99 - ours.engine_ms:13.3f} {ours.engine_ms:9.2f} "
            f"{ours.cpu_percent:11.1f} {ours.failed + base.failed:6d}"
        )
    good = [ours.concurrency for ours, _ in results if ours.error < 1.0]
    best = max(good) if good else 0
    floor = [base.concurrency for _, base in results if base.error < 1.0]
    print()
    print(f"runner capacity: {best} concurrent streams with mean TTFT error < 1 ms")
    print(f"(the lean baseline client: {max(floor) if floor else 0} streams)")
    print(
        "(error = runner's mean TTFT - the engine's own mean TTFT for the same requests; "
        f"median of {ROUNDS} rounds per level)"
    )


if __name__ == "__main__":
    main()
