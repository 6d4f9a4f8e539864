"""Slots per instance, and the fair queue of the requests that find them all taken.

Why: an engine given more requests than it runs at once queues them itself, first
come, first served, blind to who sent them: one tenant with a thousand requests
in flight makes everyone else wait behind them. So the proxy holds back what an
instance cannot start yet (``SARDEENZ_FAIR_SLOTS_PER_INSTANCE`` requests in flight
per routable instance of the model, counted on this pod) and lets the waiting
requests in by tenant weight and priority class, in the order
tenancy/fairqueue.py decides, as slots free up.

The express path (express.py) asks ``room`` (a dict lookup and two comparisons)
and, once it takes the request, ``take``; it never waits: a request that finds no
room, or finds others already waiting, goes to the handler, which ``join``s the
queue and ``wait``s for its turn, bounded by ``SARDEENZ_FAIR_QUEUE_WAIT_SECONDS``
(then 503 ``queue_timeout`` with ``Retry-After``); a full queue
(``SARDEENZ_FAIR_QUEUE_MAX``) answers 503 ``queue_full`` at once. With no slot
limit (the default) nothing here runs: ``on`` is False and both paths skip it.

While a model is saturated an ``interactive`` request of a tenant with nothing
waiting may use a little more than the slots (``SARDEENZ_FAIR_HEADROOM_PERCENT``):
waiting is for the tenants that saturate the model, and a quiet tenant's request
then starts at once instead of waiting for the next slot to free up.

A request for a model that is starting or asleep joins the queue before it waits
for the start or the wake (a model with no routable instance has no slot): when
the model comes up, the requests that were waiting for it are let in in queue
order, ahead of those that arrived after, whichever task wakes up first.
"""

from __future__ import annotations

import asyncio
import math
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from sardeenz.proxy.metrics import REGISTRY
from sardeenz.proxy.routing import InstanceView, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.tasks import await_within
from sardeenz.tenancy.fairqueue import INTERACTIVE, PRIORITIES, Entry, FairQueue, priority_index

PRIORITY_HEADER: Final = b"x-sardeenz-priority"
"""A request's priority class (``interactive`` or ``batch``); never above its tenant's."""
NO_TENANT: Final = "-"
"""The tenant label of callers of no tenant (no key, or a key of no tenant): one flow."""

QUEUED = Gauge(
    "sardeenz_fair_queue_length",
    "Requests waiting for a slot of a saturated model, by model and tenant",
    ["model", "tenant"],
    registry=REGISTRY,
)
WAITED = Histogram(
    "sardeenz_fair_queue_wait_seconds",
    "How long requests let in from the fair queue waited, by model and priority class",
    ["model", "priority"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
REFUSED = Counter(
    "sardeenz_fair_queue_rejected_requests",
    "Requests refused (503) by the fair queue, by model, tenant and reason "
    "(queue_full, queue_timeout)",
    ["model", "tenant", "reason"],
    registry=REGISTRY,
)


class Waiter(Entry):
    """A request of the handler while it waits for a slot, then while it holds one."""

    __slots__ = ("future", "gate", "holds", "joined", "model")

    def __init__(
        self, gate: ModelGate, model: str, tenant: str, weight: float, priority: int
    ) -> None:
        super().__init__(tenant, weight, priority)
        self.gate = gate
        self.model = model
        self.future: asyncio.Future[None] | None = None
        """Set when it had to wait: resolved when a slot is handed to it."""
        self.joined = 0.0
        self.holds = False
        """Holds a slot of the model, until ``leave``."""


class ModelGate:
    """One served name's slots in use and its queue (the express path keeps a reference)."""

    __slots__ = ("inflight", "model", "queue")

    def __init__(self, model: str, queue: FairQueue) -> None:
        self.model = model
        self.inflight = 0
        self.queue = queue


class FairGate:
    """The proxy's slots and fair queues, one ``ModelGate`` per served name; see module doc."""

    def __init__(
        self,
        table: RoutingTable,
        slots_per_instance: int,
        *,
        fair: bool = True,
        max_queue: int = 1000,
        max_wait: float = 30.0,
        headroom_percent: int = 0,
    ) -> None:
        self._table = table
        self.slots = slots_per_instance
        self.on = slots_per_instance > 0
        """The one attribute the express path reads when there is no slot limit."""
        self.fair = fair
        self.max_queue = max_queue
        self.max_wait = max_wait
        self.headroom = headroom_percent if fair else 0
        """Percent of the slots an interactive request of a tenant with nothing waiting may
        use beyond them (see ``join``); part of fair sharing, so none without it."""
        self._models: dict[str, ModelGate] = {}
        if self.on:
            table.add_listener(self._changed)

    # ---------------------------------------------------------- express path
    def room(self, model: str) -> ModelGate | None:
        """The model's gate when a request may go now (a free slot, nobody waiting)."""
        gate = self._models.get(model)
        if gate is None:
            gate = self._models[model] = ModelGate(model, FairQueue(self.max_queue, fair=self.fair))
        if gate.queue.length or gate.inflight >= self.slots * len(self._table.endpoints(model)):
            return None
        return gate

    @staticmethod
    def take(gate: ModelGate) -> None:
        """A request found ``room`` and goes: it holds a slot until ``release``."""
        gate.inflight += 1

    def release(self, gate: ModelGate) -> None:
        """A request that held a slot ended: hand the slot to the next waiting one."""
        gate.inflight -= 1
        if gate.queue.length:
            self._dispatch(gate)

    # ------------------------------------------------------------- handler
    def join(
        self, model: str, tenant: str | None, weight: int, priority: int
    ) -> Waiter | ErrorReply:
        """A handler request for ``model``: a slot now, a place in the queue, or 503 full."""
        gate = self._models.get(model)
        if gate is None:
            gate = self._models[model] = ModelGate(model, FairQueue(self.max_queue, fair=self.fair))
        waiter = Waiter(gate, model, tenant or NO_TENANT, weight, priority)
        queue = gate.queue
        capacity = self._capacity(model)
        if (not queue.length and gate.inflight < capacity) or (
            # Headroom: a tenant with nothing waiting is not the one saturating the model;
            # its interactive request goes now rather than after a slot frees (a backlogged
            # tenant always has something waiting, so it never takes the headroom).
            self.headroom
            and priority == INTERACTIVE
            and waiter.tenant not in queue.by_tenant
            and gate.inflight < capacity + math.ceil(capacity * self.headroom / 100)
        ):
            gate.inflight += 1  # room: no future, no wait
            waiter.holds = True
            return waiter
        if not gate.queue.push(waiter):
            return self._refusal(waiter, "queue_full")
        waiter.future = asyncio.get_running_loop().create_future()
        waiter.joined = asyncio.get_running_loop().time()
        QUEUED.labels(model, waiter.tenant).inc()
        return waiter

    async def wait(self, waiter: Waiter) -> ErrorReply | None:
        """Wait (bounded) until ``waiter`` holds a slot; None then, else the 503 to send.

        Called once the model is routable: the request kept its place in the queue
        while the model started or woke, and the bound counts from here.
        """
        future = waiter.future
        if future is None or future.done():
            return None
        self.poke(waiter.model)  # an instance may have come up since the last change
        if future.done():
            return None
        try:
            await await_within(asyncio.shield(future), self.max_wait)
        except TimeoutError:
            if future.done():  # let in at the last moment: take it
                return None
            self.leave(waiter)
            return self._refusal(waiter, "queue_timeout")
        return None

    def leave(self, waiter: Waiter) -> None:
        """The request ended (or gave up): free its slot, or its place in the queue."""
        gate = waiter.gate
        future = waiter.future
        if future is not None and not future.done():
            if gate.queue.remove(waiter):
                QUEUED.labels(waiter.model, waiter.tenant).dec()
            future.cancel()
            return
        if waiter.holds:  # (once only: a second leave is a no-op)
            waiter.holds = False
            self.release(gate)

    def poke(self, model: str) -> None:
        """Let waiting requests in if the model has room now (routes changed)."""
        gate = self._models.get(model)
        if gate is not None and gate.queue.length:
            self._dispatch(gate)

    # ------------------------------------------------------------ internals
    def _capacity(self, model: str) -> int:
        return self.slots * len(self._table.endpoints(model))

    def _dispatch(self, gate: ModelGate) -> None:
        capacity = self._capacity(gate.model)
        queue = gate.queue
        now = 0.0
        while gate.inflight < capacity:
            entry = queue.pop()
            if entry is None:
                return
            assert isinstance(entry, Waiter)
            QUEUED.labels(gate.model, entry.tenant).dec()
            future = entry.future
            if future is None or future.done():
                continue  # gone meanwhile (cannot happen: leaving removes it)
            gate.inflight += 1
            entry.holds = True
            future.set_result(None)
            if not now:
                now = future.get_loop().time()
            WAITED.labels(gate.model, PRIORITIES[entry.priority]).observe(now - entry.joined)

    def _changed(self, old: InstanceView | None, new: InstanceView | None) -> None:
        view = new if new is not None else old
        if view is not None:
            self.poke(view.served_name)

    def _refusal(self, waiter: Waiter, reason: str) -> ErrorReply:
        REFUSED.labels(waiter.model, waiter.tenant, reason).inc()
        retry = str(max(1, min(30, math.ceil(self.max_wait / 4)))).encode()
        if reason == "queue_full":
            message = (
                f"Model {waiter.model[:200]!r} is saturated and {self.max_queue} requests "
                "already wait for it (SARDEENZ_FAIR_QUEUE_MAX); retry later"
            )
        else:
            message = (
                f"Model {waiter.model[:200]!r} is saturated: no slot came free within "
                f"{self.max_wait:g} s (SARDEENZ_FAIR_QUEUE_WAIT_SECONDS); retry later"
            )
        return ErrorReply(
            503, message, "service_unavailable_error", reason, headers=[(b"retry-after", retry)]
        )


def requested_priority(value: bytes | str | None, ceiling: str) -> int | ErrorReply:
    """The priority class of a request: its header's, at most its tenant's (``ceiling``).

    Asking above the tenant's class is not an error: the tenant's class applies (a
    batch tenant cannot jump the queue by saying so). An unknown value is a 400.
    """
    top = priority_index(ceiling)
    top = INTERACTIVE if top is None else top
    if value is None:
        return top
    name = value.decode("latin-1") if isinstance(value, bytes) else value
    asked = priority_index(name.strip().lower())
    if asked is None:
        return ErrorReply(
            400,
            f"X-Sardeenz-Priority must be one of {', '.join(PRIORITIES)} (got {name[:40]!r})",
            "invalid_request_error",
            "invalid_priority",
        )
    return max(asked, top)
