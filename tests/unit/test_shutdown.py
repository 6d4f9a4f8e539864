"""The shutdown's steps (sardeenz.shutdown): in order, a slow one named in the log while it
waits, a failed one not stopping the rest; and the exit watchdog in a real process."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest

from sardeenz.shutdown import exit_budget_seconds, run_steps
from testkit.waiting import within


async def test_steps_run_in_order_and_a_failure_does_not_stop_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    async def ok(name: str) -> None:
        ran.append(name)

    async def broken() -> None:
        ran.append("broken")
        raise RuntimeError("disk gone")

    await run_steps([("a", lambda: ok("a")), ("b", broken), ("c", lambda: ok("c"))])
    assert ran == ["a", "broken", "c"]
    assert "shutdown: b failed; going on with the next step" in caplog.text


async def test_a_step_still_running_is_named_in_the_log_until_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The step ends only once its wait has been logged twice: no clock in the assertion."""
    logged = asyncio.Event()
    count = 0

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            nonlocal count
            if "still waiting for engines" in record.getMessage():
                count += 1
                if count == 2:
                    logged.set()

    handler = Seen()
    logging.getLogger("sardeenz.shutdown").addHandler(handler)
    try:
        await within(
            run_steps([("engines", logged.wait)], slow=0.01), 10, "the step, logged twice as slow"
        )
    finally:
        logging.getLogger("sardeenz.shutdown").removeHandler(handler)
    assert count == 2


async def test_a_cancelled_shutdown_cancels_the_running_step() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hangs() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    runner = asyncio.ensure_future(run_steps([("hangs", hangs)]))
    await within(started.wait(), 5, "the hanging step started")
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    await within(cancelled.wait(), 5, "the running step cancelled")


def test_the_budget_covers_the_graceful_close_and_two_engine_graces() -> None:
    assert exit_budget_seconds(20, 5) == 5 + 40 + 30
    assert exit_budget_seconds(5, 5) == 45


def test_an_exit_that_hangs_ends_with_a_stack_dump_and_exit_1() -> None:
    """A real process that arms the watchdog and then never returns."""
    code = (
        "import logging, time\n"
        "from sardeenz.shutdown import arm_exit_watchdog\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "arm_exit_watchdog(0.5)\n"
        "def stuck_in_a_thread_join():\n"
        "    time.sleep(60)\n"
        "stuck_in_a_thread_join()\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 1
    assert time.monotonic() - started < 30  # the process ended itself, long before 60 s
    assert "the process ends within 0.5 s" in done.stderr
    assert "Timeout (0:00:00.500000)!" in done.stderr
    assert "stuck_in_a_thread_join" in done.stderr  # the stack says where it hung
