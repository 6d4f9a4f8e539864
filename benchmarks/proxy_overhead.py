"""What the proxy adds, measured against going direct (and nginx) in one run.

Run: ``.venv/bin/python benchmarks/proxy_overhead.py`` (about 3-4 minutes).

Processes, each on its own event loop (uvloop):

* upstream: a fixed-latency OpenAI-shaped server (``--upstream fast``: a raw
  asyncio protocol answering in a few microseconds, so the proxy is what is
  measured; ``--upstream sim``: the simulated engine with zero latencies);
* the proxy: the real ``sardeenz serve`` when it exists (the sim engine is
  loaded through the admin API), else ``python -m sardeenz.standalone``;
  uvicorn with uvloop + httptools, one worker;
* nginx (if installed) with an equivalent keep-alive, unbuffered config;
* a load generator (aiohttp client) in a separate process, driven over a pipe.

The same load is sent direct, through the proxy and through nginx, interleaved
in several rounds (this machine is noisy), and percentiles are taken over the
pooled samples of all rounds. The proxy's CPU time comes from psutil
``cpu_times`` of its pid around its own timed batches only.

Streaming CPU per chunk is measured under two conditions: *paced*, events
``--itl-ms`` apart, so each event reaches the proxy as its own read (one
read+write per event, the costlier case); and *burst* (fast upstream only),
the same events written back to back (ITL 0, asked for with the
``x-bench-itl-ms: 0`` request header), so a read may carry several events, as
from a fast engine: the condition of the issue's reference numbers. The sim
engine (``serve`` mode, ``--upstream sim``) runs at ITL 0 and writes a whole
stream at once, so it gets one streaming phase, labelled as such.

Time to first token is measured twice with ``--streams`` (256) streams:
*at once* (all started together: the p99 is how long the last one queued
behind the other 255 in every process, load generator included) and
*sustained* (that many streams open at all times for ``--sustain-seconds``,
each worker starting its next stream when one ends: the steady load a node
serves). The target applies to the sustained one; both are printed.

``--node`` adds the whole node: ``sardeenz serve`` with one catalog entry of
``engine: external`` pointing at the same upstream (its fast lane, express
path, metrics, health checks: everything a real node runs), measured beside the
standalone proxy and nginx; the report compares its CPU per request with the
standalone proxy's (target: within 1.3x). ``--upstream-url http://host:port``
with ``--model NAME`` puts it (and nginx, and the standalone proxy when the
server is local) in front of any OpenAI-compatible server instead of the
fixed upstream; its own CPU is charged only when it listens on this machine.

``--clients`` adds the micro-benchmark that chose the upstream HTTP client:
aiohttp vs httpx issuing the same requests to the fast upstream, CPU per
request and per streamed chunk in the client process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MODEL = os.environ.get("SARDEENZ_BENCH_MODEL", "bench")
"""The model name requests carry (``--model``; children read it from the environment)."""

# --------------------------------------------------------------------------
# role: fast upstream
# --------------------------------------------------------------------------
_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello from the fixed upstream"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
    }
).encode()
_NONSTREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    % len(_COMPLETION)
    + _COMPLETION
)
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _sse_chunk(i: int) -> bytes:
    event = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench",'
        b'"choices":[{"index":0,"delta":{"content":"tok%d "}}]}\n\n' % i
    )
    return b"%x\r\n%s\r\n" % (len(event), event)


_DONE = b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")


_ITL_HEADER = b"\r\nx-bench-itl-ms:"


class _Upstream(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive server: JSON answer, or N SSE events ITL apart.

    A request header ``x-bench-itl-ms`` overrides the ITL for that stream; with 0
    each event is still its own write, issued on the next loop iteration.
    """

    def __init__(self, events: int, itl: float, latency: float) -> None:
        self.events = events
        self.itl = itl
        self.latency = latency
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; same interface.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            length = 0
            i = head.find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                length = int(head[i + 15 : j if j > 0 else None])
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            if b'"stream":true' in body.replace(b" ", b""):
                itl = self.itl
                i = head.find(_ITL_HEADER)
                if i >= 0:
                    j = head.find(b"\r\n", i + 2)
                    itl = float(head[i + len(_ITL_HEADER) : j if j > 0 else None]) / 1000
                self._stream(0, itl)
            elif self.latency:
                self.loop.call_later(self.latency, self._write, _NONSTREAM)
            else:
                self._write(_NONSTREAM)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _stream(self, i: int, itl: float) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        if i == 0:
            t.write(_STREAM_HEAD + _sse_chunk(0))
        elif i < self.events:
            t.write(_sse_chunk(i))
        else:
            t.write(_DONE)
            return
        if itl > 0:
            self.loop.call_later(itl, self._stream, i + 1, itl)
        else:
            self.loop.call_soon(self._stream, i + 1, itl)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def run_upstream(port: int, events: int, itl_ms: float, latency_ms: float) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _Upstream(events, itl_ms / 1000, latency_ms / 1000),
            "127.0.0.1",
            port,
            backlog=4096,
        )
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# --------------------------------------------------------------------------
# role: uvicorn floor (canned answer, same server settings as the proxy)
# --------------------------------------------------------------------------
def run_floor(port: int) -> None:
    import uvicorn

    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(_COMPLETION)),
        ],
    }
    body = {"type": "http.response.body", "body": _COMPLETION, "more_body": False}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send(start)
        await send(body)

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )


# --------------------------------------------------------------------------
# role: load generator (commands as JSON lines on stdin, results on stdout)
# --------------------------------------------------------------------------
_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16}
).encode()
_STREAM_BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello"}],
        "max_tokens": 32,
        "stream": True,
    }
).encode()
_HEADERS = {"content-type": "application/json"}
_BURST_HEADERS = {**_HEADERS, "x-bench-itl-ms": "0"}


async def _loadgen() -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd["op"] == "nonstream":
                result = await _nonstream(session, cmd["url"], cmd["concurrency"], cmd)
            elif cmd["op"] == "stream":
                result = await _streams(session, cmd["url"], cmd["streams"], cmd.get("burst"))
            elif cmd["op"] == "sustain":
                result = await _sustained(session, cmd["url"], cmd["streams"], cmd["duration"])
            else:
                result = {"error": f"unknown op {cmd['op']}"}
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()


async def _nonstream(session: Any, url: str, concurrency: int, cmd: dict[str, Any]) -> Any:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + cmd.get("duration", 1e9)
    remaining = [cmd.get("requests", 1 << 62)]

    async def worker() -> None:
        nonlocal errors
        while remaining[0] > 0 and time.perf_counter() < deadline:
            remaining[0] -= 1
            t = time.perf_counter()
            async with session.post(url, data=_BODY, headers=_HEADERS) as r:
                await r.read()
                if r.status != 200:
                    errors += 1
            latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"lat": latencies, "elapsed": time.perf_counter() - t0, "errors": errors}


async def _streams(session: Any, url: str, n: int, burst: bool = False) -> Any:
    headers = _BURST_HEADERS if burst else _HEADERS
    ttfts: list[float] = []
    chunks = 0
    events = 0
    errors = 0
    start = asyncio.Event()

    async def one() -> None:
        nonlocal chunks, events, errors
        await start.wait()
        t = time.perf_counter()
        async with session.post(url, data=_STREAM_BODY, headers=headers) as r:
            first = True
            async for data in r.content.iter_any():
                if first:
                    ttfts.append(time.perf_counter() - t)
                    first = False
                chunks += 1
                events += data.count(b"data: ")
            if r.status != 200:
                errors += 1

    tasks = [asyncio.ensure_future(one()) for _ in range(n)]
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return {
        "ttft": ttfts,
        "chunks": chunks,
        "events": events,
        "errors": errors,
        "elapsed": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------
# role: client micro-benchmark (aiohttp vs httpx as the proxy's upstream client)
# --------------------------------------------------------------------------
async def _client_bench(kind: str, url: str) -> dict[str, float]:
    proc = psutil.Process()

    def cpu() -> float:
        t = proc.cpu_times()
        return t.user + t.system

    out: dict[str, float] = {}
    if kind == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            auto_decompress=False,
        )

        async def req() -> None:
            async with session.post(url, data=_BODY, headers=_HEADERS) as r:
                await r.read()

        async def stream() -> int:
            n = 0
            async with session.post(url, data=_STREAM_BODY, headers=_HEADERS) as r:
                read = r.content.readany
                while await read():
                    n += 1
            return n

        async def close() -> None:
            await session.close()
    elif kind == "sardeenz":
        from urllib.parse import urlsplit

        from sardeenz.proxy.upstream import UpstreamClient

        lean = UpstreamClient()
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        target = parts.path.encode()
        hdrs = b"content-type: application/json\r\n"

        async def req() -> None:
            r = await lean.request(host, port, b"POST", target, hdrs, _BODY)
            await r.read_all()

        async def stream() -> int:
            n = 0
            r = await lean.request(host, port, b"POST", target, hdrs, _STREAM_BODY)
            while await r.read():
                n += 1
            return n

        async def close() -> None:
            await lean.close()
    else:
        import httpx

        client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            timeout=None,
            trust_env=False,
        )

        async def req() -> None:
            r = await client.post(url, content=_BODY, headers=_HEADERS)
            r.read()

        async def stream() -> int:
            n = 0
            async with client.stream("POST", url, content=_STREAM_BODY, headers=_HEADERS) as r:
                async for _ in r.aiter_raw():
                    n += 1
            return n

        async def close() -> None:
            await client.aclose()

    for _ in range(300):
        await req()
    scale = 6 if kind == "httpx" else 1  # httpx is slow enough to blow the time budget
    for label, conc, total in (("c1", 1, 3000 // scale), ("c64", 64, 12000 // scale)):
        left = [total]

        async def worker(left: list[int]) -> None:
            while left[0] > 0:
                left[0] -= 1
                await req()

        c0, t0 = cpu(), time.perf_counter()
        await asyncio.gather(*(worker(left) for _ in range(conc)))
        out[f"{label}_us_per_req"] = (cpu() - c0) / total * 1e6
        out[f"{label}_rps"] = total / (time.perf_counter() - t0)
    c0 = cpu()
    counts = await asyncio.gather(*(stream() for _ in range(64)))
    out["stream_us_per_chunk"] = (cpu() - c0) / sum(counts) * 1e6
    out["stream_chunks"] = float(sum(counts))
    await close()
    return out


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


class Procs:
    """Child processes started in their own sessions, always killed as groups."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        p = subprocess.Popen(argv, start_new_session=True, env=env, **kw)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(5)


class LoadGen:
    def __init__(self, procs: Procs) -> None:
        self.p = procs.spawn(
            [PY, __file__, "--role", "loadgen"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def run(self, **cmd: Any) -> Any:
        assert self.p.stdin is not None
        assert self.p.stdout is not None
        self.p.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("load generator died")
        return json.loads(line)


def _nginx_conf(tmp: Path, listen: int, upstream: int | str) -> Path:
    """nginx in front of ``upstream`` (a local port, or ``host:port``)."""
    server = upstream if isinstance(upstream, str) else f"127.0.0.1:{upstream}"
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream engine {{ server {server}; keepalive 512; }}
  server {{
    listen 127.0.0.1:{listen};
    client_max_body_size 32m;
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"""
    )
    return conf


def _serve_available() -> bool:
    """True once ``sardeenz serve`` exists and its app wires the inference proxy."""
    app = ROOT / "src" / "sardeenz" / "app.py"
    cli = ROOT / "src" / "sardeenz" / "cli.py"
    return app.exists() and cli.exists() and "InferenceProxy" in app.read_text()


def _start_serve(
    procs: Procs, port: int, upstream: str, data_dir: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``sardeenz serve`` and load the sim engine through the admin API.

    The server gets a data dir of its own: with the default one
    (``~/.local/share/sardeenz``) it would re-adopt every engine an earlier run
    left behind (demo models, other ``bench`` instances with other latencies),
    the proxy would spread ``bench`` over all of them, and "direct" would be
    whichever instance happened to be listed first. Simulated GPUs without
    ``--demo``: no demo models competing for the CPU.
    """
    import httpx

    p = procs.spawn(
        [
            PY,
            "-c",
            "from sardeenz.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir / "serve"),
            "--sim-gpus",
            "NVIDIA L4:24GiB",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(data_dir),
    )
    _wait_port(port, 60)
    base = f"http://127.0.0.1:{port}"
    r = httpx.post(
        f"{base}/api/v1/models/load",
        json={
            "modelPath": MODEL,
            "engine": "sim",
            "extraArgs": ["--ttft-ms", "0", "--itl-ms", "0", "--load-seconds", "0"],
        },
        timeout=60,
    )
    r.raise_for_status()
    instance_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        models = httpx.get(f"{base}/api/v1/models", timeout=10).json()
        items = models if isinstance(models, list) else models.get("models", models.get("data", []))
        mine = [m for m in items if m.get("id") == instance_id]
        if len(items) != 1 or not mine:
            raise RuntimeError(f"expected only instance {instance_id}, the server lists {items}")
        if mine[0].get("status") == "active":
            return p, int(mine[0]["port"])
        if mine[0].get("status") == "failed":
            raise RuntimeError(f"the sim engine failed: {mine[0].get('errorMessage')}")
        time.sleep(0.2)
    raise RuntimeError("the sim engine did not become active")


def _start_node(procs: Procs, port: int, upstream_url: str, data_dir: Path) -> Any:
    """``sardeenz serve`` whose catalog names ``upstream_url`` as an external server
    serving MODEL; returns once its health check routes MODEL there."""
    import httpx

    config = data_dir / "node.yaml"
    config.write_text(
        f"catalog:\n  {json.dumps(MODEL)}:\n    engine: external\n"
        f"    url: {json.dumps(upstream_url)}\n    modelPath: {json.dumps(MODEL)}\n"
    )
    p = procs.spawn(
        [
            PY,
            "-c",
            "from sardeenz.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir / "node"),
            "--sim-gpus",
            "NVIDIA L4:24GiB",
            "--config",
            str(config),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(data_dir),
    )
    _wait_port(port, 60)
    deadline = time.monotonic() + 60
    state = None
    while time.monotonic() < deadline:
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"]
        state = next((m.get("state") for m in models if m["id"] == MODEL), None)
        if state == "active":
            return p
        time.sleep(0.2)
    raise RuntimeError(f"the node never routed {MODEL} to {upstream_url} (state {state})")


def _stop_serve(serve: subprocess.Popen[bytes], engine_pgid: int | None) -> None:
    """Stop ``sardeenz serve`` gracefully so it stops its engine (engines run in
    their own session and would outlive a SIGKILL); kill the engine if it did not."""
    with contextlib.suppress(ProcessLookupError):
        serve.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        serve.wait(30)
    if engine_pgid is not None and engine_pgid != os.getpgrp():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(engine_pgid, signal.SIGKILL)


def _pid_on_port(port: int) -> int:
    for conn in psutil.net_connections("tcp"):
        listening = conn.status == psutil.CONN_LISTEN and conn.pid is not None
        if listening and conn.laddr and conn.laddr.port == port:
            return int(conn.pid or 0)
    raise RuntimeError(f"no process listens on port {port}")


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def _sustained(session: Any, url: str, n: int, duration: float) -> Any:
    """``n`` streams open at all times for ``duration`` s: each worker starts the
    next stream when its last one ends, from a staggered start. TTFTs of
    streams started in the first second (ramp-up) are left out."""
    ttfts: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    deadline = t0 + duration

    async def worker(i: int) -> None:
        nonlocal errors
        await asyncio.sleep(i / n)  # spread the starts over one second
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            async with session.post(url, data=_STREAM_BODY, headers=_HEADERS) as r:
                first = True
                async for _ in r.content.iter_any():
                    if first:
                        if t - t0 >= 1.0:
                            ttfts.append(time.perf_counter() - t)
                        first = False
                if r.status != 200:
                    errors += 1

    await asyncio.gather(*(worker(i) for i in range(n)))
    return {"ttft": ttfts, "errors": errors, "elapsed": time.perf_counter() - t0}


def orchestrate(args: argparse.Namespace) -> None:
    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="sardeenz-bench-"))
    t_start = time.monotonic()
    serve: subprocess.Popen[bytes] | None = None
    engine_pgid: int | None = None
    try:
        up_port, proxy_port, nginx_port = _free_port(), _free_port(), _free_port()
        mode = args.proxy
        if mode == "auto":
            mode = "standalone" if args.node else "serve" if _serve_available() else "standalone"
        up_pid: int | None
        proxy_pid: int | None = None
        nginx_upstream: int | str = up_port
        if args.upstream_url:
            if mode == "serve":
                raise SystemExit("--upstream-url: use --proxy standalone (and --node)")
            u = urlsplit(args.upstream_url)
            if u.scheme != "http" or not u.hostname:
                raise SystemExit("--upstream-url must be http://host:port")
            local = u.hostname in ("127.0.0.1", "localhost", "::1")
            up_port = u.port or 80
            nginx_upstream = f"{u.hostname}:{up_port}"
            up_pid = _pid_on_port(up_port) if local else None
            upstream_desc = f"{args.upstream_url} (model {MODEL})"
        elif mode == "serve":
            serve, up_port = _start_serve(procs, proxy_port, args.upstream, tmp)
            proxy_pid = serve.pid
            up_pid = _pid_on_port(up_port)
            engine_pgid = os.getpgid(up_pid)
            upstream_desc = "sim engine loaded by sardeenz serve"
        else:
            if args.upstream == "sim":
                up = procs.spawn(
                    [
                        PY,
                        "-m",
                        "sardeenz.sim",
                        "--model",
                        MODEL,
                        "--port",
                        str(up_port),
                        "--ttft-ms",
                        "0",
                        "--itl-ms",
                        "0",
                        "--load-seconds",
                        "0",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                upstream_desc = "sim engine (ttft 0, itl 0)"
            else:
                up = procs.spawn(
                    [
                        PY,
                        __file__,
                        "--role",
                        "upstream",
                        "--port",
                        str(up_port),
                        "--events",
                        str(args.events),
                        "--itl-ms",
                        str(args.itl_ms),
                    ]
                )
                upstream_desc = f"fast fixed upstream ({args.events} events, ITL {args.itl_ms} ms)"
            _wait_port(up_port)
            up_pid = up.pid
        if mode == "standalone" and (not args.upstream_url or up_pid is not None):
            proxy = procs.spawn(
                [
                    PY,
                    "-m",
                    "sardeenz.standalone",
                    "--port",
                    str(proxy_port),
                    "--route",
                    f"{MODEL}={up_port}",
                ]
            )
            proxy_pid = proxy.pid
        if proxy_pid is not None:
            _wait_port(proxy_port)
        # The burst condition needs the fast upstream (the sim engine ignores the header).
        # The sim engine runs at ITL 0 (its ITL also delays non-streamed answers), so
        # there it writes a whole stream at once: its one streaming phase is not paced.
        burst = mode == "standalone" and args.upstream == "fast" and not args.upstream_url
        if burst:
            paced = ("paced", f"(none: ITL {args.itl_ms:g} ms, one read+write per event)")
        else:
            paced = ("sim ITL 0", "(none: the sim engine writes each stream at once)")

        # Which process's CPU time to charge each target's batches to.
        pids: dict[str, int | None] = {"direct": up_pid}
        direct_base = (
            args.upstream_url.rstrip("/") if args.upstream_url else f"http://127.0.0.1:{up_port}"
        )
        direct_base = direct_base.removesuffix("/v1")
        targets = {"direct": f"{direct_base}/v1/chat/completions"}
        if proxy_pid is not None:
            pids["proxy"] = proxy_pid
            targets["proxy"] = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        if args.node:
            node_port = _free_port()
            node = _start_node(procs, node_port, direct_base, tmp)
            pids["node"] = node.pid
            targets["node"] = f"http://127.0.0.1:{node_port}/v1/chat/completions"
        nginx = shutil.which("nginx") or (
            "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
        )
        if nginx and not args.no_nginx:
            master = procs.spawn(
                [nginx, "-c", str(_nginx_conf(tmp, nginx_port, nginx_upstream)), "-p", str(tmp)]
            )
            _wait_port(nginx_port)
            targets["nginx"] = f"http://127.0.0.1:{nginx_port}/v1/chat/completions"
            pids["nginx"] = psutil.Process(master.pid).children()[0].pid
        # The floor: uvicorn serving a canned answer, same settings as the proxy.
        # No proxy behind uvicorn can cost less per request than this.
        floor_port = _free_port()
        floor = procs.spawn([PY, __file__, "--role", "floor", "--port", str(floor_port)])
        _wait_port(floor_port)
        targets["uvicorn-floor"] = f"http://127.0.0.1:{floor_port}/v1/chat/completions"
        pids["uvicorn-floor"] = floor.pid
        streaming = [t for t in targets if t != "uvicorn-floor"]

        lg = LoadGen(procs)
        for name, url in targets.items():  # warm up connections, caches, allocators
            lg.run(op="nonstream", url=url, concurrency=64, requests=2000)
            if name in streaming:
                lg.run(op="stream", url=url, streams=64)
                if burst:
                    lg.run(op="stream", url=url, streams=64, burst=True)

        res = Results(list(targets))
        for rnd in range(args.rounds):
            order = list(targets)
            random.shuffle(order)
            for name in order:
                url, pid = targets[name], pids[name]
                r = lg.run(op="nonstream", url=url, concurrency=1, requests=args.c1_requests)
                res.c1[name] += r["lat"]
                res.errors[name] += r["errors"]
                c0 = _cpu(pid) if pid is not None else math.nan
                r = lg.run(op="nonstream", url=url, concurrency=64, duration=args.c64_seconds)
                res.cpu_req[name].append((_cpu(pid) - c0 if pid else math.nan, len(r["lat"])))
                res.c64[name] += r["lat"]
                res.c64_rps[name].append(len(r["lat"]) / r["elapsed"])
                res.errors[name] += r["errors"]
                if name not in streaming:
                    continue
                c0 = _cpu(pid) if pid is not None else math.nan
                r = lg.run(op="stream", url=url, streams=args.streams)
                cpu = _cpu(pid) - c0 if pid else math.nan
                res.cpu_stream[name].append((cpu, args.streams, r["events"]))
                res.ttft[name] += r["ttft"]
                res.errors[name] += r["errors"]
                r = lg.run(
                    op="sustain", url=url, streams=args.streams, duration=args.sustain_seconds
                )
                res.ttft_sustained[name] += r["ttft"]
                res.errors[name] += r["errors"]
                if not burst:
                    continue
                c0 = _cpu(pid) if pid is not None else math.nan
                r = lg.run(op="stream", url=url, streams=args.streams, burst=True)
                cpu = _cpu(pid) - c0 if pid else math.nan
                res.cpu_stream_burst[name].append((cpu, args.streams, r["events"]))
                res.burst_reads[name].append((r["chunks"], r["events"]))
                res.errors[name] += r["errors"]
            print(f"  round {rnd + 1}/{args.rounds} done ({time.monotonic() - t_start:.0f} s)")

        print(f"\nproxy: {mode}; upstream: {upstream_desc}; cpus: {os.cpu_count()}")
        res.report(args.streams, *paced)
        if args.clients:
            client_bench(procs, up_port)
    finally:
        if serve is not None:
            _stop_serve(serve, engine_pgid)
        procs.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ntotal {time.monotonic() - t_start:.0f} s")


class Results:
    """Pooled samples per target, and the table printed from them."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.c1: dict[str, list[float]] = {t: [] for t in targets}
        self.c64: dict[str, list[float]] = {t: [] for t in targets}
        self.c64_rps: dict[str, list[float]] = {t: [] for t in targets}
        self.ttft: dict[str, list[float]] = {t: [] for t in targets}
        self.ttft_sustained: dict[str, list[float]] = {t: [] for t in targets}
        self.errors: dict[str, int] = dict.fromkeys(targets, 0)
        self.cpu_req: dict[str, list[tuple[float, int]]] = {t: [] for t in targets}
        self.cpu_stream: dict[str, list[tuple[float, int, int]]] = {t: [] for t in targets}
        self.cpu_stream_burst: dict[str, list[tuple[float, int, int]]] = {t: [] for t in targets}
        self.burst_reads: dict[str, list[tuple[int, int]]] = {t: [] for t in targets}

    def req_cpu(self, t: str) -> float:
        """CPU seconds per request of the target's server process (c=64 batches)."""
        samples = self.cpu_req[t]
        return sum(c for c, _ in samples) / max(1, sum(n for _, n in samples))

    def chunk_cpu(self, t: str, burst: bool = False) -> float:
        """CPU seconds per streamed event, the per-request part subtracted."""
        samples = (self.cpu_stream_burst if burst else self.cpu_stream)[t]
        if not samples:
            return float("nan")
        cpu = sum(c for c, _, _ in samples)
        streams = sum(n for _, n, _ in samples)
        events = sum(e for _, _, e in samples)
        return max(0.0, cpu - streams * self.req_cpu(t)) / max(1, events)

    def added(self, d: dict[str, list[float]], t: str, q: float) -> float:
        return (_pct(d[t], q) - _pct(d["direct"], q)) * 1e3

    def events_per_read(self, t: str) -> float:
        """Burst phase: SSE events per client read (how much the target coalesced)."""
        reads = sum(c for c, _ in self.burst_reads[t])
        return sum(e for _, e in self.burst_reads[t]) / reads if reads else float("nan")

    def report(self, streams: int, paced_label: str, paced_note: str) -> None:
        """Print the tables; ``paced_label``/``paced_note`` name the streaming condition
        of the main streaming phase (``paced`` with the fast upstream)."""
        ms, us = 1e3, 1e6
        ts = self.targets
        print(f"{'':36}" + "".join(f"{t:>14}" for t in ts))

        def row(label: str, values: list[float], fmt: str = "{:14.3f}") -> None:
            cells = [f"{'-':>14}" if math.isnan(v) else fmt.format(v) for v in values]
            print(f"{label:36}" + "".join(cells))

        row("c=1   p50 latency (ms)", [_pct(self.c1[t], 50) * ms for t in ts])
        row("c=1   p99 latency (ms)", [_pct(self.c1[t], 99) * ms for t in ts])
        row("c=64  p50 latency (ms)", [_pct(self.c64[t], 50) * ms for t in ts])
        row("c=64  p99 latency (ms)", [_pct(self.c64[t], 99) * ms for t in ts])
        row("c=64  throughput (req/s)", [_median(self.c64_rps[t]) for t in ts], "{:14.0f}")
        row(f"{streams} streams at once TTFT p50 (ms)", [_pct(self.ttft[t], 50) * ms for t in ts])
        row(f"{streams} streams at once TTFT p99 (ms)", [_pct(self.ttft[t], 99) * ms for t in ts])
        sus = self.ttft_sustained
        row(f"{streams} streams sustained TTFT p50 (ms)", [_pct(sus[t], 50) * ms for t in ts])
        row(f"{streams} streams sustained TTFT p99 (ms)", [_pct(sus[t], 99) * ms for t in ts])
        row("server CPU per request (us)", [self.req_cpu(t) * us for t in ts], "{:14.1f}")
        paced = [self.chunk_cpu(t) * us for t in ts]
        burst = [self.chunk_cpu(t, burst=True) * us for t in ts]
        row(f"server CPU per chunk, {paced_label} (us)", paced, "{:14.1f}")
        row("server CPU per chunk, burst (us)", burst, "{:14.1f}")
        row("burst: events per client read", [self.events_per_read(t) for t in ts], "{:14.1f}")
        row("errors", [float(self.errors[t]) for t in ts], "{:14.0f}")

        rel = [t for t in ts if t in ("proxy", "node", "nginx")]
        print(f"\n{'relative to direct':36}" + "".join(f"{t:>14}" for t in rel) + "   target")
        checks: list[tuple[str, Callable[[str], float], str]] = [
            ("c=1  p50 added (ms)", lambda t: self.added(self.c1, t, 50), "<= 0.3"),
            ("c=1  p99 added (ms)", lambda t: self.added(self.c1, t, 99), ""),
            ("c=64 p50 added (ms)", lambda t: self.added(self.c64, t, 50), ""),
            ("c=64 p99 added (ms)", lambda t: self.added(self.c64, t, 99), ""),
            (
                "c=64 throughput / direct",
                lambda t: _median(self.c64_rps[t]) / _median(self.c64_rps["direct"]),
                ">= 0.6",
            ),
            (
                f"TTFT p99 added, {streams} at once (ms)",
                lambda t: self.added(self.ttft, t, 99),
                "(none: a queue of all at once)",
            ),
            (
                f"TTFT p99 added, {streams} sustained (ms)",
                lambda t: self.added(self.ttft_sustained, t, 99),
                "<= 10",
            ),
            ("CPU per request (us)", lambda t: self.req_cpu(t) * us, "<= 150"),
            (f"CPU per chunk, {paced_label} (us)", lambda t: self.chunk_cpu(t) * us, paced_note),
            ("CPU per chunk, burst (us)", lambda t: self.chunk_cpu(t, burst=True) * us, "<= 10"),
        ]
        for label, fn, target in checks:
            cells = [f"{'-':>14}" if math.isnan(v) else f"{v:14.3f}" for v in map(fn, rel)]
            print(f"{label:36}" + "".join(cells) + f"   {target}")
        if "node" in ts and "proxy" in ts:
            ratio = self.req_cpu("node") / self.req_cpu("proxy")
            chunk = self.chunk_cpu("node") / self.chunk_cpu("proxy")
            print(
                f"\nfull node (sardeenz serve, external entry) vs standalone proxy: CPU per "
                f"request {ratio:.2f}x (target <= 1.3x), per chunk {chunk:.2f}x"
            )
        if "uvicorn-floor" in ts and "proxy" in ts:
            floor = self.req_cpu("uvicorn-floor")
            print(
                f"\nproxy CPU per request above the uvicorn floor: "
                f"{(self.req_cpu('proxy') - floor) * us:.1f} us "
                f"(floor {floor * us:.1f} us: uvicorn answering a canned response)"
            )


def _median(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs))) if xs else float("nan")


def client_bench(procs: Procs, up_port: int) -> None:
    print("\nupstream client micro-benchmark (client process CPU, fast upstream;")
    print("'sardeenz' is proxy/upstream.py: asyncio protocol + httptools)")
    url = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    results = {}
    for kind in ("sardeenz", "aiohttp", "httpx"):
        p = procs.spawn(
            [PY, __file__, "--role", "clientbench", "--client", kind, "--url", url],
            stdout=subprocess.PIPE,
        )
        out, _ = p.communicate(timeout=120)
        results[kind] = json.loads(out)
    keys = list(results["sardeenz"])
    print(f"{'':24}" + "".join(f"{k:>12}" for k in results))
    for k in keys:
        print(f"{k:24}" + "".join(f"{results[c][k]:12.1f}" for c in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--role", default="main", choices=["main", "upstream", "floor", "loadgen", "clientbench"]
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--events", type=int, default=32, help="SSE events per stream")
    parser.add_argument("--itl-ms", type=float, default=20.0, help="fast upstream inter-event gap")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fast upstream JSON delay")
    parser.add_argument("--upstream", choices=["fast", "sim"], default="fast")
    parser.add_argument("--proxy", choices=["auto", "serve", "standalone"], default="auto")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--c1-requests", type=int, default=500)
    parser.add_argument("--c64-seconds", type=float, default=2.0)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument(
        "--sustain-seconds",
        type=float,
        default=3.0,
        help="length of the sustained phase (--streams kept open at all times)",
    )
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument(
        "--node",
        action="store_true",
        help="also measure the whole sardeenz serve, in front of the upstream through an "
        "engine: external catalog entry",
    )
    parser.add_argument(
        "--upstream-url",
        default="",
        help="any OpenAI-compatible server (http://host:port) instead of the fixed upstream",
    )
    parser.add_argument("--model", default="", help="the model name requests carry")
    parser.add_argument("--clients", action="store_true", help="also run aiohttp vs httpx")
    parser.add_argument("--client", default="aiohttp")
    parser.add_argument("--url", default="")
    args = parser.parse_args()
    if args.model:
        os.environ["SARDEENZ_BENCH_MODEL"] = args.model  # the children read it too
        globals()["MODEL"] = args.model
    if args.role == "upstream":
        run_upstream(args.port, args.events, args.itl_ms, args.latency_ms)
    elif args.role == "floor":
        run_floor(args.port)
    elif args.role == "loadgen":
        import uvloop

        uvloop.run(_loadgen())
    elif args.role == "clientbench":
        import uvloop

        print(json.dumps(uvloop.run(_client_bench(args.client, args.url))))
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
