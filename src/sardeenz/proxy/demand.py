"""The proxy's hook for models that start on demand (implemented by ``catalog.demand``).

The proxy asks it only when a request misses the routing table, so the hit path
(and the express path, which only takes requests for active instances) never
pays for it. Defined here, as a protocol, so the proxy does not import the
catalog: the catalog is a service above it.
"""

from __future__ import annotations

from typing import Protocol

from sardeenz.domain import InstanceStatus
from sardeenz.proxy.routing import Endpoint
from sardeenz.proxy.wire import ErrorReply

_STATE_ORDER = (
    InstanceStatus.ACTIVE,
    InstanceStatus.STARTING,
    InstanceStatus.SLEEPING,
    InstanceStatus.STOPPING,
    InstanceStatus.FAILED,
)


class Demand(Protocol):
    @property
    def version(self) -> int:
        """Changes whenever ``names()`` may answer differently."""

    def resolve(self, name: str) -> str | None:
        """The served name a request's ``model`` stands for (itself or an alias), or None."""

    def names(self) -> list[str]:
        """Every served name that can start on demand, sorted."""

    def state(self, name: str) -> str | None:
        """The state of a catalog model that has no instances (an external server:
        ``starting`` until its first health check, ``active`` or ``unreachable``; a LoRA
        adapter: ``active``/``sleeping`` with its base while loaded, else ``unloaded``),
        or None to take it from the instances."""

    def parent(self, name: str) -> str | None:
        """The base model of a LoRA adapter entry; None for any other name."""

    async def wait(self, name: str, *, local_only: bool = False) -> Endpoint | ErrorReply:
        """Start ``name`` if nothing of it is running or coming, and wait for it (bounded).

        ``local_only``: another pod forwarded the request (its one hop is made), so a
        LoRA adapter is served by this pod's instances only."""

    def release(self, name: str, ep: Endpoint) -> None:
        """The request ``wait`` answered with ``ep`` ended (a LoRA adapter's in-flight
        count drops; nothing for other models)."""


def model_state(statuses: set[InstanceStatus]) -> str:
    """What ``GET /v1/models`` shows in ``state`` for a model with these instances."""
    for status in _STATE_ORDER:
        if status in statuses:
            return status.value
    return "unloaded"
