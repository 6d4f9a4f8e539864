"""The adapter waiting room never loses a wake-up (catalog/adapterwaits.py ``Room``).

A request for a LoRA adapter that finds no usable slot looks at the slot book, then
waits for it to change. Between the look and the wait it may yield (its load attempt
ends in another task, it asked the base for an instance): a slot that frees then, while
nobody is waiting yet, must still wake it. Before the generation counter, the loader
notified only when someone was already waiting, so such a request slept until its
deadline and was answered 503 ``adapter_slots_busy`` with a slot free.
"""

from __future__ import annotations

import asyncio

from sardeenz.catalog.adapterslots import SlotBook
from sardeenz.catalog.adapterwaits import Room
from testkit.waiting import within


async def test_a_change_between_the_look_and_the_wait_wakes_the_waiter_at_once() -> None:
    room = Room()
    book = SlotBook(on_change=room.notify)
    book.add_instance("i", 1)
    reservation = book.reserve("busy", ["i"], 0.0)
    assert reservation is not None
    assert book.loaded("i", "busy", 0.0, holds=1)  # its only slot serves a request

    seen = room.generation  # the waiter looks: no room ...
    assert book.reserve("wanted", ["i"], 1.0) is None
    await asyncio.sleep(0)  # ... yields on its way to the wait ...
    book.release("i", "busy", 2.0)  # ... and the request ends meanwhile: nobody waits yet
    # The wait must see that change at once, not sleep until its deadline.
    assert await within(room.wait(3600.0, seen), 5.0, "the wake-up by the missed release")
    assert book.reserve("wanted", ["i"], 3.0) is not None  # and now there is room


async def test_a_waiter_sleeps_until_the_next_change_and_every_waiter_wakes() -> None:
    room = Room()
    seen = room.generation
    waiters = [asyncio.create_task(room.wait(3600.0, seen)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)  # nothing changed: they wait
    room.notify()
    woken = await within(asyncio.gather(*waiters), 5.0, "every waiter woken by the notify")
    assert woken == [True] * 3


async def test_no_change_within_the_time_is_false() -> None:
    room = Room()
    assert not await room.wait(0.01, room.generation)
    assert not await room.wait(0.0, room.generation)
    seen = room.generation
    room.notify()
    assert await room.wait(0.0, seen)  # changed already: true even with no time left
