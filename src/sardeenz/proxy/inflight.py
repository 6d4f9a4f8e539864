"""Requests in flight per instance, so a sleep or an unload can drain them.

Why here and not in the metrics: the metrics count per served name, and what a
sleep or an unload needs is per *instance*: how many requests an engine is
serving right now, a way to wait until it serves none, and a way to end the
ones that outlast the wait with an error the client can tell apart from an
engine crash (``model_sleeping``, ``model_unloaded``).

Both relay paths register a request the moment they have picked its endpoint
(synchronously, in the same step as the routing-table pick), so a request can
never be routed to an instance and escape a drain that starts right after. A
registration is one ``set.add``; nothing here runs unless a request ends or an
operator sleeps or unloads a model.

``ProxyTraffic`` is what the supervisor sees (``runtime.supervisor.Traffic``):
the routing table's hold (not routable, requests held or refused) plus this
registry.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.proxy.routing import RoutingTable
from sardeenz.tasks import await_within


class Cuttable(Protocol):
    """A request in flight that can be ended early (the relay paths implement it)."""

    def cut(self) -> None:
        """End the request now; the client gets the instance's end code (see ``end_code``)."""


class Inflight:
    """Requests in flight, by instance id; event-loop thread only."""

    def __init__(self) -> None:
        self._by_instance: dict[str, set[Cuttable]] = {}
        self._idle: dict[str, asyncio.Event] = {}
        self._ending: dict[str, str] = {}

    def add(self, instance_id: str, request: Cuttable) -> None:
        reqs = self._by_instance.get(instance_id)
        if reqs is None:
            reqs = self._by_instance[instance_id] = set()
        reqs.add(request)

    def discard(self, instance_id: str, request: Cuttable) -> None:
        reqs = self._by_instance.get(instance_id)
        if reqs is None:
            return
        reqs.discard(request)
        if not reqs:
            del self._by_instance[instance_id]
            event = self._idle.pop(instance_id, None)
            if event is not None:
                event.set()

    def count(self, instance_id: str) -> int:
        return len(self._by_instance.get(instance_id, ()))

    async def wait_idle(self, instance_id: str, timeout: float) -> int:  # noqa: ASYNC109
        """Wait up to ``timeout`` s for no request in flight; returns how many are left."""
        if not self.count(instance_id):
            return 0
        event = self._idle.get(instance_id)
        if event is None:
            event = self._idle[instance_id] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await await_within(event.wait(), timeout)
        return self.count(instance_id)

    def end_code(self, instance_id: str) -> str | None:
        """Why requests of this instance end now, if an operator ends them; else None."""
        return self._ending.get(instance_id)

    def ending(self, instance_id: str, code: str | None) -> None:
        """From now on, a request of this instance that fails ends with ``code``."""
        if code is None:
            self._ending.pop(instance_id, None)
        else:
            self._ending[instance_id] = code

    def cut(self, instance_id: str, code: str) -> int:
        """End every request in flight on the instance with ``code``; returns how many."""
        self._ending[instance_id] = code
        reqs = list(self._by_instance.get(instance_id, ()))
        for req in reqs:
            req.cut()
        return len(reqs)


class ProxyTraffic:
    """The supervisor's handle on the traffic of its instances (see module doc)."""

    def __init__(self, table: RoutingTable, inflight: Inflight) -> None:
        self._table = table
        self._inflight = inflight

    def hold(self, instance_id: str, status: InstanceStatus) -> None:
        self._table.hold(instance_id, status)

    def release(self, instance: ModelInstance) -> None:
        self._table.release(instance)
        self._inflight.ending(instance.id, None)

    def in_flight(self, instance_id: str) -> int:
        return self._inflight.count(instance_id)

    async def drain(self, instance_id: str, timeout: float) -> int:  # noqa: ASYNC109
        return await self._inflight.wait_idle(instance_id, timeout)

    def ending(self, instance_id: str, code: str) -> None:
        self._inflight.ending(instance_id, code)

    def cut(self, instance_id: str, code: str) -> int:
        return self._inflight.cut(instance_id, code)

    def forget(self, instance_id: str) -> None:
        self._table.remove(instance_id)
        self._inflight.ending(instance_id, None)


def in_flight_by_model(table: RoutingTable, inflight: Inflight) -> dict[str, int]:
    """Requests in flight on this pod's own instances, per served name.

    Counted where the engine runs: a request relayed to another pod is that pod's
    (its hop registers it there), so summing the pods counts each request once."""
    out: dict[str, int] = {}
    for view in table.instances():
        n = inflight.count(view.instance_id)
        if n:
            out[view.served_name] = out.get(view.served_name, 0) + n
    return out
