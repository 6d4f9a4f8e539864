"""An operator's LoRA adapter load and unload, carried to the pods they concern.

The admin API runs on the leader (cluster/redirect.py), but an adapter lives in the
instances of whichever pods run its base:

* **load**: as the adapter's first request would (catalog/adapters.py): nothing to do
  when a pod holds it; else the rendezvous pod loads it, asked over
  ``/internal/adapters/{name}/load`` when it is another pod;
* **unload**: from every active instance holding it, on every pod (this one, then
  each peer whose heartbeat says it holds it, over ``/internal/adapters/{name}/unload``),
  refused with 409 ``adapter_in_use`` before anything is unloaded while any of them
  serves its requests. Each peer holding it is asked (``/internal/adapters/{name}/busy``)
  rather than trusted from its heartbeat: a heartbeat sent while the adapter's own load
  held it counts that load as a request in flight until the next one comes, and an
  unload right after a load was refused for it.

Not fenced: neither changes the cluster's control state, and any pod may ask (as a
request entering it may make its proxy ask for a load).
"""

from __future__ import annotations

from typing import Any, Protocol

from sardeenz.catalog.models import AdapterPlacement, AdapterView
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
        """Load ``name``; the answer shows where (a peer's load as that peer reports it:
        its heartbeat may not have come yet)."""
        pod = await self._here.load_adapter(name)
        if pod is None or pod == self._m.identity.pod_id:
            return self._here.adapter_view(name)
        client = self._m.client_for(pod)
        data = await client.call(pod, routes.ADAPTER_LOAD, timeout=self._timeout + 10, name=name)
        view = self._here.adapter_view(name)
        known = {(p.pod_id, p.instance_id) for p in view.loaded_on}
        for raw in data.get("loadedOn") or []:
            there = AdapterPlacement.model_validate(raw)
            if (there.pod_id, there.instance_id) not in known:
                view.loaded_on.append(there)
        if view.loaded_on and view.state == "unloaded":
            view.state = "active"
        return view

    async def unload(self, name: str) -> AdapterView:
        view = self._here.adapter_view(name)
        me = self._m.identity.pod_id if self._m.active else None
        peers = sorted({p.pod_id for p in view.loaded_on if p.pod_id not in (None, me)})
        busy = [
            f"{p.pod_id}/{p.instance_id}" if p.pod_id else p.instance_id
            for p in view.loaded_on
            if p.in_flight and p.pod_id in (None, me)
        ]
        for pod in peers:
            data = await self._m.client_for(pod).call(
                pod, routes.ADAPTER_BUSY, timeout=self._timeout + 10, name=name
            )
            busy += [f"{pod}/{iid}" for iid in data.get("busy") or []]
        if busy:
            raise Conflict(
                f"LoRA adapter {name!r} has requests in flight on {', '.join(busy)}; "
                "retry once they end",
                code="adapter_in_use",
            )
        await self._here.unload_adapter(name)
        gone: set[tuple[str | None, str]] = set()
        for pod in peers:
            client = self._m.client_for(pod)
            data = await client.call(
                pod, routes.ADAPTER_UNLOAD, timeout=self._timeout + 10, name=name
            )
            gone |= {(pod, str(iid)) for iid in data.get("unloadedFrom") or []}
        view = self._here.adapter_view(name)  # the peers' part: as their heartbeats said
        view.loaded_on = [p for p in view.loaded_on if (p.pod_id, p.instance_id) not in gone]
        if not view.loaded_on:
            view.state = "unloaded"
        return view

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        async def load(r: InternalRequest) -> dict[str, Any]:
            name = r.params["name"]
            await self._here.load_adapter(name, local_only=True)
            me = self._m.identity.pod_id
            mine = [p for p in self._here.adapter_view(name).loaded_on if p.pod_id == me]
            return {"name": name, "loadedOn": [p.model_dump(mode="json") for p in mine]}

        async def unload(r: InternalRequest) -> dict[str, Any]:
            name = r.params["name"]
            return {"name": name, "unloadedFrom": await self._here.unload_adapter(name)}

        async def busy(r: InternalRequest) -> dict[str, Any]:
            name = r.params["name"]
            me = self._m.identity.pod_id
            held = self._here.adapter_view(name).loaded_on
            mine = [p.instance_id for p in held if p.pod_id == me and p.in_flight]
            return {"name": name, "busy": mine}

        return [
            (routes.ADAPTER_LOAD, load),
            (routes.ADAPTER_UNLOAD, unload),
            (routes.ADAPTER_BUSY, busy),
        ]
