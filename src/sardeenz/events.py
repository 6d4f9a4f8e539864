"""In-process event bus: status and log events, fanned out to SSE clients.

Publishing never blocks and never waits on a slow subscriber: each subscriber
has a bounded queue and, when it is full, loses its oldest events (a log view
that cannot keep up should skip lines, not stall the supervisor).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from sardeenz.domain import InstanceStatus, ModelInstance, utcnow


@dataclass(frozen=True, slots=True)
class StatusEvent:
    instance: ModelInstance
    previous: InstanceStatus | None
    kind: Literal["status"] = "status"
    at: datetime = field(default_factory=utcnow)

    @property
    def instance_id(self) -> str:
        return self.instance.id


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    """A starting instance's ``load_phase`` moved on; its status did not change.

    An event of its own, not a ``starting -> starting`` StatusEvent: clients that follow
    status transitions (and the routing table) see each transition once.
    """

    instance: ModelInstance
    kind: Literal["phase"] = "phase"
    at: datetime = field(default_factory=utcnow)

    @property
    def instance_id(self) -> str:
        return self.instance.id


@dataclass(frozen=True, slots=True)
class LogEvent:
    instance_id: str
    line: str
    kind: Literal["log"] = "log"
    at: datetime = field(default_factory=utcnow)


@dataclass(frozen=True, slots=True)
class RemovedEvent:
    """The instance left the registry (unloaded)."""

    instance: ModelInstance
    kind: Literal["removed"] = "removed"
    at: datetime = field(default_factory=utcnow)

    @property
    def instance_id(self) -> str:
        return self.instance.id


@dataclass(frozen=True, slots=True)
class CatalogEvent:
    """On-demand handling acted on an instance of a catalog model: an idle sleep or
    unload, an eviction (sleep or unload) to make room for another model, a warm-up.

    ``details`` carries what the action was for (``forModel``), the memory needed and
    freed in bytes, and the like: camelCase keys, shown as they are by the dashboard.
    """

    instance_id: str
    model: str
    action: str
    """``sleep``, ``unload`` or ``warmup``."""
    reason: str
    """``idle``, ``evicted`` or ``wake``."""
    message: str
    details: dict[str, object] = field(default_factory=dict)
    kind: Literal["catalog"] = "catalog"
    at: datetime = field(default_factory=utcnow)


Event = StatusEvent | PhaseEvent | LogEvent | RemovedEvent | CatalogEvent


class Subscription:
    """One subscriber's bounded queue; iterate it, then close it."""

    def __init__(self, bus: EventBus, maxsize: int, instance_id: str | None) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self.instance_id = instance_id
        self.dropped = 0

    def offer(self, event: Event) -> None:
        if self.instance_id is not None and _instance_of(event) != self.instance_id:
            return
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.dropped += 1

    async def get(self) -> Event:
        return await self._queue.get()

    def close(self) -> None:
        self._bus._subscribers.discard(self)

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            while True:
                yield await self._queue.get()
        finally:
            self.close()


def _instance_of(event: Event) -> str:
    return event.instance_id


class EventBus:
    def __init__(self, queue_size: int = 1000) -> None:
        self._subscribers: set[Subscription] = set()
        self._queue_size = queue_size

    def subscribe(self, instance_id: str | None = None) -> Subscription:
        sub = Subscription(self, self._queue_size, instance_id)
        self._subscribers.add(sub)
        return sub

    def publish(self, event: Event) -> None:
        for sub in tuple(self._subscribers):
            sub.offer(event)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
