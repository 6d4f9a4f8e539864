"""The simulated engine never answers sooner than ``--ttft-ms`` after admission.

It runs on uvloop, whose ``loop.time()`` counts whole milliseconds and whose timers
round their delay to one: measured on that clock, a first token could come up to a
millisecond and a half early, and a proxy in front measured 119.99 ms for a 120 ms
engine.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from sardeenz.asgi import Message
from sardeenz.sim.args import parse_args
from sardeenz.sim.generation import Gen, Scheduler, clock
from sardeenz.sim.logwriter import VllmLog
from sardeenz.sim.memory import plan_memory
from sardeenz.sim.metrics import SimMetrics

TTFT = 0.02
REQUESTS = 20


def scheduler() -> Scheduler:
    args = ["--model", "m", "--port", "8000", "--ttft-ms", str(TTFT * 1000), "--itl-ms", "0"]
    cfg = parse_args(args)
    log = VllmLog(io.StringIO(), io.StringIO())
    return Scheduler(cfg, plan_memory(cfg.memory_gib, cfg.max_model_len), log, SimMetrics("m"))


async def ignore(message: Message) -> None:
    pass


def non_streamed(sched: Scheduler, gen: Gen) -> Awaitable[None]:
    return sched.generate(gen)


def streamed(sched: Scheduler, gen: Gen) -> Awaitable[None]:
    return sched.stream(ignore, gen, b"", b"", b"", b"", None)


@pytest.mark.parametrize("answer", [non_streamed, streamed])
def test_the_first_token_is_never_early_by_the_real_clock(
    answer: Callable[[Scheduler, Gen], Awaitable[None]],
) -> None:
    async def answer_times() -> list[float]:
        sched = scheduler()
        took = []
        for _ in range(REQUESTS):
            arrived = time.monotonic()
            await answer(sched, Gen("r", 1, 1, "length", clock()))
            took.append(time.monotonic() - arrived)
        return took

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        took = runner.run(answer_times())
    assert min(took) >= TTFT, f"a first token after {min(took) * 1000:.3f} ms (--ttft-ms 20)"
