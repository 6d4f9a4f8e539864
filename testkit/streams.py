"""Concurrent streaming clients for the move test and benchmarks/move.py.

Each client sends streaming chat completions one after another (aiohttp, one
connection pool) until told to stop, and checks every stream: status 200, the
exact number of content chunks asked for (the sim engine generates exactly
``max_tokens``), a ``finish_reason`` and the final ``[DONE]``. Arrival times of
the chunks are kept per stream so the benchmark can measure gaps.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp


@dataclass
class Stream:
    started: float
    chunks: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class Load:
    streams: list[Stream] = field(default_factory=list)
    flowing: set[int] = field(default_factory=set)
    """The clients (by index) that have had a first token: their traffic is under way."""

    async def until_flowing(self, clients: int, within: float) -> None:
        """Until each of ``clients`` clients has had a first token (not a fixed sleep:
        on a busy machine the staggered starts take longer)."""
        deadline = time.monotonic() + within
        while len(self.flowing) < clients:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.flowing)} of {clients} clients had a stream under way "
                    f"within {within}s (a first token)"
                )
            await asyncio.sleep(0.02)

    @property
    def ok(self) -> list[Stream]:
        return [s for s in self.streams if s.error is None]

    @property
    def failed(self) -> list[Stream]:
        return [s for s in self.streams if s.error is not None]

    def gaps(self, start: float, end: float) -> list[float]:
        """Every inter-token gap (per stream) that ends inside ``[start, end]``."""
        out: list[float] = []
        for s in self.ok:
            pairs = zip(s.chunks, s.chunks[1:], strict=False)
            out.extend(b - a for a, b in pairs if start <= b <= end)
        return out

    def first_token_waits(self, start: float, end: float) -> list[float]:
        firsts = [(s.started, s.chunks[0]) for s in self.ok if s.chunks]
        return [t - t0 for t0, t in firsts if start <= t <= end]


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    tokens: int,
    on_first_token: Callable[[], None] | None = None,
) -> Stream:
    stream = Stream(started=time.monotonic())
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
        "stream": True,
    }
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                stream.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return stream
            done = finished = False
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    stream.error = f"error chunk: {chunk['error']}"
                    return stream
                choice = (chunk.get("choices") or [{}])[0]
                if choice.get("delta", {}).get("content"):
                    stream.chunks.append(time.monotonic())
                    if on_first_token is not None and len(stream.chunks) == 1:
                        on_first_token()
                if choice.get("finish_reason"):
                    finished = True
            if not (done and finished and len(stream.chunks) == tokens):
                stream.error = f"incomplete: {len(stream.chunks)}/{tokens}, done={done}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        stream.error = f"{type(exc).__name__}: {exc}"
    return stream


async def run_clients(
    url: str,
    model: str,
    clients: int,
    stop: asyncio.Event,
    tokens: int,
    load: Load,
    stagger: float = 1.0,
) -> None:
    """``clients`` loops of streaming requests until ``stop``; each ends its stream first.

    Starts are spread over ``stagger`` s and lengths over ``tokens`` +-25 %, so that
    streams begin and end at every moment (not all in step, which would leave
    instants with nothing in flight).
    """
    conn = aiohttp.TCPConnector(limit=clients + 8)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def client(i: int) -> None:
            await asyncio.sleep(stagger * i / clients)
            length = max(1, tokens + (i % 11 - 5) * tokens // 20)
            while not stop.is_set():
                load.streams.append(
                    await _one(session, url, model, length, lambda: load.flowing.add(i))
                )

        await asyncio.gather(*(client(i) for i in range(clients)))


async def burst(url: str, model: str, count: int, tokens: int) -> list[Stream]:
    """``count`` streams sent at once on fresh connections (a new pool): checked as above."""
    conn = aiohttp.TCPConnector(limit=count + 8)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        sent = (_one(session, url, model, tokens) for _ in range(count))
        return list(await asyncio.gather(*sent))


async def side_by_side(url: str, tokens: Mapping[str, int], count: int) -> dict[str, list[Stream]]:
    """``count`` streams of each model of ``tokens`` (model: tokens per stream) sent at
    once on one new pool, interleaved (one of each model in turn), checked as above: by
    model.

    One model's burst is then the reference for another's, measured against the same
    machine at the same moment: on two cores shared by four test workers, one burst in
    several is 3-5x slower than the bursts just before and after it, whichever instance
    it goes to. A reference given more tokens is still streaming when the other burst
    ends, so a stall of the machine at any moment of that burst shows in both.

    The client's garbage collector is off while the streams run: a full collection
    pauses this process (71 ms was measured in a small client on a busy machine), which
    would be read as a stall of whichever streams were waiting for a chunk then.
    """
    conn = aiohttp.TCPConnector(limit=count * len(tokens) + 8)
    timeout = aiohttp.ClientTimeout(total=60)
    models = list(tokens)
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            sent = (_one(session, url, m, tokens[m]) for _ in range(count) for m in models)
            got = list(await asyncio.gather(*sent))
    finally:
        if collecting:
            gc.enable()
    return {model: got[i :: len(models)] for i, model in enumerate(models)}
