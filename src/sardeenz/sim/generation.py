"""Generation in the simulated engine: admission, token timing, SSE streaming, stats.

This is the hot path of proxy benchmarks (hundreds of concurrent streams), so a
request is a slotted ``Gen`` and a stream is pre-serialised byte templates filled in
on an absolute schedule. ``max_tokens`` tokens exactly (``finish_reason="length"``),
or 16 and ``"stop"`` without it (a simulated EOS); the first token comes ``--ttft-ms``
after the request is admitted, then one every ``--itl-ms``. There is no scheduler
limit on concurrency. While the engine sleeps, new requests wait (``admitting``) and
generation in flight pauses (``awake``); both events are cleared by
:mod:`sardeenz.sim.sleep`, which, like vLLM's ``/sleep?mode=abort`` (the default since
vLLM's pause modes), first aborts the requests in flight (``abort_all``): a stream
then ends with a chunk whose ``finish_reason`` is ``"abort"`` and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Final

import orjson

from sardeenz.asgi import Receive, Send
from sardeenz.sim.args import SimConfig
from sardeenz.sim.logwriter import VllmLog
from sardeenz.sim.memory import MemoryPlan
from sardeenz.sim.metrics import SimMetrics
from sardeenz.sim.text import token_bytes
from sardeenz.sim.wire import DONE, SSE_START

__all__ = ["Gen", "Scheduler", "clock", "usage_json"]

_STATS_INTERVAL_SECONDS: Final = 10.0
EARLY_TOLERANCE_SECONDS: Final = 0.001
"""A token due within 1 ms is sent now: uvloop timers have millisecond resolution."""

clock: Final = time.monotonic
"""The generation's clock: when a request arrived, was admitted, is due a token.

Not ``loop.time()``: uvloop's counts whole milliseconds and its timers round their
delay to one, so a first token due ``--ttft-ms`` after admission by that clock could
reach the client up to a millisecond and a half sooner. By this clock the first token
is never early: a timer that fires before its time is slept again.
"""


class Gen:
    """One generation request's bookkeeping (slots: hot path)."""

    __slots__ = (
        "aborted",
        "admitted",
        "admitted_at",
        "complete",
        "disconnected",
        "emitted",
        "factor",
        "finish_reason",
        "finished",
        "max_tokens",
        "prompt_tokens",
        "rid",
        "t0",
    )

    def __init__(
        self, rid: str, prompt_tokens: int, max_tokens: int, finish_reason: str, t0: float
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.finish_reason = finish_reason
        self.t0 = t0
        self.admitted = False
        self.admitted_at = t0
        self.emitted = 0
        self.complete = False
        """The response is (about to be) complete: a disconnect now is not an abort."""
        self.finished = False
        """Metrics were recorded (exactly once per request)."""
        self.disconnected = False
        self.factor = 1.0
        """How many times slower than ``--ttft-ms``/``--itl-ms`` it runs (first after a wake)."""
        self.aborted = False
        """Aborted by the engine (a sleep with ``mode=abort``), not by its client."""


def usage_json(gen: Gen) -> bytes:
    """The OpenAI ``usage`` object of a request (all of ``max_tokens`` is generated)."""
    return orjson.dumps(
        {
            "prompt_tokens": gen.prompt_tokens,
            "total_tokens": gen.prompt_tokens + gen.max_tokens,
            "completion_tokens": gen.max_tokens,
        }
    )


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any], gen: Gen) -> None:
    """Cancel the request's task as soon as its client disconnects (vLLM aborts it too).

    uvicorn also answers ``http.disconnect`` once the response is complete, so a
    completed request (``gen.complete``) is left alone.
    """
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not gen.complete:
                gen.disconnected = True
                task.cancel()
            return


class Scheduler:
    """The simulated engine's scheduler state and the timing of every generation."""

    def __init__(self, cfg: SimConfig, plan: MemoryPlan, log: VllmLog, metrics: SimMetrics) -> None:
        self.cfg = cfg
        self.plan = plan
        self.log = log
        self.metrics = metrics
        self.dead = False
        """The EngineCore died: requests fail like vLLM's do then."""
        self.inflight = 0
        self.running = 0
        self.waiting = 0
        self.kv_reserved = 0
        self.tokens_prompt_window = 0
        self.tokens_gen_window = 0
        self.awake = asyncio.Event()
        self.awake.set()
        self.admitting = asyncio.Event()
        """Cleared while the engine sleeps or falls asleep: new requests wait."""
        self.admitting.set()
        self.cold = False
        """Woken up and not served since: the next request admitted runs slower."""
        self._tasks: dict[Gen, asyncio.Task[Any]] = {}

    def abort_all(self) -> int:
        """Abort every request in flight (vLLM's pause ``mode=abort``); returns how many."""
        n = 0
        for gen, task in list(self._tasks.items()):
            if not gen.complete and not gen.aborted:
                gen.aborted = True
                task.cancel()
                n += 1
        return n

    async def serve(self, receive: Receive, send: Send, gen: Gen, work: Awaitable[None]) -> None:
        """Run one generation, aborting it (vLLM-style) if the client disconnects."""
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, task, gen))
        self.inflight += 1
        self._tasks[gen] = task
        try:
            await work
            self.finish(gen, gen.finish_reason)
        except asyncio.CancelledError:
            self.finish(gen, "abort")
            self.log.api("async_llm.py:434", f"Aborted request {gen.rid}.")
            if gen.disconnected and task.uncancel() == 0:
                return  # our own cancellation: the client is gone, nothing to re-raise
            raise
        finally:
            gen.complete = True
            watcher.cancel()
            self.inflight -= 1
            self._tasks.pop(gen, None)

    async def admit(self, gen: Gen) -> None:
        """Queue while asleep (vLLM keeps requests waiting), then reserve KV and run."""
        if not self.admitting.is_set():
            self.waiting += 1
            self.metrics.waiting.set(self.waiting)
            try:
                await self.admitting.wait()
            finally:
                self.waiting -= 1
                self.metrics.waiting.set(self.waiting)
        gen.admitted = True
        gen.admitted_at = clock()
        if self.cold:  # the first after a wake-up pays for cold caches (--wake-slowdown)
            self.cold = False
            gen.factor = self.cfg.wake_slowdown
            self.metrics.slow_after_wake.inc()
        self.running += 1
        self.kv_reserved += gen.prompt_tokens + gen.max_tokens
        self.metrics.running.set(self.running)
        self.metrics.kv_usage.set(min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens)))

    def finish(self, gen: Gen, reason: str) -> None:
        if gen.finished:
            return
        gen.finished = True
        m = self.metrics
        if gen.admitted:
            self.running -= 1
            self.kv_reserved -= gen.prompt_tokens + gen.max_tokens
            m.running.set(self.running)
            m.kv_usage.set(min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens)))
            m.prompt_tokens.inc(gen.prompt_tokens)
            self.tokens_prompt_window += gen.prompt_tokens
        if gen.emitted:
            m.generation_tokens.inc(gen.emitted)
            self.tokens_gen_window += gen.emitted
        m.success[reason].inc()
        if reason != "abort":
            m.e2e.observe(clock() - gen.t0)

    async def paused(self) -> float:
        """Wait out a sleep of the engine; returns how long generation was paused."""
        start = clock()
        await self.awake.wait()
        return clock() - start

    async def stream(
        self,
        send: Send,
        gen: Gen,
        lead: bytes,
        prefix: bytes,
        suffix: bytes,
        final: bytes,
        usage_head: bytes | None,
    ) -> None:
        """SSE: first chunk after TTFT, then one per ITL, on an absolute schedule.

        Tokens already due are written in one ``send`` (as a busy real server does), so
        timer jitter or a slow client never makes the stream drift or fall behind.
        """
        await send(SSE_START)
        try:
            parts = await self._tokens(send, gen, lead, prefix, suffix)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not gen.aborted or task is None or task.uncancel():
                raise
            # Aborted by the engine: vLLM ends the stream with finish_reason "abort".
            parts = []
            old = b'"finish_reason":"' + gen.finish_reason.encode() + b'"'
            final = final.replace(old, b'"finish_reason":"abort"')
            gen.finish_reason = "abort"
        parts.append(final)
        if usage_head is not None:
            parts.append(
                b"data: " + usage_head + b',"choices":[],"usage":' + usage_json(gen) + b"}\n\n"
            )
        parts.append(DONE)
        gen.complete = True
        await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})

    async def _tokens(
        self, send: Send, gen: Gen, lead: bytes, prefix: bytes, suffix: bytes
    ) -> list[bytes]:
        """Admission and the token chunks of a stream; returns the last chunks, unsent."""
        await self.admit(gen)
        n = gen.max_tokens
        tokens = token_bytes(n)
        itl = self.cfg.itl_s * gen.factor
        due = gen.admitted_at + self.cfg.ttft_s * gen.factor
        emitted = 0
        while True:
            if not self.awake.is_set():
                due += await self.paused()
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            now = clock()
            if emitted:
                now += EARLY_TOLERANCE_SECONDS
            elif due > now:
                continue
            parts: list[bytes] = []
            if not emitted:
                self.metrics.ttft.observe(now - gen.t0)
                if lead:
                    parts.append(lead)
            while emitted < n and due <= now:
                parts.append(prefix + tokens[emitted] + suffix)
                emitted += 1
                due += itl
            gen.emitted = emitted
            if emitted >= n:
                return parts
            if parts:
                await send(
                    {"type": "http.response.body", "body": b"".join(parts), "more_body": True}
                )

    async def generate(self, gen: Gen) -> None:
        """A non-streamed generation: ``ttft + itl * (n - 1)`` of awake time.

        On cancellation (client gone) ``gen.emitted`` counts the tokens that would have
        been generated by then, for the metrics.
        """
        n = gen.max_tokens
        ttft, itl = self.cfg.ttft_s, self.cfg.itl_s
        start = clock() + ttft  # until admitted: nothing generated yet
        try:
            await self.admit(gen)
            start = gen.admitted_at
            ttft, itl = ttft * gen.factor, itl * gen.factor
            deadline = start + ttft + itl * (n - 1)
            while True:
                delay = deadline - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue  # a timer may fire early: not done before the deadline
                if self.awake.is_set():
                    break
                paused = await self.paused()
                deadline += paused
                start += paused
        except asyncio.CancelledError:
            elapsed = clock() - start - ttft
            gen.emitted = 0 if elapsed < 0 else min(n, int(elapsed / itl) + 1 if itl else n)
            task = asyncio.current_task()
            if not gen.aborted or task is None or task.uncancel():
                raise
            gen.finish_reason = "abort"  # the reply says so, as vLLM's does
            return
        gen.emitted = n
        self.metrics.ttft.observe(gen.admitted_at - gen.t0 + ttft)

    async def stats_loop(self) -> None:
        """vLLM's 10-second throughput line, only while there is something to report."""
        while True:
            await asyncio.sleep(_STATS_INTERVAL_SECONDS)
            if not (
                self.tokens_prompt_window or self.tokens_gen_window or self.running or self.waiting
            ):
                continue
            usage = 100 * min(1.0, self.kv_reserved / max(1, self.plan.kv_tokens))
            self.log.api(
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: "
                f"{self.tokens_prompt_window / _STATS_INTERVAL_SECONDS:.1f} tokens/s, "
                f"Avg generation throughput: "
                f"{self.tokens_gen_window / _STATS_INTERVAL_SECONDS:.1f} tokens/s, "
                f"Running: {self.running} reqs, Waiting: {self.waiting} reqs, "
                f"GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 0.0%",
            )
            self.tokens_prompt_window = 0
            self.tokens_gen_window = 0
