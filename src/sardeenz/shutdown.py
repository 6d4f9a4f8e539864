"""A shutdown an operator can see through, and one that always ends.

A node's shutdown is a chain of about twenty-five awaited stops. When one of them
waits on something that never comes, the process just stays: the orchestrator's
SIGKILL ends it later with nothing in the log to say which step held it. So each step
is named: one still running after ``SLOW_SECONDS`` is logged with how long it has
waited, again every ``SLOW_SECONDS``; and ``sardeenz serve`` arms a last-resort timer
when its exit is asked for, which dumps every thread's stack to stderr and exits 1 if
the process is still there after its budget (what is left once the event loop has
stopped, such as a thread that never returns, is outside the steps' view).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["SLOW_SECONDS", "Step", "arm_exit_watchdog", "exit_budget_seconds", "run_steps"]

log = logging.getLogger("sardeenz.shutdown")

SLOW_SECONDS = 5.0
"""A step still running after this long is logged (and again at each multiple)."""

Step = tuple[str, Callable[[], Awaitable[object]]]
"""A step's name, for the log, and the stop it awaits."""


async def run_steps(steps: Sequence[Step], slow: float = SLOW_SECONDS) -> None:
    """Await each step in order; a step that fails is logged and the next one runs
    (a failed stop must not leave the others' engines and files behind)."""
    loop = asyncio.get_running_loop()
    for name, stop in steps:
        started = loop.time()
        task = asyncio.ensure_future(stop())
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=slow)
                if done:
                    break
                log.warning(
                    "shutdown: still waiting for %s after %.0f s", name, loop.time() - started
                )
            task.result()
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:
            log.exception("shutdown: %s failed; going on with the next step", name)


def exit_budget_seconds(stop_grace_seconds: float, graceful_seconds: float) -> float:
    """How long an asked-for exit may take: uvicorn's graceful close, then each engine's
    drain and its SIGTERM-to-SIGKILL grace (engines stop side by side), and room for the
    rest of the steps."""
    return graceful_seconds + 2 * stop_grace_seconds + 30.0


def arm_exit_watchdog(seconds: float) -> None:
    """From now, a process still running after ``seconds`` dumps every thread's stack to
    stderr and exits 1. Only for a process that is exiting: the timer ends it."""
    log.info("shutdown: the process ends within %g s (else a stack dump, exit 1)", seconds)
    faulthandler.dump_traceback_later(seconds, exit=True)
