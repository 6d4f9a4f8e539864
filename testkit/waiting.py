"""Waiting in tests, with a bound that says what was waited for.

A test that waits on something fails, when the bound runs out, with a message naming
what did not happen ("not within 20 s: nap1 listed sleeping"), not with a bare
``TimeoutError`` or an assertion of ``False``. One way to do it, whatever the test:

* ``wait_until``: poll a condition (a thread, another process, a server's API);
* ``within``: await an awaitable under ``asyncio.timeout``, as
  ``sardeenz.tasks.await_within`` does (so, unlike Python 3.11's ``asyncio.wait_for``,
  a cancellation of the waiting test is never lost).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, interval: float = 0.05
) -> None:
    """Poll ``check`` every ``interval`` seconds until it holds (at once if it already
    does); ``AssertionError`` naming ``what`` if it still does not after ``timeout``
    seconds (it is asked once more at the end)."""
    deadline = time.monotonic() + timeout
    while not check():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(min(interval, left))


async def within(awaitable: Awaitable[T], seconds: float, what: str) -> T:
    """The result of ``awaitable`` if it ends within ``seconds``; else it is cancelled
    and ``TimeoutError`` naming ``what`` is raised from the bound's own.

    A ``TimeoutError`` the awaitable raises itself passes through unchanged: the
    message must not blame a wait whose bound did not expire.
    """
    bound = asyncio.timeout(seconds)
    try:
        async with bound:
            return await awaitable
    except TimeoutError as exc:
        if not bound.expired():
            raise
        raise TimeoutError(f"not within {seconds} s: {what}") from exc
