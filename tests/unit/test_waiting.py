"""``testkit.waiting``: the tests' one way to wait, whose timeout says what it waited for."""

from __future__ import annotations

import asyncio
import time

import pytest

from testkit.waiting import wait_until, within


def test_a_check_that_holds_returns_at_once() -> None:
    calls: list[int] = []

    def holds() -> bool:
        calls.append(1)
        return True

    t0 = time.monotonic()
    wait_until(holds, "nothing", 10, interval=5)
    assert calls == [1]
    assert time.monotonic() - t0 < 1  # not one interval slept


def test_a_check_is_polled_until_it_holds() -> None:
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) == 3

    wait_until(third_time, "the third call", 5, interval=0.001)
    assert len(calls) == 3


def test_a_wait_that_runs_out_names_what_it_waited_for() -> None:
    calls: list[int] = []

    def never() -> bool:
        calls.append(1)
        return False

    t0 = time.monotonic()
    with pytest.raises(AssertionError) as caught:
        wait_until(never, "the moon turned blue", 0.05, interval=0.01)
    assert str(caught.value) == "not within 0.05 s: the moon turned blue"
    assert time.monotonic() - t0 >= 0.05
    assert len(calls) >= 2  # polled, and asked once more at the end


async def test_within_returns_the_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await within(answer(), 5, "the answer") == 42


async def test_within_names_what_it_waited_for_and_cancels_it() -> None:
    waiter = asyncio.ensure_future(asyncio.Event().wait())
    with pytest.raises(TimeoutError, match=r"^not within 0\.01 s: an event nobody sets$") as caught:
        await within(waiter, 0.01, "an event nobody sets")
    assert isinstance(caught.value.__cause__, TimeoutError)  # the bound's own, kept
    assert waiter.cancelled()


async def test_the_awaitables_own_timeout_is_not_blamed_on_the_bound() -> None:
    async def gives_up() -> None:
        raise TimeoutError("the peer did not answer")

    with pytest.raises(TimeoutError, match=r"^the peer did not answer$"):
        await within(gives_up(), 5, "the call")


async def test_a_cancellation_of_the_caller_is_not_lost() -> None:
    """The event and the cancellation land in the same step: Python 3.11's ``wait_for``
    would return and the caller go on (here: into a minute's sleep)."""
    event = asyncio.Event()
    after: list[int] = []

    async def caller() -> None:
        await within(event.wait(), 60, "the event")
        after.append(1)
        await asyncio.sleep(60)

    task = asyncio.create_task(caller())
    await asyncio.sleep(0)  # the caller is waiting
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1)
    assert task in done, "the caller still runs: its cancellation was lost"
    assert task.cancelled()
    assert after == []
