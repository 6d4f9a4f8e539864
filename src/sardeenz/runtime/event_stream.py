"""One instance's event stream as SSE items: the same items for a local client and a relay.

``open_instance_stream`` is what ``GET /api/v1/models/instances/{id}/events`` serves for
an instance of this pod, and what this pod sends over ``/internal`` when another pod
relays that stream to its client (cluster/instance_routes.py): building both from one
function is what makes a relayed stream indistinguishable from a local one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from sardeenz.errors import NotFound
from sardeenz.events import (
    CatalogEvent,
    Event,
    EventBus,
    LogEvent,
    PhaseEvent,
    RemovedEvent,
    StatusEvent,
)
from sardeenz.runtime.supervisor import Supervisor

SseItem = dict[str, str]
"""``{"event": name, "data": JSON text}``: what sse-starlette sends as one event."""


def sse_item(event: Event) -> SseItem:
    """The SSE form of a bus event (the names and fields docs/api.md lists)."""
    if isinstance(event, LogEvent):
        data: dict[str, Any] = {
            "instanceId": event.instance_id,
            "line": event.line,
            "timestamp": event.at.isoformat(),
        }
        return {"event": "log", "data": orjson.dumps(data).decode()}
    if isinstance(event, StatusEvent):
        data = {
            "instanceId": event.instance_id,
            "status": event.instance.status.value,
            "previous": event.previous.value if event.previous else None,
            "errorMessage": event.instance.error_message,
            "instance": event.instance.model_dump(mode="json"),
            "timestamp": event.at.isoformat(),
        }
        return {"event": "status", "data": orjson.dumps(data).decode()}
    if isinstance(event, PhaseEvent):
        data = {
            "instanceId": event.instance_id,
            "status": event.instance.status.value,
            "loadPhase": event.instance.load_phase,
            "instance": event.instance.model_dump(mode="json"),
            "timestamp": event.at.isoformat(),
        }
        return {"event": "phase", "data": orjson.dumps(data).decode()}
    if isinstance(event, CatalogEvent):
        data = {
            "instanceId": event.instance_id,
            "model": event.model,
            "action": event.action,
            "reason": event.reason,
            "message": event.message,
            **event.details,
            "timestamp": event.at.isoformat(),
        }
        return {"event": "catalog", "data": orjson.dumps(data).decode()}
    data = {
        "instanceId": event.instance_id,
        "status": "removed",
        "instance": event.instance.model_dump(mode="json"),
        "timestamp": event.at.isoformat(),
    }
    return {"event": "removed", "data": orjson.dumps(data).decode()}


def open_instance_stream(
    supervisor: Supervisor, bus: EventBus, instance_id: str, replay: bool
) -> AsyncIterator[SseItem]:
    """The stream of one local instance; raises 404 ``instance_not_found`` now, not later.

    The subscription is taken when the stream starts (a stream never started holds
    none), before the backlog is read, so no line falls between the replayed lines and
    the live ones. The stream ends after ``removed``.
    """
    supervisor.get(instance_id)

    async def stream() -> AsyncIterator[SseItem]:
        sub = bus.subscribe(instance_id)
        try:
            try:
                current = supervisor.get(instance_id)
                backlog = supervisor.log_lines(instance_id) if replay else []
            except NotFound:
                return  # removed between the request and the first read
            for line in backlog:
                data = {"instanceId": instance_id, "line": line, "replayed": True}
                yield {"event": "log", "data": orjson.dumps(data).decode()}
            yield sse_item(StatusEvent(current, None))
            while True:
                event = await sub.get()
                yield sse_item(event)
                if isinstance(event, RemovedEvent):
                    return
        finally:
            sub.close()

    return stream()
