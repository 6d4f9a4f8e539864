"""testkit's ThreadedProxyServer owns what tests start on its loop."""

from __future__ import annotations

import asyncio
import threading

from sardeenz.config import Settings
from testkit.proxy import ThreadedProxyServer


def test_stopping_cancels_what_tests_left_on_the_loop_and_runs_its_cleanup() -> None:
    # An engine's connection handler waiting for a next request that never comes, as
    # a keep-alive connection leaves one: stopping the server must cancel it, its
    # ``finally`` run, not destroy it pending with the loop.
    cleaned = threading.Event()
    started = threading.Event()

    async def handler() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    async def leave_running() -> None:
        asyncio.get_running_loop().create_task(handler())

    server = ThreadedProxyServer(Settings()).start()
    server.run(leave_running())
    assert started.wait(5), "the handler never started on the server's loop"
    server.stop()
    assert cleaned.is_set(), "the handler left on the loop was not cancelled at stop"
