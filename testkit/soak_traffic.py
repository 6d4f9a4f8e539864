"""The soak's steady traffic: OpenAI requests, streamed and not, to several models, each
one judged by how it ended (testkit/soak.py runs it; docs/testing.md, "The soak").

Every request has a deadline. It ends one of four ways:

* ``ok``: 200 and a whole answer (a stream: content, a ``finish_reason`` and ``[DONE]``);
* ``error``: a clean OpenAI-shaped error (a status >= 400 with ``{"error": {"message",
  "type", "code"}}``, or a stream whose last event is such an error) - counted by code;
* ``broken``: anything else (a connection dropped, a stream cut without its final
  event, a body that is not an OpenAI error) - allowed only for a request in flight on
  a pod or an engine that a fault killed or stopped while it ran;
* ``hang``: no end within the deadline - the same.

The invariant (every request answered) is checked by the soak against the fault windows.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

DEADLINE = 30.0
"""Seconds a request may take before it counts as hung (a wake or an on-demand start
of a sim engine takes a few seconds; a held request waits at most the proxy's wait)."""


@dataclass
class Outcome:
    model: str
    stream: bool
    entry: str
    started: float
    ended: float = 0.0
    kind: str = "ok"
    """ok | error | broken | hang"""
    detail: str = ""


@dataclass
class TrafficLog:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    def by_detail(self, kind: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            if o.kind == kind:
                key = o.detail.split(":", 1)[0]
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _openai_error(body: object) -> str | None:
    """The error's code if ``body`` is an OpenAI error object, else None."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return None
    if "type" not in err or "code" not in err:
        return None
    return str(err.get("code") or err.get("type"))


async def _send(session: aiohttp.ClientSession, url: str, out: Outcome, tokens: int) -> None:
    body = {
        "model": out.model,
        "messages": [{"role": "user", "content": "soak"}],
        "max_tokens": tokens,
        "stream": out.stream,
    }
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            raw = await resp.read()
            try:
                code = _openai_error(json.loads(raw))
            except ValueError:
                code = None
            if code is None:
                out.kind, out.detail = "broken", f"HTTP {resp.status} not an OpenAI error"
                out.detail += f": {raw[:120]!r}"
            else:
                out.kind, out.detail = "error", f"{code} ({out.model}): HTTP {resp.status}"
            return
        if not out.stream:
            data = await resp.json()
            if not data.get("choices"):
                out.kind, out.detail = "broken", f"200 without choices: {str(data)[:120]}"
            return
        done = finished = False
        async for raw_line in resp.content:
            line = raw_line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            code = _openai_error(chunk)
            if code is not None:
                out.kind, out.detail = "error", f"{code} ({out.model}): in the stream"
                return
            choice = (chunk.get("choices") or [{}])[0]
            if choice.get("finish_reason"):
                finished = True
        if not (done and finished):
            out.kind, out.detail = "broken", f"stream ended without its final event ({done=})"


async def one_request(
    session: aiohttp.ClientSession, url: str, entry: str, model: str, stream: bool, tokens: int
) -> Outcome:
    out = Outcome(model, stream, entry, time.monotonic())
    try:
        async with asyncio.timeout(DEADLINE):
            await _send(session, url, out, tokens)
    except TimeoutError:
        out.kind, out.detail = "hang", f"no end in {DEADLINE:g}s"
    except (aiohttp.ClientError, ValueError) as exc:
        out.kind, out.detail = "broken", f"{type(exc).__name__}: {exc}"[:200]
    out.ended = time.monotonic()
    return out


async def run_traffic(
    rng: random.Random,
    clients: int,
    pick_entry: Callable[[], tuple[str, str] | None],
    pick_model: Callable[[], str],
    stop: asyncio.Event,
    log: TrafficLog,
) -> None:
    """``clients`` loops, each sending one request after the other until ``stop``.

    ``pick_entry`` gives (pod, url) of a pod that is up (None: wait), ``pick_model`` the
    model; half the requests stream. Randomness comes from ``rng`` (the soak's seed).
    """
    conn = aiohttp.TCPConnector(limit=clients * 2, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def client(seed: int) -> None:
            mine = random.Random(seed)
            while not stop.is_set():
                entry = pick_entry()
                if entry is None:
                    await asyncio.sleep(0.2)
                    continue
                pod, url = entry
                model = pick_model()
                stream = mine.random() < 0.5
                log.outcomes.append(
                    await one_request(session, url, pod, model, stream, mine.randint(4, 24))
                )
                await asyncio.sleep(mine.uniform(0.0, 0.2))

        await asyncio.gather(*(client(rng.randrange(2**32)) for _ in range(clients)))
