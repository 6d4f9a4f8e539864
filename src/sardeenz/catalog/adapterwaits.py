"""What waiting requests for a LoRA adapter are answered with, and when they look again.

* **Failures**: a load the engine refused answers every waiter with vLLM's reason and
  status (code ``adapter_load_failed``), and new requests get the same answer for
  ``ondemand_failure_hold_seconds`` rather than each asking the engine again.
* **Room**: a request that found no slot it can use (every slot serving requests,
  or its adapter's slot changing hands) waits for the slot book's next change
  (a load or an unload ended, a request ended, an instance came or left), with a
  generation counter so that a change it did not see yet wakes it at once.
* The not-ready and no-room answers (OpenAI-shaped 503s with ``Retry-After``).

Used by ``catalog.adapters``; all on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math

from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.replies import not_ready
from sardeenz.proxy.wire import ErrorReply
from sardeenz.tasks import await_within

log = logging.getLogger(__name__)

__all__ = ["Failures", "Room", "no_room", "timed_out"]


class Failures:
    def __init__(self, hold: float) -> None:
        self._hold = hold
        self._recent: dict[str, tuple[float, ErrorReply]] = {}

    def record(self, name: str, status: int, message: str) -> ErrorReply:
        """The engine refused to load ``name``: the answer for its waiters, held."""
        STATS.adapter(name, "load_failed")
        status = status if 400 <= status < 600 else 502
        retry = str(max(1, math.ceil(self._hold))).encode()
        reply = ErrorReply(
            status,
            f"LoRA adapter {name!r} could not be loaded: {message}",
            "invalid_request_error" if status < 500 else "api_error",
            "adapter_load_failed",
            headers=[(b"retry-after", retry)],
        )
        self._recent[name] = (asyncio.get_running_loop().time(), reply)
        log.warning("adapter %s could not be loaded: %s", name, message)
        return reply

    def recent(self, name: str, now: float) -> ErrorReply | None:
        """The held answer of a failed load of ``name``, if within the hold."""
        failure = self._recent.get(name)
        if failure is None:
            return None
        if now - failure[0] >= self._hold:
            del self._recent[name]
            return None
        return failure[1]


class Room:
    """Wakes the requests waiting for a slot of an adapter's base to change.

    A generation counter, bumped by every ``notify`` (the slot book calls it on every
    change a waiter may be waiting for, ``AdapterLoader`` wires it): a request reads
    ``generation`` *before* it looks at the slots and hands it to ``wait``, which
    returns at once if anything changed since. So a change between the look and the
    wait (a request ending while the waiter was still on its way, nobody waiting
    yet) is never lost, and no waiter needs to poll. Otherwise it waits for the next
    ``notify``: one event per generation, set and replaced, so every waiter wakes once.
    """

    def __init__(self) -> None:
        self.generation = 0
        self._next: asyncio.Event | None = None

    async def wait(self, remaining: float, seen: int) -> bool:
        """True once the generation has moved past ``seen`` (at once if it has already);
        False after ``remaining`` seconds without a change."""
        if self.generation != seen:
            return True
        if remaining <= 0:
            return False
        if self._next is None:
            self._next = asyncio.Event()
        try:
            await await_within(self._next.wait(), remaining)
            return True
        except TimeoutError:
            return False

    def notify(self) -> None:
        """A slot changed: every waiter looks again, and so does one about to wait."""
        self.generation += 1
        event, self._next = self._next, None
        if event is not None:
            event.set()


def timed_out(name: str, max_wait: float) -> ErrorReply:
    return not_ready(f"LoRA adapter {name!r}", "not loaded yet", max_wait)


def no_room(name: str) -> ErrorReply:
    return ErrorReply(
        503,
        f"LoRA adapter {name!r} has no free slot: every adapter slot of its base's "
        "instances is serving requests; retry later",
        "service_unavailable_error",
        "adapter_slots_busy",
        headers=[(b"retry-after", b"2")],
    )
