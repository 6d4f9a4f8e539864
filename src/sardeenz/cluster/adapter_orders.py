"""An operator's LoRA adapter load and unload, carried to the pods they concern.

The admin API runs on the leader (cluster/redirect.py), but an adapter lives in the
instances of whichever pods run its base:

* **load**: as the adapter's first request would (catalog/adapters.py): nothing to do
  when a pod holds it; else the rendezvous pod loads it, asked over
  ``/internal/adapters/{name}/load`` when it is another pod;
* **unload**: from every active instance holding it, on every pod (this one, then
  each peer whose heartbeat says it holds it, over ``/internal/adapters/{name}/unload``),
  refused with 409 ``adapter_in_use`` before anything is unloaded while any of them
  serves its requests (as far as the heartbeats tell; each pod checks its own again).

Not fenced: neither changes the cluster's control state, and any pod may ask (as a
request entering it may make its proxy ask for a load).
"""

from __future__ import annotations

from typing import Any, Protocol

from sardeenz.catalog.models import AdapterView
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.errors import Conflict

__all__ = ["AdapterOrders"]


class AdapterHands(Protocol):
    """This pod's side (catalog/demand.py ``OnDemand``)."""

    async def load_adapter(self, name: str, *, local_only: bool = False) -> str | None: ...

    async def unload_adapter(self, name: str) -> list[str]: ...

    def adapter_view(self, name: str) -> AdapterView: ...


class AdapterOrders:
    def __init__(self, membership: Membership, here: AdapterHands, timeout: float) -> None:
        self._m = membership
        self._here = here
        self._timeout = timeout
        """A load waits for its base to start, like a first request (its max wait)."""

    async def load(self, name: str) -> AdapterView:
        pod = await self._here.load_adapter(name)
        if pod is not None and pod != self._m.identity.pod_id:
            client = self._m.client_for(pod)
            await client.call(pod, routes.ADAPTER_LOAD, timeout=self._timeout + 10, name=name)
            self._m.beat_soon()
        return self._here.adapter_view(name)

    async def unload(self, name: str) -> AdapterView:
        view = self._here.adapter_view(name)
        me = self._m.identity.pod_id if self._m.active else None
        peers = sorted({p.pod_id for p in view.loaded_on if p.pod_id not in (None, me)})
        busy = [f"{p.pod_id}/{p.instance_id}" for p in view.loaded_on if p.in_flight]
        if busy:
            raise Conflict(
                f"LoRA adapter {name!r} has requests in flight on {', '.join(busy)}; "
                "retry once they end",
                code="adapter_in_use",
            )
        await self._here.unload_adapter(name)
        for pod in peers:
            client = self._m.client_for(pod)
            await client.call(pod, routes.ADAPTER_UNLOAD, timeout=self._timeout + 10, name=name)
        return self._here.adapter_view(name)

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        async def load(r: InternalRequest) -> dict[str, Any]:
            name = r.params["name"]
            await self._here.load_adapter(name, local_only=True)
            return {"name": name, "loaded": True}

        async def unload(r: InternalRequest) -> dict[str, Any]:
            name = r.params["name"]
            return {"name": name, "unloadedFrom": await self._here.unload_adapter(name)}

        return [(routes.ADAPTER_LOAD, load), (routes.ADAPTER_UNLOAD, unload)]
